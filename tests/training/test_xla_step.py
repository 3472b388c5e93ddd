"""Tests for tfblocks.training.xla_step: the per-replica loss and the installation checks.

Multi-replica training with it is tested in test_multi_worker.py (two processes) and
test_distribute.py (two logical CPUs).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfblocks.models import build_transformer, hparams
from tfblocks.training import SmoothedCrossEntropy, compile_transformer, xla_step


def _model():
    hp = hparams("transformer_tiny", vocab_size=20, hidden_size=16, filter_size=16, num_heads=2)
    return hp, build_transformer(hp)


@pytest.mark.parametrize("weights", [None, "rows", "tokens"])
def test_replica_loss_is_the_smoothed_cross_entropy(weights):
    hp, model = _model()
    compile_transformer(model, hp, jit_compile=False)
    step = xla_step.ReplicaXlaStep(model)
    rng = np.random.default_rng(0)
    y = rng.integers(1, 20, (3, 6)).astype("int32")
    y[0, 3:] = 0  # padding
    y_pred = rng.normal(size=(3, 6, 20)).astype("float32")
    sample_weight = {
        None: None,
        "rows": np.array([1.0, 0.5, 2.0], "float32"),
        "tokens": rng.uniform(0, 2, (3, 6)).astype("float32"),
    }[weights]
    count = step.global_count(y, sample_weight)  # one replica: the local count
    loss = step.replica_loss({"inputs": y}, y, y_pred, sample_weight, count)
    expected = SmoothedCrossEntropy(hp.label_smoothing)(y, y_pred, sample_weight)
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-6)


def test_needs_the_smoothed_cross_entropy():
    _, model = _model()
    model.compile(optimizer="adam", loss=keras.losses.MeanSquaredError())
    with pytest.raises(ValueError, match=r"SmoothedCrossEntropy.*got loss=.*mean_squared_error"):
        xla_step.install(model)


def test_unsupported_reason_names_the_strategy():
    assert xla_step.unsupported_reason(tf.distribute.MirroredStrategy(["/cpu:0"])) is None
    reason = xla_step.unsupported_reason(tf.distribute.experimental.CentralStorageStrategy())
    assert "CentralStorageStrategy" in reason
