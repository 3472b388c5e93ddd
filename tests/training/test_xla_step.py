"""Tests for tfblocks.training.xla_step: the per-replica loss and the installation checks.

Multi-replica training with it is tested in test_multi_worker.py (two processes) and
test_distribute.py (two logical CPUs).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import synthetic_dataset, tiny_hparams, tiny_model
from tfblocks.training import SmoothedCrossEntropy, compile_transformer, xla_step

SMALL = {"hidden_size": 16, "filter_size": 16, "num_heads": 2}


def _model():
    hp = tiny_hparams(20, **SMALL)
    return hp, tiny_model(hp)


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


def test_one_device_fit_with_steps_per_execution_equals_keras_step():
    """The installed step inside Keras' multi-step loop trains like Keras' own step."""
    hp = tiny_hparams(20, **SMALL)
    data = synthetic_dataset(16, 7, 20, batch_size=4, seed=1)
    initial = tiny_model(hp, seed=0).get_weights()
    trained = {}
    for jit_compile in (True, False):
        with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
            model = tiny_model(
                hp,
                weights=initial,
                jit_compile=jit_compile,
                learning_rate=1e-2,
                steps_per_execution=2,
            )
        history = model.fit(data, epochs=1, verbose=0, shuffle=False).history
        trained[jit_compile] = (model.get_weights(), history["loss"])
        assert (getattr(model, xla_step.ATTRIBUTE, None) is not None) == jit_compile
    (xla, xla_loss), (plain, plain_loss) = trained[True], trained[False]
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain, initial, strict=True)) > 1e-3
    for a, b in zip(xla, plain, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)
    np.testing.assert_allclose(xla_loss, plain_loss, rtol=1e-5)
