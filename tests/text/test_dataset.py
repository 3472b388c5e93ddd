"""Tests of make_dataset and distribute_dataset: reading, filtering, shuffling, sharding,
streaming, repeating, and one fit step. The batch shapes: test_batching.py, test_packing.py."""

import itertools
import logging
import types

import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import batch_rows, dataset_rows, tokenized_rows
from tfblocks.text import dataset as text_dataset
from tfblocks.text import read_parallel, train_tokenizers

pytestmark = pytest.mark.heavy  # many tf.data pipelines: scheduled first


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
    sources, targets = dataset_rows(dataset)
    assert len(sources) == summary["kept"]
    assert max(map(len, sources + targets)) <= 10


def test_every_shape_name_has_its_batching():
    # The names live in tfblocks/text/shapes.py (no TensorFlow, for tfblocks-train --help).
    assert tuple(text_dataset._SHAPES) == text_dataset.SHAPES


@pytest.mark.parametrize("shapes", text_dataset.SHAPES)
def test_autotuning_is_off_and_the_batch_count_known(pairs, tokenizer, shapes):
    # Autotuning's thread made each `fit` end with a wait of up to a minute (dataset.py).
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes=shapes, seed=3
    )
    assert dataset.options().autotune.enabled is False
    assert len(dataset) == sum(1 for _ in dataset) > 1


def test_shuffle_changes_the_order_between_epochs(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes="max_length", seed=3
    )
    first, second = (batch_rows(next(iter(dataset))[1]) for _ in range(2))
    assert first != second


@pytest.mark.parametrize("shapes", ["dynamic", "buckets"])
def test_input_context_shards_the_pairs(pairs, tokenizer, shapes):
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        dataset = text_dataset.make_dataset(
            pairs, tokenizer, tokenizer, batch_tokens=512, max_length=40, input_context=context,
            shapes=shapes,
        )  # fmt: skip
        shards.append([row for row in dataset_rows(dataset)[0] if row])
        assert len(dataset) == sum(1 for _ in dataset)
    assert abs(len(shards[0]) - len(shards[1])) <= 1
    assert sorted(shards[0] + shards[1]) == sorted(tokenized_rows(tokenizer, pairs, 0))


def test_distribute_datasets_from_function(pairs, tokenizer):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    distributed = strategy.distribute_datasets_from_function(
        lambda context: text_dataset.make_dataset(
            pairs[:64], tokenizer, tokenizer, batch_tokens=256, max_length=32,
            shapes="max_length", input_context=context,
        )
    )  # fmt: skip
    features, labels = next(iter(distributed))
    assert labels.shape == (8, 32) and features["inputs"].shape == (8, 32)


def test_distribute_dataset_splits_a_global_budget(pairs, tokenizer):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    distributed = text_dataset.distribute_dataset(
        strategy, pairs[:64], tokenizer, tokenizer, batch_tokens=256, max_length=32,
        shapes="max_length", shuffle=False,
    )  # fmt: skip
    assert {tuple(labels.shape) for _, labels in distributed} == {(8, 32)}
    four = types.SimpleNamespace(num_replicas_in_sync=4)  # 256 // 4 < max_length
    with pytest.raises(ValueError, match=r"over all 4 replicas.*batch_tokens=256"):
        text_dataset.distribute_dataset(four, pairs, tokenizer, tokenizer, batch_tokens=256,
                                        max_length=100)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_tokens": 16, "max_length": 32}, "batch_tokens=16, max_length=32"),
        ({"batch_tokens": 0}, "batch_tokens=0"),
        ({"max_length": 2.5}, "max_length=2.5"),
        ({"seed": "1"}, "seed='1'"),
        ({"shuffle": 1}, "shuffle=1"),
        ({"max_length": 1}, "No pair fits in max_length=1"),
        ({"shapes": "fixed"}, "shapes='fixed'"),
        ({"bucket_lengths": [8, 16]}, "only used with shapes='buckets'"),
        ({"shapes": "buckets", "bucket_lengths": [16, 8]}, r"bucket_lengths=\[16, 8\]"),
        ({"shapes": "buckets", "bucket_lengths": [8, 128]}, "max_length=64"),
        ({"shapes": "buckets", "bucket_lengths": []}, r"bucket_lengths=\[\]"),
        ({"shapes": "buckets", "bucket_lengths": [0, 8]}, "bucket_lengths=0"),
        ({"shapes": "buckets", "bucket_lengths": "8"}, "bucket_lengths='8'"),
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


@pytest.mark.parametrize("shapes", ["dynamic", "packed"])  # buckets, max_length: as dynamic
def test_a_streamed_corpus_gives_the_batches_of_its_list(tmp_path, pairs, tokenizer, shapes):
    # The same pairs from a list and streamed from (gzipped) files: without shuffling, the
    # same batches (long pairs dropped in the graph instead of before); shuffled, each kept
    # pair once an epoch, in a seeded order, and no number of batches stated. (The fixed
    # shapes batch a streamed corpus as dynamic does: one code path after the batching.)
    import gzip

    from tfblocks.text.streamed import StreamedPairs

    sources, targets = tmp_path / "t.ja", tmp_path / "t.en.gz"
    sources.write_text("".join(ja + "\n" for ja, _ in pairs[:200]), encoding="utf-8")
    targets.write_bytes(gzip.compress("".join(en + "\n" for _, en in pairs[:200]).encode()))
    streamed = StreamedPairs((str(sources),), (str(targets),))
    assert list(streamed) == pairs[:200] and list(streamed.limited(5)) == pairs[:5]
    options = {"batch_tokens": 64, "max_length": 16, "shapes": shapes}
    listed = text_dataset.make_dataset(pairs[:200], tokenizer, tokenizer, shuffle=False, **options)
    flowing = text_dataset.make_dataset(streamed, tokenizer, tokenizer, shuffle=False, **options)
    assert flowing.cardinality() == tf.data.UNKNOWN_CARDINALITY
    want, got = list(listed), list(flowing)
    assert len(want) == len(got) > 1
    for a, b in zip(want, got, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    epochs = [
        dataset_rows(
            text_dataset.make_dataset(streamed, tokenizer, tokenizer, seed=seed, **options)
        )
        for seed in (3, 3, 4)
    ]
    assert sorted(epochs[0][1]) == sorted(dataset_rows(listed)[1])
    assert epochs[0] == epochs[1] and epochs[0] != epochs[2]


def _batches(dataset, count):
    return list(itertools.islice(dataset, count))


def _assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, x, y)


def _streamed_files(tmp_path, pairs, files):
    """`pairs` as a `StreamedPairs` of `files` line-aligned files a side (pair i in file
    i * files // len(pairs))."""
    from tfblocks.text.streamed import StreamedPairs

    sides = ([], [])
    for f in range(files):
        part = pairs[f * len(pairs) // files : (f + 1) * len(pairs) // files]
        for side, names in enumerate(sides):
            path = tmp_path / f"train.{'ab'[side]}-{f:05d}-of-{files:05d}"
            path.write_text("".join(pair[side] + "\n" for pair in part), encoding="utf-8")
            names.append(str(path))
    return StreamedPairs(tuple(sides[0]), tuple(sides[1]))


@pytest.mark.parametrize("corpus", ["list", "streamed"])
def test_repeat_is_a_seeded_stream_of_passes(tmp_path, pairs, tokenizer, corpus):
    # The stream's passes each hold every pair once, each in its own order, and the
    # stream is the same from another dataset of the same seed: what makes epoch e of
    # `steps_per_epoch=N` (steps [e·N, (e+1)·N)) the same in a straight and a continued run.
    data = pairs[:120] if corpus == "list" else _streamed_files(tmp_path, pairs[:120], 2)
    options = {"batch_tokens": 256, "max_length": 32, "shapes": "max_length", "seed": 7}
    one_pass = text_dataset.make_dataset(pairs[:120], tokenizer, tokenizer, **options)
    batches = len(one_pass)
    stream = text_dataset.make_dataset(data, tokenizer, tokenizer, repeat=True, **options)
    assert stream.cardinality() == tf.data.INFINITE_CARDINALITY
    straight = _batches(stream, 3 * batches)
    again = text_dataset.make_dataset(data, tokenizer, tokenizer, repeat=True, **options)
    _assert_same_batches(_batches(again.skip(batches + 2), 5), straight[batches + 2 :][:5])
    passes = [
        [
            row
            for _, labels in straight[p * batches : (p + 1) * batches]
            for row in batch_rows(labels)
        ]
        for p in range(3)
    ]
    want = sorted(dataset_rows(one_pass)[1])
    assert all(sorted(rows) == want for rows in passes)  # every pair once a pass
    assert passes[0] != passes[1] != passes[2]  # each pass shuffled anew
    with pytest.raises(TypeError, match="repeat=1"):
        text_dataset.make_dataset(pairs[:10], tokenizer, tokenizer, repeat=1)


def test_a_pipeline_with_repeat_reads_only_its_own_files(tmp_path, pairs, tokenizer):
    streamed = _streamed_files(tmp_path, pairs[:90], 3)
    want = sorted(tokenized_rows(tokenizer, pairs[:90], 1))
    options = {"batch_tokens": 256, "max_length": 64, "shuffle": False, "repeat": True}
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        own = text_dataset._pipeline_files(streamed, context)
        assert own.sources == streamed.sources[index::2]
        assert own.targets == streamed.targets[index::2]
        count = sum(1 for _ in own)
        stream = text_dataset.make_dataset(streamed, tokenizer, tokenizer, input_context=context,
                                           **options)  # fmt: skip
        rows = []
        for _, labels in stream:  # the first pass: exactly the pairs of its files
            rows += [row for row in batch_rows(labels) if row]
            if len(rows) >= count:
                break
        assert len(rows) == count and sorted(rows) == sorted(
            tokenized_rows(tokenizer, list(own), 1)
        )
        shards.append(rows)
    assert len(shards[0]) == 60 and len(shards[1]) == 30  # files 0 and 2 | file 1
    assert sorted(shards[0] + shards[1]) == want  # disjoint, together the corpus
    # Without repeat, the pipelines must end within a step of each other: every n-th pair.
    once = {**options, "repeat": False}
    context = tf.distribute.InputContext(2, 1, 2)
    dataset = text_dataset.make_dataset(streamed, tokenizer, tokenizer, input_context=context,
                                        **once)  # fmt: skip
    every_other = tokenized_rows(tokenizer, pairs[:90][1::2], 1)
    assert sorted(row for row in dataset_rows(dataset)[1] if row) == sorted(every_other)
    # Fewer files than pipelines, a limit or files unpaired: every n-th pair, as without
    # repeat (where the pipelines must end within a step of each other).
    four = tf.distribute.InputContext(4, 1, 4)
    assert text_dataset._pipeline_files(streamed, four) is None
    two = tf.distribute.InputContext(2, 1, 2)
    assert text_dataset._pipeline_files(streamed.limited(50), two) is None
    uneven = type(streamed)(streamed.sources, streamed.targets[:2])
    assert text_dataset._pipeline_files(uneven, two) is None


def test_distribute_dataset_starts_each_pipeline_at_a_step(pairs, tokenizer):
    # Two pipelines of two replicas each: a step takes two batches of each pipeline, so
    # starting at step 3 skips six batches of each.
    contexts = [tf.distribute.InputContext(2, index, 4) for index in range(2)]
    strategy = types.SimpleNamespace(
        num_replicas_in_sync=4,
        distribute_datasets_from_function=lambda shard: [shard(c) for c in contexts],
    )
    options = {"batch_tokens": 512, "max_length": 32, "shapes": "max_length", "seed": 2}
    common = (strategy, pairs[:200], tokenizer, tokenizer)
    whole = text_dataset.distribute_dataset(*common, repeat=True, **options)
    later = text_dataset.distribute_dataset(*common, repeat=True, start_step=3, **options)
    for stream, started in zip(whole, later, strict=True):
        assert started.cardinality() == tf.data.INFINITE_CARDINALITY
        _assert_same_batches(_batches(started, 4), _batches(stream, 10)[6:])
    with pytest.raises(ValueError, match="start_step=3, repeat=False"):
        text_dataset.distribute_dataset(*common, start_step=3, **options)
    with pytest.raises(ValueError, match="start_step=-1"):
        text_dataset.distribute_dataset(*common, repeat=True, start_step=-1, **options)
