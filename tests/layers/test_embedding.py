"""Tests for tfblocks.SinusoidalEmbedding and tfblocks.timing_signal."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import SinusoidalEmbedding, timing_signal


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    ("length", "channels", "start_index"),
    [(7, 16, 0), (5, 9, 0), (4, 12, 10), (3, 2, 0), (3, 1, 5), (6, 3, 2)],
)
def test_timing_signal_matches_formula(length, channels, start_index):
    got = _np(timing_signal(length, channels, start_index=start_index))
    want = reference.timing_signal(length, channels, start_index=start_index)
    assert got.shape == (1, length, channels)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_timing_signal_layout_is_sin_then_cos_with_odd_padding():
    sig = _np(timing_signal(3, 7, min_timescale=1.0, max_timescale=100.0))
    # Channel 0 has timescale 1: sin(p), channel 3 is its cosine, channel 6 is padding.
    np.testing.assert_allclose(sig[0, :, 0], np.sin(np.arange(3)), atol=1e-6)
    np.testing.assert_allclose(sig[0, :, 3], np.cos(np.arange(3)), atol=1e-6)
    np.testing.assert_array_equal(sig[0, :, 6], 0.0)
    # Channel 2 (last timescale) uses max_timescale: sin(p / 100).
    np.testing.assert_allclose(sig[0, :, 2], np.sin(np.arange(3) / 100.0), atol=1e-6)


def test_timing_signal_start_index_is_a_shifted_slice():
    full = _np(timing_signal(10, 8))
    np.testing.assert_allclose(_np(timing_signal(3, 8, start_index=4)), full[:, 4:7], atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"length": 3, "channels": 0}, "channels=0"),
        ({"length": -1, "channels": 4}, "length=-1"),
        (
            {"length": 3, "channels": 4, "min_timescale": 5.0, "max_timescale": 1.0},
            "min_timescale=5.0",
        ),
    ],
)
def test_timing_signal_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words):
        timing_signal(**kwargs)


def test_layer_harness(tmp_path):
    ids = np.array([[5, 7, 9, 0], [3, 0, 0, 0]], "int32")
    run_layer_test(
        SinusoidalEmbedding,
        {"vocab_size": 12, "hidden_size": 8, "dropout": 0.1},
        ids,
        expected_output_shape=(2, 4, 8),
        tmp_path=tmp_path,
    )


def test_values_scale_padding_and_signal():
    ids = np.array([[5, 7, 0]], "int32")
    emb = SinusoidalEmbedding(vocab_size=10, hidden_size=6)
    out = _np(emb(ids))
    table = _np(emb.embeddings)
    signal = reference.timing_signal(3, 6)[0]
    want = np.stack([table[5] * np.sqrt(6), table[7] * np.sqrt(6), np.zeros(6)]) + signal
    np.testing.assert_allclose(out[0], want, atol=1e-5)
    # start_index shifts only the signal.
    shifted = _np(emb(ids, start_index=4))
    np.testing.assert_allclose(
        shifted[0, 0], table[5] * np.sqrt(6) + reference.timing_signal(5, 6)[0, 4], atol=1e-5
    )


def test_unscaled_embedding():
    emb = SinusoidalEmbedding(vocab_size=10, hidden_size=4, scale=False)
    out = _np(emb(np.array([[3]])))
    np.testing.assert_allclose(
        out[0, 0], _np(emb.embeddings)[3] + reference.timing_signal(1, 4)[0, 0], atol=1e-6
    )


def test_initializer_is_normal_with_stddev_d_to_minus_half():
    emb = SinusoidalEmbedding(vocab_size=4000, hidden_size=64)
    emb.build((None, None))
    std = _np(emb.embeddings).std()
    assert abs(std - 64**-0.5) < 0.02 * 64**-0.5


def test_mask_and_tied_logits():
    ids = np.array([[5, 7, 0]], "int32")
    emb = SinusoidalEmbedding(vocab_size=10, hidden_size=6)
    h = emb(ids)
    np.testing.assert_array_equal(_np(h._keras_mask), ids != 0)
    logits = _np(emb.attend(h))
    np.testing.assert_allclose(logits, _np(h) @ _np(emb.embeddings).T, atol=1e-5)
    assert SinusoidalEmbedding(10, 6, mask_zero=False).compute_mask(ids) is None


def test_tied_logits_under_mixed_precision():
    emb = SinusoidalEmbedding(vocab_size=10, hidden_size=8, dtype="mixed_bfloat16")
    h = emb(np.array([[1, 2]]))
    assert keras.backend.standardize_dtype(h.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(emb.attend(h).dtype) == "bfloat16"


@pytest.mark.parametrize(("length", "channels", "start_index"), [(6, 8, 0), (4, 16, 3), (2, 4, 7)])
def test_half_depth_timing_signal_matches_hugging_face_marian_table(length, channels, start_index):
    got = _np(timing_signal(length, channels, start_index=start_index, timescale_rule="half_depth"))
    want = reference.half_depth_signal(length, channels, start_index)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # The two rules differ (beyond position 0, where every sine is 0 and cosine 1).
    t2t = reference.timing_signal(length, channels, start_index=start_index)
    assert np.abs(t2t - want)[:, int(start_index == 0) :].max() > 1e-2


def test_layer_harness_stored_position_table(tmp_path):
    run_layer_test(
        SinusoidalEmbedding,
        {"vocab_size": 12, "hidden_size": 8, "max_positions": 6, "timescale_rule": "half_depth"},
        np.array([[5, 7, 9, 0], [3, 0, 0, 0]], "int32"),
        expected_output_shape=(2, 4, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("timescale_rule", ["t2t", "half_depth"])
def test_stored_position_table_starts_as_the_signal_and_is_read_by_position(timescale_rule):
    ids = np.array([[5, 7, 2, 0]], "int32")
    options = {"timescale_rule": timescale_rule, "scale": False}
    computed = SinusoidalEmbedding(10, 8, **options)
    stored = SinusoidalEmbedding(10, 8, max_positions=9, **options)
    computed(ids), stored(ids)
    stored.embeddings.assign(computed.embeddings)
    signal = _np(timing_signal(9, 8, timescale_rule=timescale_rule))[0]
    np.testing.assert_allclose(_np(stored.position_embeddings), signal, atol=1e-6)
    assert stored.position_embeddings.trainable
    for kwargs in ({}, {"start_index": 5}, {"positions": np.array([[0, 1, 0, 4]])}):
        np.testing.assert_allclose(_np(stored(ids, **kwargs)), _np(computed(ids, **kwargs)), 1e-6)
    # An imported table replaces the formula: row p is what position p adds.
    table = np.random.default_rng(0).normal(size=(9, 8)).astype("float32")
    stored.position_embeddings.assign(table)
    emb = _np(stored.embeddings)
    got = _np(stored(ids, start_index=3))[0]
    np.testing.assert_allclose(got[:3], emb[[5, 7, 2]] + table[3:6], atol=1e-6)
    np.testing.assert_allclose(got[3], table[6], atol=1e-6)  # padding: the position only


def test_stored_position_table_under_mixed_precision():
    emb = SinusoidalEmbedding(10, 8, max_positions=4, dtype="mixed_float16")
    out = emb(np.array([[1, 2, 3, 4]]))
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert emb.position_embeddings.dtype == "float32"
    assert np.all(np.isfinite(_np(keras.ops.cast(out, "float32"))))


def test_zeroed_id_gives_the_signal_alone_and_stays_unmasked():
    ids = np.array([[3, 5, 0]], "int32")
    emb = SinusoidalEmbedding(vocab_size=10, hidden_size=6)
    out = emb(ids, zeroed_id=3)
    signal = reference.timing_signal(3, 6)[0]
    np.testing.assert_allclose(_np(out)[0, 0], signal[0], atol=1e-6)
    np.testing.assert_allclose(_np(out)[0, 1], _np(emb(ids))[0, 1], atol=1e-6)
    np.testing.assert_array_equal(_np(emb.compute_mask(ids)), [[True, True, False]])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"vocab_size": 0, "hidden_size": 4}, "vocab_size=0"),
        ({"vocab_size": 5, "hidden_size": 4, "timescale_rule": "hf"}, "timescale_rule='hf'"),
        ({"vocab_size": 5, "hidden_size": 4, "max_positions": 0}, "max_positions=0"),
        (
            {"vocab_size": 5, "hidden_size": 4, "max_positions": 8, "add_timing_signal": False},
            "max_positions=8, add_timing_signal=False",
        ),
        ({"vocab_size": 5, "hidden_size": -4}, "hidden_size=-4"),
        ({"vocab_size": 5, "hidden_size": 4, "dropout": 2}, "dropout=2"),
        ({"vocab_size": 5, "hidden_size": 4, "min_timescale": 0.0}, "min_timescale=0.0"),
        ({"vocab_size": 5, "hidden_size": 4, "position_offset": -1}, "position_offset=-1"),
        (
            {"vocab_size": 5, "hidden_size": 4, "position_offset": 2, "max_positions": 8},
            "position_offset=2, max_positions=8",
        ),
    ],
)
def test_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words):
        SinusoidalEmbedding(**kwargs)


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        (np.array([[1, 12]], "int32"), r"\[0, vocab_size=12\).*max=12"),
        (np.array([[-1, 3]], "int32"), r"\[0, vocab_size=12\).*min=-1"),
        (np.array([[3, 2**32 + 3]], "int64"), r"vocab_size=12.*max=4294967299"),
        (np.array([[1.0, 2.0]], "float32"), "must be integer token ids, got dtype float32"),
        (np.array([1, 2], "int32"), r"`ids` must have rank 2.*ids\.shape=\(2,\)"),
        (np.array([[[1, 2]]], "int32"), r"`ids` must have rank 2.*ids\.shape=\(1, 1, 2\)"),
    ],
)
def test_bad_ids_raise_eagerly(ids, words):
    emb = SinusoidalEmbedding(vocab_size=12, hidden_size=4)
    with pytest.raises(ValueError, match=words):
        emb(ids)
    with pytest.raises(ValueError, match=words):
        emb(keras.ops.convert_to_tensor(ids))


def test_float_ids_raise_inside_a_graph_too():
    emb = SinusoidalEmbedding(vocab_size=12, hidden_size=4)
    emb(np.array([[1, 2]]))
    graph = tf.function(lambda ids: emb(ids), jit_compile=True)
    with pytest.raises(ValueError, match="integer token ids"):
        graph(tf.constant([[1.0, 2.0]]))
    # Values are not checked in a graph (documented): the data paths guarantee the range.
    assert tuple(graph(tf.constant([[1, 11]])).shape) == (1, 2, 4)


def _fairseq_table(positions, channels):
    """fairseq's / Hugging Face M2M-100's sinusoid at `positions`, in NumPy: sines of
    d/2 frequencies spaced by log(10000) / (d/2 − 1), then their cosines."""
    half = channels // 2
    frequencies = np.exp(np.arange(half) * -(np.log(10000.0) / (half - 1)))
    angles = np.asarray(positions, "float64")[..., None] * frequencies
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def test_position_offset_reads_the_signal_from_there():
    # M2M-100 / NLLB number a sentence's tokens from padding_idx + 1 = 2: a token at
    # index i (and in one-step decoding at start_index i, or at packed position i) gets
    # the signal of position i + 2; padding changes no real position.
    layer = SinusoidalEmbedding(30, 8, scale=False, position_offset=2)
    ids = np.array([[5, 6, 7, 1], [9, 1, 0, 0]], "int32")
    layer.build()
    table = _np(layer.embeddings)
    out = _np(layer(ids))
    expected = table[ids] + _fairseq_table(np.arange(4) + 2, 8)[None]
    real = ids != 0
    np.testing.assert_allclose(out[real], expected[real], atol=1e-5)
    step = _np(layer(ids[:, 2:3], start_index=2))
    np.testing.assert_allclose(step[:, 0], out[:, 2], atol=1e-6)
    positions = np.array([[0, 1, 0, 1], [0, 0, 0, 0]], "int32")
    packed = _np(layer(ids, positions=positions))
    np.testing.assert_allclose(packed[0, 2], table[7] + _fairseq_table(2, 8), atol=1e-5)
    assert layer.get_config()["position_offset"] == 2
