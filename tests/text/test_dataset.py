"""Tests of make_dataset: token budgets, filtering, static shapes, sharding, and one fit step."""

import itertools
import logging
import types

import numpy as np
import pytest
import tensorflow as tf

from tfblocks.text import dataset as text_dataset
from tfblocks.text import phrasebook, read_parallel, tokenizers, train_tokenizers

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

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
    assert _rows(features["inputs"])[0] == _expected_rows(tokenizer, pairs[:1], 0)[0]
    sources, targets = _all_rows(dataset)
    assert sources.count(()) == targets.count(()) == 16 * len(dataset) - kept  # all-PAD rows
    kept_pairs = [p for p, k in zip(pairs, text_dataset.length_summary(
        pairs, tokenizer, tokenizer, 32)["keep"], strict=True) if k]  # fmt: skip
    assert [s for s in sources if s] == _expected_rows(tokenizer, kept_pairs, 0)


def test_fixed_bucket_lengths():
    assert text_dataset.fixed_bucket_lengths(40) == [8, 16, 24, 32, 40]
    assert text_dataset.fixed_bucket_lengths(100) == [8, 16, 24, 32, 48, 72, 100]
    assert text_dataset.fixed_bucket_lengths(8) == [8]
    assert text_dataset.fixed_bucket_lengths(5) == [5]
    assert text_dataset.fixed_bucket_lengths(40, step=16) == [16, 32, 40]
    with pytest.raises(ValueError, match="step=0"):
        text_dataset.fixed_bucket_lengths(40, step=0)


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
        source_rows, target_rows = _rows(features["inputs"]), _rows(labels)
        for source, target in zip(source_rows, target_rows, strict=True):
            if source or target:  # a real pair, in the bucket of its longer side
                assert low < max(len(source), len(target)) <= shape[1]
                assert source[-1] == target[-1] == EOS
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
        _expected_rows(tokenizer, pairs, 0), _expected_rows(tokenizer, pairs, 1), strict=True
    )
    kept = [p for p in expected if max(map(len, p)) <= 40]
    assert sorted(zip(sources, targets, strict=True)) == sorted(kept)  # each pair exactly once


def test_padding_rows_weigh_nothing():
    """The loss and the metrics of a batch are those of its real rows alone."""
    from tfblocks import MaskedAccuracy, Perplexity, SmoothedCrossEntropy

    rng = np.random.default_rng(0)
    labels = rng.integers(2, 20, size=(3, 6)).astype("int32")
    labels[1, 4:] = PAD
    logits = rng.normal(size=(3, 6, 20)).astype("float32")
    padded_labels = np.concatenate([labels, np.zeros((2, 6), "int32")])  # two all-PAD rows
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
    ids[:, -1] = EOS
    padded = np.concatenate([ids, np.zeros((2, 8), "int32")])
    logits = model({"inputs": ids, "targets": ids}, training=False)
    padded_logits = model({"inputs": padded, "targets": padded}, training=False)
    assert np.isfinite(np.asarray(padded_logits)).all()
    loss = SmoothedCrossEntropy()
    np.testing.assert_allclose(
        float(loss(padded, padded_logits)), float(loss(ids, logits)), rtol=1e-5
    )


@pytest.mark.parametrize("shapes", text_dataset.SHAPES)
def test_autotuning_is_off_and_the_batch_count_known(pairs, tokenizer, shapes):
    # Autotuning's thread made each `fit` end with a wait of up to a minute (dataset.py).
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes=shapes, seed=3
    )
    assert dataset.options().autotune.enabled is False
    assert len(dataset) == sum(1 for _ in dataset) > 1


def _unpack(features):
    """The `(source, target)` id tuples of packed rows, read back from the segment features."""
    found = []
    arrays = {name: value.numpy() for name, value in features.items()}
    for r in range(arrays["inputs"].shape[0]):
        sides = []
        for side in ("inputs", "targets"):
            ids, segments = arrays[side][r], arrays[f"{side}_segmentation"][r]
            positions = arrays[f"{side}_position"][r]
            assert ((ids != PAD) == (segments > 0)).all()  # padding is exactly segment 0
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
        assert set(features) == {"inputs", "targets", *text_dataset.PACKED_FEATURES}
        for value in features.values():
            assert value.shape == (16, 32) and value.dtype == tf.int32
        np.testing.assert_array_equal(features["targets"], labels)
        found += _unpack(features)
        real, cells = real + int(tf.math.count_nonzero(labels)), cells + labels.shape[0] * 32
    summary = text_dataset.length_summary(pairs, tokenizer, tokenizer, 32)
    kept = [p for p, keep in zip(pairs, summary["keep"], strict=True) if keep]
    expected = zip(
        _expected_rows(tokenizer, kept, 0), _expected_rows(tokenizer, kept, 1), strict=True
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
    row, source_offset, target_offset, segment = text_dataset.pack_lengths(sources, targets, 16)
    for lengths, offsets in ((sources, source_offset), (targets, target_offset)):
        assert (offsets + lengths <= 16).all()
        for r in np.unique(row):  # the pairs of a row do not overlap
            spans = sorted(zip(offsets[row == r], lengths[row == r], strict=True))
            assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans))
    for r in np.unique(row):  # segments 1..k within each row
        assert sorted(segment[row == r]) == list(range(1, (row == r).sum() + 1))
    assert max(sources.sum(), targets.sum()) / ((row.max() + 1) * 16) > 0.95
    with pytest.raises(ValueError, match="max_length=16"):
        text_dataset.pack_lengths([17], [3], 16)


def test_shuffle_changes_the_order_between_epochs(pairs, tokenizer):
    dataset = text_dataset.make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=512, max_length=32, shapes="max_length", seed=3
    )
    first, second = (_rows(next(iter(dataset))[1]) for _ in range(2))
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
        shards.append([row for row in _all_rows(dataset)[0] if row])
        assert len(dataset) == sum(1 for _ in dataset)
    assert abs(len(shards[0]) - len(shards[1])) <= 1
    assert sorted(shards[0] + shards[1]) == sorted(_expected_rows(tokenizer, pairs, 0))


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


@pytest.mark.parametrize("shapes", ["dynamic", "packed"])  # buckets, max_length: as dynamic
def test_a_streamed_corpus_gives_the_batches_of_its_list(tmp_path, pairs, tokenizer, shapes):
    # The same pairs from a list and streamed from (gzipped) files: without shuffling, the
    # same batches (long pairs dropped in the graph instead of before); shuffled, each kept
    # pair once an epoch, in a seeded order, and no number of batches stated. (The fixed
    # shapes batch a streamed corpus as dynamic does: one code path after the batching.)
    import gzip

    from tfblocks.text.corpus import StreamedPairs

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
        _all_rows(text_dataset.make_dataset(streamed, tokenizer, tokenizer, seed=seed, **options))
        for seed in (3, 3, 4)
    ]
    assert sorted(epochs[0][1]) == sorted(_all_rows(listed)[1])
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
    from tfblocks.text.corpus import StreamedPairs

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
        [row for _, labels in straight[p * batches : (p + 1) * batches] for row in _rows(labels)]
        for p in range(3)
    ]
    want = sorted(_all_rows(one_pass)[1])
    assert all(sorted(rows) == want for rows in passes)  # every pair once a pass
    assert passes[0] != passes[1] != passes[2]  # each pass shuffled anew
    with pytest.raises(TypeError, match="repeat=1"):
        text_dataset.make_dataset(pairs[:10], tokenizer, tokenizer, repeat=1)


def test_a_pipeline_with_repeat_reads_only_its_own_files(tmp_path, pairs, tokenizer):
    streamed = _streamed_files(tmp_path, pairs[:90], 3)
    want = sorted(_expected_rows(tokenizer, pairs[:90], 1))
    options = {"batch_tokens": 256, "max_length": 64, "shuffle": False, "repeat": True}
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        own = text_dataset.pipeline_files(streamed, context)
        assert own.sources == streamed.sources[index::2]
        assert own.targets == streamed.targets[index::2]
        count = sum(1 for _ in own)
        stream = text_dataset.make_dataset(streamed, tokenizer, tokenizer, input_context=context,
                                           **options)  # fmt: skip
        rows = []
        for _, labels in stream:  # the first pass: exactly the pairs of its files
            rows += [row for row in _rows(labels) if row]
            if len(rows) >= count:
                break
        assert len(rows) == count and sorted(rows) == sorted(
            _expected_rows(tokenizer, list(own), 1)
        )
        shards.append(rows)
    assert len(shards[0]) == 60 and len(shards[1]) == 30  # files 0 and 2 | file 1
    assert sorted(shards[0] + shards[1]) == want  # disjoint, together the corpus
    # Without repeat, the pipelines must end within a step of each other: every n-th pair.
    once = {**options, "repeat": False}
    context = tf.distribute.InputContext(2, 1, 2)
    dataset = text_dataset.make_dataset(streamed, tokenizer, tokenizer, input_context=context,
                                        **once)  # fmt: skip
    every_other = _expected_rows(tokenizer, pairs[:90][1::2], 1)
    assert sorted(row for row in _all_rows(dataset)[1] if row) == sorted(every_other)
    # Fewer files than pipelines, a limit or files unpaired: every n-th pair, as without
    # repeat (where the pipelines must end within a step of each other).
    four = tf.distribute.InputContext(4, 1, 4)
    assert text_dataset.pipeline_files(streamed, four) is None
    two = tf.distribute.InputContext(2, 1, 2)
    assert text_dataset.pipeline_files(streamed.limited(50), two) is None
    uneven = type(streamed)(streamed.sources, streamed.targets[:2])
    assert text_dataset.pipeline_files(uneven, two) is None


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
