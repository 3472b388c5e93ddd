"""Tests of what every corpus reader keeps of a pair: Japanese joined, Latin words kept."""

from tfblocks.text import pairs


def test_remove_japanese_spaces_keeps_latin_words():
    assert (
        pairs.remove_japanese_spaces(" 私 は Windows 10 を 使 う 。 ") == "私はWindows 10を使う。"
    )
    assert pairs.remove_japanese_spaces("ＩＴ 企業 で 働 く") == "ＩＴ企業で働く"
    assert pairs.remove_japanese_spaces("Windows  10\tを 使 う") == "Windows 10を使う"
