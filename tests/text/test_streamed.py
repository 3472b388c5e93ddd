"""Tests of the streamed corpus: read from its files when iterated, known by them, sampled
in two passes with the pairs and the errors that iterating gives."""

import gzip
import random
import re

import pytest

from tfblocks.text import corpus, lines, streamed


def test_a_streamed_corpus_is_known_by_its_files_not_read(tmp_path, monkeypatch):
    # load_splits(stream_train=True): the train split is read only when iterated, and its
    # fingerprint comes from the files' names, sizes, first and last bytes.
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.xx").write_text("a b\nc d\n\ne\n", encoding="utf-8")
        (tmp_path / f"{split}.yy").write_text("A B\nC D\nx\nE\n", encoding="utf-8")
    splits = corpus.load_splits(tmp_path, source="xx", target="yy", stream_train=True)
    train = splits["train"]
    assert isinstance(train, streamed.StreamedPairs) and splits["dev"] == list(train)
    assert list(train) == [("a b", "A B"), ("c d", "C D"), ("e", "E")]
    monkeypatch.setattr(streamed, "FINGERPRINT_BYTES", 4)  # reads 4 bytes at each end
    before = train.fingerprint()
    assert train.fingerprint() == before != train.limited(2).fingerprint()
    path = tmp_path / "train.yy"
    path.write_text("A B\nC X\nx\nE\n", encoding="utf-8")  # the middle: not read
    assert train.fingerprint() == before
    for text in ("A B\nC X\nx\nF\n", "A B\nC X\nx\nE\nG\n", "Z B\nC X\nx\nE\n"):
        path.write_text(text, encoding="utf-8")  # the last or first bytes, or the size
        assert train.fingerprint() != before, text
    path.write_text("A B\n", encoding="utf-8")  # misaligned: found while streaming
    with pytest.raises(ValueError, match=r"train\.yy has 1 lines"):
        list(train)
    with pytest.raises(ValueError, match="`stream_train` streams line-aligned train files"):
        corpus.load_splits(tsv=tmp_path / "p.tsv", stream_train=True)


@pytest.mark.parametrize("block", [7, 1 << 23])  # lines cut by blocks, or one block a file
def test_a_streamed_sample_holds_pairs_as_iterating_gives_them(tmp_path, monkeypatch, block):
    # StreamedPairs.sample counts the files' lines, then takes the drawn ones: the pairs are
    # those iteration yields (BOM, CRLF, gzip, shards, joined Japanese, empty sides
    # skipped), in order, and what cannot be read is refused with iteration's message.
    monkeypatch.setattr(lines, "_BLOCK", block)
    rng = random.Random(5)
    source = [" ".join(rng.choice("アイウ") for _ in range(rng.randint(1, 4))) for _ in range(60)]
    target = [f"w{i} x" if i % 13 != 5 else "" for i in range(60)]  # 5 empty: skipped
    (tmp_path / "s-0").write_bytes(("\ufeff" + "\r\n".join(source[:25]) + "\r\n").encode())
    (tmp_path / "s-1.gz").write_bytes(gzip.compress("\n".join(source[25:]).encode()))
    (tmp_path / "t-0").write_text("\n".join(target[:25]) + "\n", encoding="utf-8")
    (tmp_path / "t-1").write_text("\n".join(target[25:]) + "\n", encoding="utf-8")
    sources = (str(tmp_path / "s-0"), str(tmp_path / "s-1.gz"))
    pairs = streamed.StreamedPairs(sources, (str(tmp_path / "t-0"), str(tmp_path / "t-1")), True)
    every = list(pairs)
    assert len(every) == 55 and every[0] == (source[0].replace(" ", ""), "w0 x")
    assert pairs.sample(60) == every and pairs.sample(1000, seed=9) == every
    drawn = pairs.sample(20, seed=1)
    assert 15 <= len(drawn) <= 20 and drawn == [p for p in every if p in drawn]
    assert drawn == pairs.sample(20, seed=1) != pairs.sample(20, seed=2)
    assert pairs.limited(10).sample(4) == [
        p for p in every[:10] if p in pairs.limited(10).sample(4)
    ]

    def same_error(path, data):
        path.write_bytes(data)
        with pytest.raises(ValueError) as iterated:
            list(pairs)
        with pytest.raises(ValueError, match=re.escape(str(iterated.value))):
            pairs.sample(5)

    same_error(tmp_path / "t-1", "\n".join(target[25:-1]).encode())  # one line short
    same_error(tmp_path / "t-1", b"a\n" * 34 + b"\xff\n")  # invalid UTF-8
    same_error(tmp_path / "t-1", b"")  # an empty shard
    same_error(tmp_path / "s-1.gz", b"not gzip")
