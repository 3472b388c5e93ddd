"""Tests of make_dataset: token budgets, filtering, static shapes, sharding, and one fit step."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from tfblocks.text import dataset as text_dataset
from tfblocks.text import phrasebook, read_parallel, tokenizers, train_tokenizers

EOS, PAD = tokenizers.EOS_ID, tokenizers.PAD_ID


@pytest.fixture(scope="module")
def pairs():
    return phrasebook.load_phrasebook(seed=0, size=1000)["train"]


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return train_tokenizers(pairs, vocab_size=300, model_type="bpe")[0]


def _rows(ids):
    """Un-padded rows of a `[B, L]` batch as tuples."""
    return [tuple(int(i) for i in row if i != PAD) for row in ids.numpy()]


def _all_rows(dataset):
    sources, targets = [], []
    for features, labels in dataset:
        np.testing.assert_array_equal(features["targets"], labels)
        sources += _rows(features["inputs"])
        targets += _rows(labels)
    return sources, targets


def _expected_rows(tokenizer, pairs, side):
    return [tuple(row) for row in tokenizer.tokenize([p[side] for p in pairs]).to_list()]


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
            assert all(row[-1] == EOS for row in _rows(ids))  # EOS ends every row
            real, padded = real + int(tf.math.count_nonzero(ids)), padded + batch * length
    assert real / padded > 0.8  # bucketing keeps padding low
    assert batches == int(dataset.cardinality()) == len(dataset)  # known despite bucketing
    sources, targets = _all_rows(dataset)
    assert sorted(sources) == sorted(_expected_rows(tokenizer, pairs, 0))
    assert sorted(zip(sources, targets, strict=True)) == sorted(
        zip(_expected_rows(tokenizer, pairs, 0), _expected_rows(tokenizer, pairs, 1), strict=True)
    )


def test_long_pairs_are_filtered_and_counted(pairs, tokenizer, caplog):
    summary = text_dataset.length_summary(pairs, tokenizer, tokenizer, max_length=10)
    assert 0 < summary["dropped"] < len(pairs) and summary["kept"] + summary["dropped"] == len(
        pairs
    )
    with caplog.at_level(logging.WARNING, logger="tfblocks.text.dataset"):
        dataset = text_dataset.make_dataset(
            pairs, tokenizer, tokenizer, batch_tokens=100, max_length=10, shuffle=False
        )
    assert f"{summary['dropped']} longer than max_length=10 dropped" in caplog.text
    sources, targets = _all_rows(dataset)
    assert len(sources) == summary["kept"]
    assert max(map(len, sources + targets)) <= 10


def test_static_shapes_for_xla(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, static_shapes=True,
        shuffle=False,
    )  # fmt: skip
    features_spec, labels_spec = dataset.element_spec
    assert features_spec["inputs"].shape == features_spec["targets"].shape == (16, 32)
    assert labels_spec.shape == (16, 32)
    kept = text_dataset.length_summary(pairs, tokenizer, tokenizer, 32)["kept"]
    assert sum(1 for _ in dataset) == len(dataset) == kept // 16  # the partial batch is dropped
    features, _ = next(iter(dataset))  # without shuffling the order is the input order
    assert _rows(features["inputs"])[0] == _expected_rows(tokenizer, pairs[:1], 0)[0]


def test_shuffle_changes_the_order_between_epochs(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, static_shapes=True, seed=3
    )
    first, second = (_rows(next(iter(dataset))[1]) for _ in range(2))
    assert first != second


def test_input_context_shards_the_pairs(pairs, tokenizer):
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        dataset = text_dataset.make_dataset(
            pairs, tokenizer, tokenizer, batch_tokens=512, max_length=40, input_context=context
        )
        shards.append(_all_rows(dataset)[0])
        assert len(dataset) == sum(1 for _ in dataset)
    assert abs(len(shards[0]) - len(shards[1])) <= 1
    assert sorted(shards[0] + shards[1]) == sorted(_expected_rows(tokenizer, pairs, 0))


def test_distribute_datasets_from_function(pairs, tokenizer):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    distributed = strategy.distribute_datasets_from_function(
        lambda context: text_dataset.make_dataset(
            pairs[:64], tokenizer, tokenizer, batch_tokens=256, max_length=32,
            static_shapes=True, input_context=context,
        )
    )  # fmt: skip
    features, labels = next(iter(distributed))
    assert labels.shape == (8, 32) and features["inputs"].shape == (8, 32)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_tokens": 16, "max_length": 32}, "batch_tokens=16, max_length=32"),
        ({"batch_tokens": 0}, "batch_tokens=0"),
        ({"max_length": 2.5}, "max_length=2.5"),
        ({"seed": "1"}, "seed='1'"),
        ({"shuffle": 1}, "shuffle=1"),
        ({"static_shapes": "yes"}, "static_shapes='yes'"),
        ({"max_length": 1}, "No pair fits in max_length=1"),
    ],
)
def test_bad_arguments(pairs, tokenizer, kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        text_dataset.make_dataset(pairs[:10], tokenizer, tokenizer, **kwargs)


def test_bad_pairs(tokenizer):
    with pytest.raises(ValueError, match="empty"):
        text_dataset.make_dataset([], tokenizer, tokenizer)
    with pytest.raises(TypeError, match="string pairs"):
        text_dataset.make_dataset([("a", "b", "c")], tokenizer, tokenizer)


def test_text_files_to_one_fit_step(tmp_path, pairs):
    """End to end: files on disk → corpus → shared tokenizer → dataset → build_transformer.fit."""
    from tfblocks.models import build_transformer, hparams
    from tfblocks.training import compile_transformer

    (tmp_path / "train.ja").write_text("".join(ja + "\n" for ja, _ in pairs), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    corpus = read_parallel(tmp_path / "train.ja", tmp_path / "train.en")
    assert corpus.pairs == pairs
    source, target = train_tokenizers(corpus, vocab_size=300, model_type="bpe")
    dataset = text_dataset.make_dataset(corpus, source, target, batch_tokens=512, max_length=32)
    hp = hparams(
        "transformer_tiny", vocab_size=source.vocabulary_size, hidden_size=32, filter_size=64
    )
    model = compile_transformer(build_transformer(hp), hp, jit_compile=False)
    history = model.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
