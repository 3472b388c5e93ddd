"""Tests of the padded batch shapes of make_dataset (tfblocks.text.batching): token budgets,
fixed shapes, buckets, and the all-PAD rows that complete a batch."""

import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import batch_rows, dataset_rows, tokenized_rows
from tfblocks.ids import EOS_ID, PAD_ID
from tfblocks.text import batching
from tfblocks.text import dataset as text_dataset

pytestmark = pytest.mark.heavy  # many tf.data pipelines: scheduled first


def test_bucketed_batches_respect_the_token_budget_and_lose_nothing(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=256, max_length=40, seed=1
    )
    real = padded = batches = 0
    for features, labels in dataset:
        batches += 1
        assert features["inputs"].dtype == tf.int32 and labels.dtype == tf.int32
        for ids in (features["inputs"], labels):
            batch, length = ids.shape
            assert batch * length <= 256, ids.shape
            assert all(row[-1] == EOS_ID for row in batch_rows(ids))  # EOS ends every row
            real, padded = real + int(tf.math.count_nonzero(ids)), padded + batch * length
    assert real / padded > 0.8  # bucketing keeps padding low
    assert batches == int(dataset.cardinality()) == len(dataset)  # known despite bucketing
    sources, targets = dataset_rows(dataset)
    assert sorted(sources) == sorted(tokenized_rows(tokenizer, pairs, 0))
    assert sorted(zip(sources, targets, strict=True)) == sorted(
        zip(tokenized_rows(tokenizer, pairs, 0), tokenized_rows(tokenizer, pairs, 1), strict=True)
    )


def test_max_length_shapes_for_xla(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shuffle=False,
        shapes="max_length",
    )  # fmt: skip
    features_spec, labels_spec = dataset.element_spec
    assert features_spec["inputs"].shape == features_spec["targets"].shape == (16, 32)
    assert labels_spec.shape == (16, 32)
    kept = text_dataset.length_summary(pairs, tokenizer, tokenizer, 32)["kept"]
    assert kept % 16  # so that the last batch is partial
    assert sum(1 for _ in dataset) == len(dataset) == -(-kept // 16)  # padded, not dropped
    features, _ = next(iter(dataset))  # without shuffling the order is the input order
    assert batch_rows(features["inputs"])[0] == tokenized_rows(tokenizer, pairs[:1], 0)[0]
    sources, targets = dataset_rows(dataset)
    assert sources.count(()) == targets.count(()) == 16 * len(dataset) - kept  # all-PAD rows
    kept_pairs = [p for p, k in zip(pairs, text_dataset.length_summary(
        pairs, tokenizer, tokenizer, 32)["keep"], strict=True) if k]  # fmt: skip
    assert [s for s in sources if s] == tokenized_rows(tokenizer, kept_pairs, 0)


def test_fixed_bucket_lengths():
    assert batching.fixed_bucket_lengths(40) == [8, 16, 24, 32, 40]
    assert batching.fixed_bucket_lengths(100) == [8, 16, 24, 32, 48, 72, 100]
    assert batching.fixed_bucket_lengths(8) == [8]
    assert batching.fixed_bucket_lengths(5) == [5]
    assert batching.fixed_bucket_lengths(40, step=16) == [16, 32, 40]
    with pytest.raises(ValueError, match="step=0"):
        batching.fixed_bucket_lengths(40, step=0)


@pytest.mark.parametrize("bucket_lengths", [None, [12, 24]])
def test_fixed_buckets_few_shapes_every_pair_once(pairs, tokenizer, bucket_lengths):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=256, max_length=40, seed=2,
        shapes="buckets", bucket_lengths=bucket_lengths,
    )  # fmt: skip
    lengths = [12, 24, 40] if bucket_lengths else [8, 16, 24, 32, 40]
    allowed = {(256 // length, length) for length in lengths}
    shapes, partial, sources, targets = set(), 0, [], []
    for features, labels in dataset:
        np.testing.assert_array_equal(features["targets"], labels)
        shape = tuple(labels.shape)
        assert tuple(features["inputs"].shape) == shape and shape in allowed, shape
        shapes.add(shape)
        low = max([0] + [length for length in lengths if length < shape[1]])
        source_rows, target_rows = batch_rows(features["inputs"]), batch_rows(labels)
        for source, target in zip(source_rows, target_rows, strict=True):
            if source or target:  # a real pair, in the bucket of its longer side
                assert low < max(len(source), len(target)) <= shape[1]
                assert source[-1] == target[-1] == EOS_ID
            else:
                partial += 1
        pad_rows = source_rows.count(())
        assert pad_rows == 0 or source_rows[-pad_rows:] == [()] * pad_rows  # PAD rows last
        sources += [row for row in source_rows if row]
        targets += [row for row in target_rows if row]
    assert len(shapes) <= len(lengths)
    assert partial < sum(size for size, _ in allowed)  # one partial batch per bucket at most
    assert sum(1 for _ in dataset) == len(dataset)
    expected = zip(
        tokenized_rows(tokenizer, pairs, 0), tokenized_rows(tokenizer, pairs, 1), strict=True
    )
    kept = [p for p in expected if max(map(len, p)) <= 40]
    assert sorted(zip(sources, targets, strict=True)) == sorted(kept)  # each pair exactly once


def test_padding_rows_weigh_nothing():
    """The loss and the metrics of a batch are those of its real rows alone."""
    from tfblocks import MaskedAccuracy, Perplexity, SmoothedCrossEntropy

    rng = np.random.default_rng(0)
    labels = rng.integers(2, 20, size=(3, 6)).astype("int32")
    labels[1, 4:] = PAD_ID
    logits = rng.normal(size=(3, 6, 20)).astype("float32")
    padded_labels = np.concatenate([labels, np.full((2, 6), PAD_ID, "int32")])  # two all-PAD rows
    padded_logits = np.concatenate([logits, rng.normal(size=(2, 6, 20)).astype("float32")])
    loss = SmoothedCrossEntropy(label_smoothing=0.1)
    np.testing.assert_allclose(
        float(loss(padded_labels, padded_logits)), float(loss(labels, logits)), rtol=1e-6
    )
    for metric_class in (MaskedAccuracy, Perplexity):
        short, padded = metric_class(), metric_class()
        short.update_state(labels, logits)
        padded.update_state(padded_labels, padded_logits)
        np.testing.assert_allclose(float(padded.result()), float(short.result()), rtol=1e-6)


def test_padding_rows_through_a_tiny_model():
    """All-PAD rows (fully masked attention) give finite outputs and leave the loss unchanged."""
    from tfblocks import SmoothedCrossEntropy
    from tfblocks.models import build_transformer, hparams

    hp = hparams("transformer_tiny", vocab_size=30, hidden_size=16, filter_size=32)
    model = build_transformer(hp)
    rng = np.random.default_rng(1)
    ids = rng.integers(2, 30, size=(2, 8)).astype("int32")
    ids[:, -1] = EOS_ID
    padded = np.concatenate([ids, np.full((2, 8), PAD_ID, "int32")])
    logits = model({"inputs": ids, "targets": ids}, training=False)
    padded_logits = model({"inputs": padded, "targets": padded}, training=False)
    assert np.isfinite(np.asarray(padded_logits)).all()
    loss = SmoothedCrossEntropy()
    np.testing.assert_allclose(
        float(loss(padded, padded_logits)), float(loss(ids, logits)), rtol=1e-5
    )


def test_partial_batches_do_not_all_come_last(pairs, tokenizer):
    # Each bucket's partial last batch comes out when the pairs run out; shuffling the
    # batches (the same code for every `shapes`) must spread them over the epoch. With
    # fixed buckets a partial batch is exact to spot: it has all-PAD filler rows.
    def partial_flags(shuffle):
        dataset = text_dataset.make_dataset(
            pairs, tokenizer, tokenizer, batch_tokens=256, max_length=40, shapes="buckets",
            bucket_lengths=(6, 8, 10, 12, 14, 16, 20, 24, 32), shuffle=shuffle, seed=7,
        )  # fmt: skip
        return [bool((np.count_nonzero(labels, axis=1) == 0).any()) for _, labels in dataset]

    ordered, shuffled = partial_flags(False), partial_flags(True)
    partial = sum(ordered)
    assert partial >= 3 and sum(shuffled) == partial and len(shuffled) == len(ordered)
    assert all(ordered[-partial:])  # without shuffling: the epoch ends with all of them
    assert not all(shuffled[-partial:])  # shuffled: spread over the epoch


def test_check_bucket_lengths_ends_with_max_length():
    assert batching.check_bucket_lengths([8, 16], 24) == (8, 16, 24)
    assert batching.check_bucket_lengths((8, 24), 24) == (8, 24)
    assert batching.check_bucket_lengths(None, 40) == (8, 16, 24, 32, 40)
    with pytest.raises(ValueError, match=r"max_length=24, got bucket_lengths=\[8, 32\]"):
        batching.check_bucket_lengths([8, 32], 24)
