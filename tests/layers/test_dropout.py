"""Tests for tfblocks.layers.HashDropout and its counter-hash bits."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.harness import run_layer_test
from tfblocks import TransformerBlock
from tfblocks.layers import HashDropout
from tfblocks.layers.dropout import hash_bits


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _mask(layer, shape):
    return _np(layer(np.ones(shape, "float32"), training=True)) != 0


def test_layer_harness(tmp_path):
    run_layer_test(
        HashDropout,
        {"rate": 0.25, "seed": 7},
        np.ones((2, 5, 8), "float32"),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
        run_training=False,  # no weights to move
    )


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_drop_fraction_and_inverted_scaling(rate):
    x = np.random.default_rng(0).normal(size=(64, 128, 128)).astype("float32")  # 1M
    y = _np(HashDropout(rate, seed=1)(x, training=True))
    kept = y != 0
    n = kept.size
    # The kept fraction is within 5 standard deviations of 1 − rate.
    assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6)


def test_identity_at_inference_and_rate_zero():
    x = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    np.testing.assert_array_equal(_np(HashDropout(0.5)(x)), x)
    np.testing.assert_array_equal(_np(HashDropout(0.5)(x, training=False)), x)
    np.testing.assert_array_equal(_np(HashDropout(0.0)(x, training=True)), x)


def test_new_mask_every_call_and_reproducible_with_a_seed():
    a, b = HashDropout(0.5, seed=3), HashDropout(0.5, seed=3)
    masks_a = [_mask(a, (256, 256)) for _ in range(3)]
    masks_b = [_mask(b, (256, 256)) for _ in range(3)]
    for ma, mb in zip(masks_a, masks_b, strict=True):
        np.testing.assert_array_equal(ma, mb)
    # Consecutive calls agree on about half the elements (independent masks), not all.
    agree = (masks_a[0] == masks_a[1]).mean()
    assert 0.49 < agree < 0.51, agree
    other = _mask(HashDropout(0.5, seed=4), (256, 256))
    assert 0.49 < (other == masks_a[0]).mean() < 0.51


def test_bits_uniform_and_neighbours_uncorrelated():
    bits = _np(hash_bits((512, 2048), tf.constant([11, 0], tf.int64)))  # 1M values
    assert bits.min() >= 0 and bits.max() < 2**24
    # Top 8 bits: chi-square over 256 equally likely bins (df 255; p = 1e-6 at ≈ 360).
    counts = np.bincount((bits >> 16).ravel(), minlength=256)
    expected = bits.size / 256
    assert ((counts - expected) ** 2 / expected).sum() < 360
    # Lowest bits too (a weak hash shows patterns there first).
    low = np.bincount((bits & 255).ravel(), minlength=256)
    assert ((low - expected) ** 2 / expected).sum() < 360
    u = bits.astype(np.float64) / 2**24 - 0.5
    for name, (p, q) in {
        "next element": (u[:, :-1], u[:, 1:]),
        "next row": (u[:-1], u[1:]),
        "1024 apart": (u[:, :-1024], u[:, 1024:]),
    }.items():
        r = np.corrcoef(p.ravel(), q.ravel())[0, 1]
        assert abs(r) < 0.01, (name, r)  # 1/sqrt(1M) = 0.001


def test_consecutive_seeds_give_uncorrelated_bits():
    # Keras' SeedGenerator increments the second seed word by one per call.
    u = [
        _np(hash_bits((1 << 20,), tf.constant([5, s], tf.int64))).astype(np.float64) for s in (0, 1)
    ]
    assert abs(np.corrcoef(u[0], u[1])[0, 1]) < 0.01


def test_same_bits_with_and_without_xla():
    seed = tf.constant([123, 456], tf.int64)
    eager = _np(hash_bits((3, 7, 5), seed))
    xla = _np(tf.function(lambda s: hash_bits((3, 7, 5), s), jit_compile=True)(seed))
    np.testing.assert_array_equal(eager, xla)


def test_dynamic_batch_in_a_graph():
    layer = HashDropout(0.5, seed=2)

    @tf.function(input_signature=[tf.TensorSpec((None, 16), tf.float32)])
    def run(x):
        return layer(x, training=True)

    y = _np(run(tf.ones((9, 16))))
    assert y.shape == (9, 16)
    assert set(np.unique(y)) == {0.0, 2.0}


def test_gradient_is_the_scaled_mask():
    layer = HashDropout(0.3, seed=5)
    x = tf.Variable(np.random.default_rng(2).normal(size=(8, 32)).astype("float32"))
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(y)
    grad = _np(tape.gradient(loss, x))
    kept = _np(y) != 0
    np.testing.assert_allclose(grad, np.where(kept, 1 / 0.7, 0.0), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_inputs(dtype):
    layer = HashDropout(0.5, seed=1, dtype=f"mixed_{dtype}")
    x = keras.ops.cast(np.full((64, 64), 1.5, "float32"), dtype)
    y = layer(x, training=True)
    assert keras.backend.standardize_dtype(y.dtype) == dtype
    values = set(np.unique(_np(keras.ops.cast(y, "float32"))))
    assert values == {0.0, 3.0}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rate": 1.0}, "rate=1.0"),
        ({"rate": -0.1}, "rate=-0.1"),
        ({"rate": "0.1"}, "rate='0.1'"),
        ({"rate": 0.1, "seed": "x"}, "seed.*'x'"),
        ({"rate": 0.1, "seed": 1.5}, "seed.*1.5"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HashDropout(**kwargs)


def test_transformer_block_dropout_uses_hash_bits():
    block = TransformerBlock(num_heads=2, filter_size=16, dropout=0.5, relu_dropout=0.5)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    block(x)
    dropouts = [
        block.residual_dropout,
        block.ffn.dropout_layer,
        block.self_attention.dropout_layer,
    ]
    assert all(isinstance(d, HashDropout) for d in dropouts)
    assert [d.rate for d in dropouts] == [0.5, 0.5, 0.0]
    a, b = _np(block(x, training=True)), _np(block(x, training=True))
    assert not np.allclose(a, b)  # a fresh mask per call
    np.testing.assert_array_equal(_np(block(x)), _np(block(x)))  # inference: none
