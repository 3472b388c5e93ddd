"""The recipe trains under mixed precision with XLA: finite losses, float32 logits."""

import keras
import numpy as np
import pytest

from tests.fixtures import synthetic_pairs, tiny_hparams, tiny_model

pytestmark = pytest.mark.heavy


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_fit_under_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)
    hp = tiny_hparams(16, dropout=True)
    x, y = synthetic_pairs(16, 7, 16)
    model = tiny_model(hp, learning_rate=3e-3)
    assert model.jit_compile
    # Keras adds dynamic loss scaling for float16 only.
    is_scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_scaled == (policy == "mixed_float16")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history
    assert set(history) == {"loss", "accuracy", "cross_entropy", "perplexity"}
    assert np.isfinite(history["loss"]).all() and np.isfinite(history["perplexity"]).all()
    assert history["loss"][-1] < history["loss"][0]
    assert model.get_layer("decoder_layer_0").compute_dtype == policy.split("_")[1]
    assert all(w.dtype == "float32" for w in model.trainable_weights)
    logits = model(x)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
