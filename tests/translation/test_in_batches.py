"""`translate_in_batches`: length-sorted batches, translations back in input order."""

import pytest

from tfblocks.translation.in_batches import translate_in_batches

LINES = ["a much longer line", "", "mid line", "x", "longest line of all here", "ab"]


def test_batches_are_sorted_by_length_and_output_keeps_input_order():
    batches, reported = [], []

    def translate(batch):
        batches.append(list(batch))
        return [f"<{s}>" for s in batch]

    out = translate_in_batches(translate, LINES, 4, progress=lambda d, t: reported.append((d, t)))
    assert out == [f"<{s}>" for s in LINES]
    assert batches == [
        ["", "x", "ab", "mid line"],
        ["a much longer line", "longest line of all here"],
    ]
    assert reported == [(4, 6), (6, 6)]


def test_input_order_when_not_sorting():
    batches = []

    def translate(batch):
        batches.append(list(batch))
        return list(batch)

    assert translate_in_batches(translate, LINES, 4, sort_by_length=False) == LINES
    assert batches == [LINES[:4], LINES[4:]]
    assert translate_in_batches(translate, [], 4) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size=0"):
        translate_in_batches(list, LINES, 0)
    with pytest.raises(ValueError, match="returned 1 translations for 2 lines"):
        translate_in_batches(lambda batch: batch[:1], ["a", "b"], 2)
