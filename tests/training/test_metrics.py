"""Tests for tfblocks.training.metrics against NumPy references."""

import keras
import numpy as np

from tfblocks.training.metrics import MaskedAccuracy, Perplexity


def sample(rng, b=4, t=6, v=9):
    y = rng.integers(1, v, (b, t))
    y[1, 2:] = 0
    y[3, 5:] = 0
    return y, rng.normal(size=(b, t, v)).astype("float32")


def test_masked_accuracy_matches_numpy_over_two_batches():
    rng = np.random.default_rng(0)
    metric = MaskedAccuracy()
    correct = count = 0
    for _ in range(2):
        y, logits = sample(rng)
        logits[y == 0] = 0.0
        logits[..., 0][y == 0] = 10.0  # padding "predicted" right must not count
        metric.update_state(y, logits)
        real = y != 0
        correct += (logits.argmax(-1) == y)[real].sum()
        count += real.sum()
    np.testing.assert_allclose(float(metric.result()), correct / count, rtol=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_masked_accuracy_sample_weight():
    y, logits = sample(np.random.default_rng(1))
    weight = np.array([1.0, 0.0, 2.0, 1.0], "float32")
    metric = MaskedAccuracy()
    metric.update_state(y, logits, sample_weight=weight)
    w = (y != 0) * weight[:, None]
    expected = ((logits.argmax(-1) == y) * w).sum() / w.sum()
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)


def test_perplexity_matches_numpy():
    y, logits = sample(np.random.default_rng(2))
    metric = Perplexity()
    metric.update_state(y, logits)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
    expected = np.exp(nll[y != 0].mean())
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5)


def test_serialization_round_trip():
    for metric in (MaskedAccuracy(name="acc"), Perplexity()):
        config = keras.saving.serialize_keras_object(metric)
        restored = keras.saving.deserialize_keras_object(config)
        assert type(restored) is type(metric) and restored.name == metric.name
