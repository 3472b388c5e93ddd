"""Tests of the corpus readers: pairs, summaries, and loud errors on bad input."""

import pathlib

import pytest

from tfblocks.text import corpus, pairs

DATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "small_parallel_enja"


def _write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_read_parallel_joins_japanese_and_counts_empty_pairs(tmp_path):
    ja = _write(
        tmp_path / "x.ja",
        "私 は テニス 部員 で す 。\n\n彼 は CD プレーヤー を 買 っ た 。\r\n空\n",
    )
    en = _write(tmp_path / "x.en", "i 'm in the tennis club .\nempty\nhe bought a cd player .\n\n")
    result = corpus.read_parallel(ja, en)
    assert result.pairs == [
        ("私はテニス部員です。", "i 'm in the tennis club ."),
        ("彼はCDプレーヤーを買った。", "he bought a cd player ."),
    ]
    assert (result.lines, result.skipped_empty, len(result)) == (4, 2, 2)
    assert list(result) == result.pairs and result[1] == result.pairs[1]
    assert "4 lines, 2 pairs, 2 empty pairs skipped" in result.summary()


def test_read_parallel_keeps_spaces_when_asked(tmp_path):
    ja = _write(tmp_path / "x.ja", "私 は 学生 で す 。\n")
    en = _write(tmp_path / "x.en", "i am  a student .\n")
    kept = corpus.read_parallel(ja, en, remove_source_spaces=False)
    assert kept.pairs == [("私 は 学生 で す 。", "i am  a student .")]
    swapped = corpus.read_parallel(en, ja)  # the .ja side is joined whichever side it is
    assert swapped.pairs == [("i am  a student .", "私は学生です。")]


def test_read_sentences_joins_as_read_parallel_does(tmp_path):
    ja = _write(tmp_path / "test.ja", "\ufeff私 は 学生 で す 。\r\n\n彼 は CD を 買 っ た 。\n")
    en = _write(tmp_path / "test.en", "i am  a student .\n\nhe bought a cd .\n")
    joined = corpus.read_sentences(ja)
    assert joined == ["私は学生です。", "", "彼はCDを買った。"]  # empty lines kept, in order
    assert corpus.read_parallel(ja, en).pairs == list(
        zip([s for s in joined if s], corpus.read_sentences(en)[::2], strict=True)
    )
    assert corpus.read_sentences(ja, remove_spaces=False)[0] == "私 は 学生 で す 。"
    assert corpus.read_sentences(en, remove_spaces=True)[0] == "i am a student."  # forced
    assert corpus.read_sentences(en)[0] == "i am  a student ."  # not *.ja: as it is
    with pytest.raises(TypeError, match=r"remove_spaces=.yes."):
        corpus.read_sentences(ja, remove_spaces="yes")


def test_different_line_counts_name_both_files(tmp_path):
    ja = _write(tmp_path / "a.ja", "一\n二\n三\n")
    en = _write(tmp_path / "a.en", "one\ntwo\n")
    with pytest.raises(ValueError, match=r"a\.ja has 3 lines but .*a\.en has 2 lines"):
        corpus.read_parallel(ja, en)


def test_invalid_utf8_names_file_and_line(tmp_path):
    ja = _write(tmp_path / "b.ja", "一\n二\n".encode() + b"\xff\xfe bad\n")
    en = _write(tmp_path / "b.en", "one\ntwo\nthree\n")
    with pytest.raises(ValueError, match=r"b\.ja, line 3: invalid UTF-8"):
        corpus.read_parallel(ja, en)


def test_read_tsv_manythings_layout(tmp_path):
    path = _write(
        tmp_path / "jpn.txt",
        "Hi.\tこんにちは。\tCC-BY 2.0 (France) #1\n\nGo.\t\tCC-BY\nRun!\t走れ！\tCC-BY\n",
    )
    result = corpus.read_tsv(path, src_column=1, tgt_column=0)
    assert result.pairs == [("こんにちは。", "Hi."), ("走れ！", "Run!")]
    assert (result.lines, result.skipped_empty) == (4, 2)


def test_read_tsv_too_few_columns_names_line(tmp_path):
    path = _write(tmp_path / "pairs.tsv", "a\tb\tc\nd\te\n")
    assert len(corpus.read_tsv(path, 0, 1)) == 2
    with pytest.raises(ValueError, match=r"pairs\.tsv, line 2: expected at least 3 .* found 2"):
        corpus.read_tsv(path, 2, 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"src_column": -1, "tgt_column": 0}, "src_column=-1"),
        ({"src_column": 0, "tgt_column": "1"}, "tgt_column='1'"),
        ({"src_column": 1, "tgt_column": 1}, "both are 1"),
        ({"src_column": 0, "tgt_column": 1, "remove_source_spaces": "yes"}, "='yes'"),
    ],
)
def test_read_tsv_bad_arguments(tmp_path, kwargs, match):
    path = _write(tmp_path / "p.tsv", "a\tb\n")
    with pytest.raises((TypeError, ValueError), match=match):
        corpus.read_tsv(path, **kwargs)


@pytest.mark.skipif(not DATA.is_dir(), reason="small_parallel_enja is not beside the checkout")
def test_small_parallel_enja_splits():
    counts = {}
    for split in ("train", "dev", "test"):
        result = corpus.read_parallel(DATA / f"{split}.ja", DATA / f"{split}.en")
        counts[split] = (len(result), result.skipped_empty)
        assert not [ja for ja, _ in result.pairs if " " in ja]  # raw Japanese, as users type it
        assert all(" " in en for _, en in result.pairs[:100])  # English keeps its spaces
    assert counts == {"train": (50_000, 0), "dev": (500, 0), "test": (500, 0)}
    assert result.pairs[0][0] == pairs.remove_japanese_spaces(
        (DATA / "test.ja").read_text(encoding="utf-8").split("\n")[0]
    )


def test_random_unicode_lines_come_back_one_for_one(tmp_path):
    # Property: whatever a line holds but "\n" (other line breaks such as U+2028, NUL,
    # combining marks, whitespace of every kind, 5000 characters), a reader gives one line
    # per line, as written; only a final "\r" (a CRLF file) and a leading BOM go.
    from tests.fixtures import random_unicode_lines

    for seed in range(3):
        lines = random_unicode_lines(200, seed=seed)
        want = [line.rstrip("\r") for line in lines]
        want[0] = want[0].removeprefix("\ufeff")
        for end in ("\n", "\r\n"):
            path = _write(tmp_path / f"{seed}.txt", (end.join(lines) + end).encode("utf-8"))
            assert corpus.read_sentences(path) == want, (seed, end)
        joined = corpus.read_sentences(_write(tmp_path / f"{seed}.ja", path.read_bytes()))
        assert len(joined) == len(lines)
        assert [not line.strip() for line in joined] == [not line.strip() for line in want]
        pairs = corpus.read_parallel(path, path)
        assert pairs.lines == len(lines) == len(pairs) + pairs.skipped_empty
        assert pairs.pairs == [(s.strip(), s.strip()) for s in want if s.strip()]
    # A raw surrogate is no UTF-8: the file and the line are named.
    lines[7] = "x\ud800y"
    path = _write(tmp_path / "bad.txt", "\n".join(lines).encode("utf-8", "surrogatepass"))
    with pytest.raises(ValueError, match=r"bad\.txt, line 8: invalid UTF-8 .*b'\\xed'"):
        corpus.read_sentences(path)
