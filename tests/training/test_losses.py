"""Tests for tfblocks.training.losses against a NumPy reference of t2t's formula."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.counting import Calls
from tfblocks.training import losses
from tfblocks.training.losses import SmoothedCrossEntropy


def reference(y, logits, eps, sample_weight=None):
    """t2t smoothing_cross_entropy minus its normalizing constant, mean over real tokens."""
    v = logits.shape[-1]
    q = np.full(logits.shape, eps / (v - 1))
    np.put_along_axis(q, y[..., None], 1.0 - eps, axis=-1)
    logits = logits.astype("float64")
    log_p = logits - logits.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    cross_entropy = -(q * log_p).sum(-1)
    entropy = -(q * np.log(q + 1e-20)).sum(-1)
    weights = (y != 0).astype("float64")
    if sample_weight is not None:
        weights = weights * np.reshape(sample_weight, (len(y), -1))
    return ((cross_entropy - entropy) * weights).sum() / weights.sum()


def sample(rng, b=3, t=5, v=11):
    y = rng.integers(1, v, (b, t))
    y[0, 3:] = 0
    y[2, 1:] = 0
    return y, rng.normal(size=(b, t, v)).astype("float32") * 3


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_numpy_reference(eps):
    y, logits = sample(np.random.default_rng(0))
    got = float(SmoothedCrossEntropy(eps)(y, logits))
    np.testing.assert_allclose(got, reference(y, logits, eps), rtol=1e-5)


def expected_gradient(y, logits, eps):
    """(p − q) · weight / #real, the loss's gradient with respect to the logits."""
    v = logits.shape[-1]
    q = np.full(logits.shape, eps / (v - 1))
    np.put_along_axis(q, y[..., None], 1.0 - eps, axis=-1)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    real = (y != 0)[..., None]
    return (p - q) * real / real.sum()


@pytest.mark.parametrize(
    ("jit_compile", "min_logits"),
    [(False, 0), (False, 10**12), (True, 0)],
    ids=["compiled call", "TF kernels", "XLA step"],
)
def test_gradient_is_softmax_minus_soft_target_at_real_tokens(jit_compile, min_logits, monkeypatch):
    """d loss / d logits = (p − q) · weight / #real: the fused kernel's gradient, with and
    without XLA (outside XLA: the compiled call for large logits, TF's kernels for small
    ones), in float32 and from bfloat16 logits (mixed precision)."""
    monkeypatch.setattr(losses, "COMPILE_MIN_LOGITS", min_logits)
    calls = Calls(monkeypatch, losses, "_compiled_cross_entropy")
    y, logits = sample(np.random.default_rng(6))
    eps = 0.1
    expected = expected_gradient(y, logits, eps)
    loss = SmoothedCrossEntropy(eps)

    @tf.function(jit_compile=jit_compile)
    def gradient(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            value = loss(y, z)
        return tape.gradient(value, z)

    got = gradient(tf.constant(logits))
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-7, rtol=1e-4)
    low = gradient(tf.constant(logits, tf.bfloat16))  # bf16 logits: float32 math inside
    assert low.dtype == tf.bfloat16
    np.testing.assert_allclose(low.numpy().astype("float32"), expected, atol=2e-3)
    # Inside an XLA step the loss is part of the step, never the separate compiled call.
    assert calls.count == (2 if (min_logits == 0 and not jit_compile) else 0)


def test_relaxed_shapes_compile_only_large_logits_with_the_same_gradient(monkeypatch):
    """In a step traced once for any batch (Keras' relaxed shapes), logits of at least
    `COMPILE_MIN_LOGITS` elements go through the compiled call, smaller ones through
    TensorFlow's kernels, chosen at run time; the gradient is (p − q) · w / #real both ways."""
    monkeypatch.setattr(losses, "COMPILE_MIN_LOGITS", 100)  # 2·5·11 = 110 logits: compiled
    calls = Calls(monkeypatch, losses, "_compiled_cross_entropy")
    loss = SmoothedCrossEntropy(0.1)
    spec = [tf.TensorSpec([None, 5], tf.int64), tf.TensorSpec([None, 5, 11], tf.float32)]

    @tf.function(input_signature=spec)
    def gradient(y, z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            value = loss(y, z)
        return tape.gradient(value, z)

    y, logits = sample(np.random.default_rng(8))  # 3 rows
    for rows, compiled in ((1, 0), (2, 1)):  # 55 logits: TF kernels; 110: compiled
        got = gradient(tf.constant(y[:rows]), tf.constant(logits[:rows]))
        want = expected_gradient(y[:rows], logits[:rows], 0.1)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-7, rtol=1e-4)
        assert calls.count == compiled
    assert gradient.experimental_get_tracing_count() == 1


def test_perfect_prediction_scores_zero_and_anything_else_more():
    y, _ = sample(np.random.default_rng(1))
    q = np.where(np.eye(11)[y] > 0, 0.9, 0.1 / 10)
    loss = SmoothedCrossEntropy(0.1)
    assert abs(float(loss(y, np.log(q)))) < 1e-6
    assert float(loss(y, np.log(q) + np.random.default_rng(2).normal(size=q.shape))) > 1e-3


def test_no_smoothing_is_sparse_cross_entropy_over_real_tokens():
    y, logits = sample(np.random.default_rng(3))
    real = y != 0
    keras_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    expected = float(keras_ce(y[real], logits[real]))
    np.testing.assert_allclose(float(SmoothedCrossEntropy(0.0)(y, logits)), expected, rtol=1e-5)


def test_padding_is_excluded():
    y, logits = sample(np.random.default_rng(4))
    noisy = logits.copy()
    noisy[y == 0] = 100.0 * np.random.default_rng(5).normal(size=noisy[y == 0].shape)
    loss = SmoothedCrossEntropy(0.1)
    np.testing.assert_allclose(float(loss(y, noisy)), float(loss(y, logits)), rtol=1e-6)
    assert float(loss(np.zeros_like(y), logits)) == 0.0  # all padding: 0, not NaN


@pytest.mark.parametrize("shape", [(3,), (3, 5)])
def test_sample_weight(shape):
    y, logits = sample(np.random.default_rng(6))
    weight = np.random.default_rng(7).uniform(0.5, 2.0, shape).astype("float32")
    got = float(SmoothedCrossEntropy(0.1)(y, logits, sample_weight=weight))
    np.testing.assert_allclose(got, reference(y, logits, 0.1, weight), rtol=1e-5)


def test_call_gives_per_token_losses_zero_at_padding():
    y, logits = sample(np.random.default_rng(8))
    per_token = np.asarray(SmoothedCrossEntropy(0.1).call(y, logits))
    assert per_token.shape == y.shape
    assert (per_token[y == 0] == 0).all() and (per_token[y != 0] > 0).all()


def test_serialization_round_trip():
    loss = SmoothedCrossEntropy(0.2, name="xent")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored, SmoothedCrossEntropy)
    assert (restored.label_smoothing, restored.name) == (0.2, "xent")


@pytest.mark.parametrize("value", [1.0, -0.1, "0.1", True])
def test_invalid_label_smoothing(value):
    with pytest.raises(ValueError, match=f"label_smoothing={value!r}"):
        SmoothedCrossEntropy(value)
