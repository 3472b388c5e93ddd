"""Tests of make_dataset(shapes="packed") (tfblocks.text.packing): first-fit decreasing rows,
every pair once, the segment features, seeded and sharded rows."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import tokenized_rows
from tfblocks.ids import PAD_ID
from tfblocks.text import dataset as text_dataset
from tfblocks.text import packing

pytestmark = pytest.mark.heavy  # many tf.data pipelines: scheduled first


def _unpack(features):
    """The `(source, target)` id tuples of packed rows, read back from the segment features."""
    found = []
    arrays = {name: value.numpy() for name, value in features.items()}
    for r in range(arrays["inputs"].shape[0]):
        sides = []
        for side in ("inputs", "targets"):
            ids, segments = arrays[side][r], arrays[f"{side}_segmentation"][r]
            positions = arrays[f"{side}_position"][r]
            assert ((ids != PAD_ID) == (segments > 0)).all()  # padding is exactly segment 0
            pieces = {}
            for segment in sorted(set(segments[segments > 0].tolist())):
                at = np.flatnonzero(segments == segment)
                assert (np.diff(at) == 1).all()  # a pair's positions are contiguous
                np.testing.assert_array_equal(positions[at], np.arange(len(at)))
                pieces[segment] = tuple(int(i) for i in ids[at])
            sides.append(pieces)
        assert sides[0].keys() == sides[1].keys()  # every pair has both sides in the row
        found += [(sides[0][k], sides[1][k]) for k in sides[0]]
    return found


def test_packed_rows_hold_every_pair_once_in_one_shape(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes="packed", seed=5
    )
    found, real, cells = [], 0, 0
    for features, labels in dataset:
        assert set(features) == {"inputs", "targets", *packing.PACKED_FEATURES}
        for value in features.values():
            assert value.shape == (16, 32) and value.dtype == tf.int32
        np.testing.assert_array_equal(features["targets"], labels)
        found += _unpack(features)
        real, cells = real + int(tf.math.count_nonzero(labels)), cells + labels.shape[0] * 32
    summary = text_dataset.length_summary(pairs, tokenizer, tokenizer, 32)
    kept = [p for p, keep in zip(pairs, summary["keep"], strict=True) if keep]
    expected = zip(
        tokenized_rows(tokenizer, kept, 0), tokenized_rows(tokenizer, kept, 1), strict=True
    )
    assert sorted(found) == sorted(expected)
    assert max(len(s) for s, _ in found) > 1  # more than one pair per row somewhere
    padded = sum(1 for _ in text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes="max_length"
    ))  # fmt: skip
    # Phrasebook targets average 19 of the 32 positions, so many rows hold one pair; still,
    # packing needs under 80 % of the cells that padding each pair to max_length needs.
    assert cells < 0.8 * padded * 16 * 32


def test_packed_rows_are_seeded_and_sharded(pairs, tokenizer):
    def rows(seed, context=None):
        dataset = text_dataset.make_dataset(
            pairs[:200], tokenizer, tokenizer, batch_tokens=256, max_length=32, seed=seed,
            shapes="packed", input_context=context,
        )  # fmt: skip
        return [pair for features, _ in dataset for pair in _unpack(features)]

    assert rows(1) == rows(1) and rows(1) != rows(2)  # the same rows, shuffled by the seed
    assert sorted(rows(1)) == sorted(rows(2))
    shards = [rows(1, tf.distribute.InputContext(2, index, 2)) for index in range(2)]
    assert abs(len(shards[0]) - len(shards[1])) <= 1
    assert sorted(shards[0] + shards[1]) == sorted(rows(1))


def test_pack_lengths_fills_rows_without_overflow():
    rng = np.random.default_rng(0)
    sources = rng.integers(1, 17, 500)
    targets = np.clip(sources + rng.integers(-3, 4, 500), 1, 16)  # lengths that correlate
    row, source_offset, target_offset, segment = packing.pack_lengths(sources, targets, 16)
    for lengths, offsets in ((sources, source_offset), (targets, target_offset)):
        assert (offsets + lengths <= 16).all()
        for r in np.unique(row):  # the pairs of a row do not overlap
            spans = sorted(zip(offsets[row == r], lengths[row == r], strict=True))
            assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans))
    for r in np.unique(row):  # segments 1..k within each row
        assert sorted(segment[row == r]) == list(range(1, (row == r).sum() + 1))
    assert max(sources.sum(), targets.sum()) / ((row.max() + 1) * 16) > 0.95
    with pytest.raises(ValueError, match="max_length=16"):
        packing.pack_lengths([17], [3], 16)
