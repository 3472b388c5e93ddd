"""Corpus files of any language pair: plain, gzipped or sharded files read as one, explicit
lists and globs, TSV columns, and an error naming the file (and line) for every input that
cannot be read."""

import gzip
import re

import pytest

from tfblocks.text import corpus, lines

PAIRS = [(f"satz {i} ist kurz .", f"sentence {i} is short .") for i in range(10)]


def _write(path, text, compress=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def _side(pairs, side):
    return "".join(pair[side] + "\n" for pair in pairs)


def _corpus(folder, form, splits=("train", "dev", "test")):
    """`{split}.{de,en}` of PAIRS in `folder` as `form`: plain, gz or shards (3, last gz)."""
    folder.mkdir(exist_ok=True)
    for split in splits:
        for side, language in enumerate(("de", "en")):
            name = f"{split}.{language}"
            if form == "plain":
                _write(folder / name, _side(PAIRS, side))
            elif form == "gz":
                _write(folder / f"{name}.gz", _side(PAIRS, side), compress=True)
            else:
                for i, part in enumerate((PAIRS[:4], PAIRS[4:5], PAIRS[5:])):
                    gz = i == 2
                    shard = folder / f"{name}-{i:05d}-of-00003{'.gz' if gz else ''}"
                    _write(shard, _side(part, side), compress=gz)
    return folder


def test_gzipped_and_sharded_corpora_read_as_the_plain_one(tmp_path):
    want = {split: PAIRS for split in ("train", "dev", "test")}
    for form in ("plain", "gz", "shards"):
        folder = _corpus(tmp_path / form, form)
        assert corpus.load_splits(folder, source="de", target="en") == want, form
    shards = lines.language_files(tmp_path / "shards", "train", "de")
    assert [re.sub(r".*-(\d+)-of.*", r"\1", p) for p in shards] == ["00000", "00001", "00002"]
    assert lines.file_language(shards[2]) == "de" and lines.file_language("x/dev.ja.gz") == "ja"


def test_explicit_files_and_globs_in_order(tmp_path):
    folder = _corpus(tmp_path / "shards", "shards", splits=("train",))
    globbed = lines.expand_paths("--train-source", str(folder / "train.de-*"))
    listed = lines.expand_paths("--train-target", ",".join(sorted(map(str, folder.glob("*.en-*")))))
    assert [p.rsplit("-", 3)[1] for p in globbed] == ["00000", "00001", "00002"]
    files = {split: (globbed, listed) for split in ("train", "dev", "test")}
    assert corpus.load_splits(source="de", target="en", files=files)["dev"] == PAIRS
    with pytest.raises(ValueError, match=r"--dev-source.*nothing\*' matches no file"):
        lines.expand_paths("--dev-source", str(tmp_path / "nothing*"))
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "dev.xx"))):
        lines.expand_paths("--dev-source", f"{globbed[0]},{tmp_path / 'dev.xx'}")
    with pytest.raises(ValueError, match="--dev-source=','"):
        lines.expand_paths("--dev-source", ",")


def test_japanese_is_joined_only_on_a_ja_side(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        _write(folder / f"{split}.ja", "私 は 学生 で す 。\n")
        _write(folder / f"{split}.ko", "저 는 학생 입니다 .\n")
    jako = corpus.load_splits(folder, source="ja", target="ko")["test"]
    koja = corpus.load_splits(folder, source="ko", target="ja")["test"]
    assert jako == [("私は学生です。", "저 는 학생 입니다 .")] == [p[::-1] for p in koja]


def test_tsv_columns_of_any_pair(tmp_path):
    path = _write(tmp_path / "p.tsv", "".join(f"id{i}\tde {i}\ten {i}\n" for i in range(100)))
    splits = corpus.load_splits(tsv=path, source="de", target="en", tsv_columns=(1, 2))
    assert sorted(splits["train"] + splits["dev"] + splits["test"]) == sorted(
        (f"de {i}", f"en {i}") for i in range(100)
    )
    # No column is assumed, for ja and en (manythings' layout) neither: the same rule and
    # message as tfblocks-train --tsv's, in load_splits' terms.
    needed = f"`tsv_columns` is needed: tsv={str(path)!r} has no first line naming 'de' and 'en'"
    with pytest.raises(ValueError, match=re.escape(needed)):
        corpus.load_splits(tsv=path, source="de", target="en")
    hint = "give tsv_columns=(N, M) (0-based) (a manythings file: tsv_columns=(1, 0))."
    with pytest.raises(ValueError, match=re.escape(hint)):
        corpus.load_splits(tsv=path)  # ja -> en
    for columns in [(1, 1), (0, -1), (1,), 2]:
        with pytest.raises(ValueError, match=re.escape(f"got tsv_columns={columns!r}")):
            corpus.load_splits(tsv=path, source="de", target="en", tsv_columns=columns)
    with pytest.raises(ValueError, match="source='x/y'"):
        corpus.load_splits(tsv=path, source="x/y", target="en", tsv_columns=(1, 2))


def test_uneven_sides_name_both_files_and_the_line_where_one_ends(tmp_path):
    de = _write(tmp_path / "train.de", "a\nb\nc\nd\n")
    en = _write(tmp_path / "train.en", "A\nB\n")
    message = (
        f"{de} has 4 lines but {en} has 2 lines ({en} ends after line 2; {de} goes on at line 3)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        corpus.read_parallel(de, en)
    # Shards are aligned shard by shard: a short first shard is found at its end.
    sources = [_write(tmp_path / f"s-{i}.de", "a\nb\n") for i in range(2)]
    targets = [_write(tmp_path / "t-0.en", "A\n"), _write(tmp_path / "t-1.en", "B\nC\nD\n")]
    with pytest.raises(
        ValueError, match=re.escape(f"{targets[0]} ends after line 1; {sources[0]}")
    ):
        corpus.read_parallel(sources, targets)
    # Sides of different file counts are read as one stream each.
    with pytest.raises(
        ValueError,
        match=re.escape(f"{sources[0]} ends after line 2; {targets[1]} goes on at line 2"),
    ):
        corpus.read_parallel(sources[:1], targets)


def test_every_unreadable_input_is_named(tmp_path):
    folder = _corpus(tmp_path / "c", "plain")
    with pytest.raises(FileNotFoundError, match=re.escape(str(folder / "train.xx"))):
        corpus.load_splits(folder, source="de", target="xx")
    _write(folder / "dev.de.gz", "x\n", compress=True)
    with pytest.raises(ValueError, match=r"dev\.de is given more than once"):
        corpus.load_splits(folder, source="de", target="en")
    (folder / "dev.de.gz").unlink()
    _write(folder / "train.de-00001-of-00002", "x\n")
    _write(folder / "train.de-00000-of-00002", "")  # an empty shard
    (folder / "train.de").rename(folder / "saved")
    en = [_write(tmp_path / f"en-{i}", "y\n") for i in range(2)]
    shards = lines.language_files(folder, "train", "de")
    with pytest.raises(ValueError, match=re.escape(f"{shards[0]} is empty: a shard")):
        corpus.read_parallel(shards, en)
    (folder / "train.de-00000-of-00002").unlink()
    with pytest.raises(ValueError, match=r"shards of .*train\.de are incomplete .*0 to 1 of 2"):
        lines.language_files(folder, "train", "de")
    fake = _write(tmp_path / "fake.de.gz", "not gzip\n")
    with pytest.raises(ValueError, match=re.escape(f"{fake} is named .gz but is not gzip data")):
        corpus.read_parallel(fake, en[0])
    cut = _write(tmp_path / "cut.de.gz", gzip.compress(b"a\nb\n" * 1000)[:-30])
    with pytest.raises(ValueError, match=re.escape(f"{cut}: the gzip data is damaged or ends")):
        corpus.read_parallel(cut, cut)
    bad = _write(tmp_path / "bad.en.gz", b"ok\n\xffno\n", compress=True)
    with pytest.raises(ValueError, match=re.escape(f"{bad}, line 2: invalid UTF-8")):
        corpus.read_parallel(bad, bad)
    empty = corpus.read_parallel(_write(tmp_path / "e.de", ""), _write(tmp_path / "e.en", ""))
    assert (empty.lines, len(empty)) == (0, 0)  # a split's emptiness is its reader's to judge
