"""Tests for tfblocks.training.recipe: the t2t optimizer settings and a short fit."""

import numpy as np
import pytest

from tfblocks.models import build_transformer, hparams
from tfblocks.training.losses import SmoothedCrossEntropy
from tfblocks.training.recipe import compile_transformer, learning_rate_schedule
from tfblocks.training.schedules import NoamSchedule, RsqrtDecay


@pytest.mark.parametrize(
    "name, beta2, cls, peak_step",
    [
        ("transformer_base", 0.997, RsqrtDecay, 8000),
        ("transformer_base_v1", 0.98, NoamSchedule, 3999),
    ],
)
def test_schedule_and_adam_follow_the_preset(name, beta2, cls, peak_step):
    hp = hparams(name, vocab_size=20, hidden_size=32, filter_size=32, num_heads=4)
    model = compile_transformer(build_transformer(hp), hp, jit_compile=False)
    optimizer = model.optimizer
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, beta2, 1e-9)
    schedule = learning_rate_schedule(hp)
    assert isinstance(schedule, cls)
    # Both presets peak at 1/√(warmup · d) (t2t: "equivalent to previous version").
    expected_peak = {8000: 2.0 / np.sqrt(8000 * 32), 3999: 1.0 / np.sqrt(4000 * 32)}[peak_step]
    assert float(schedule(peak_step)) == pytest.approx(expected_peak, rel=1e-6)
    assert isinstance(model.loss, SmoothedCrossEntropy) and model.loss.label_smoothing == 0.1


def test_short_fit_with_xla_lowers_the_loss():
    hp = hparams(
        "transformer_tiny",
        vocab_size=16,
        hidden_size=32,
        filter_size=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    rng = np.random.default_rng(0)
    src = rng.integers(4, 16, (32, 6)).astype("int32")
    tgt = np.concatenate([src[:, ::-1], np.ones((32, 1), "int32")], axis=1)
    x = {"inputs": src, "targets": tgt}
    model = compile_transformer(build_transformer(hp), hp, learning_rate=3e-3)
    assert model.jit_compile
    history = model.fit(x, tgt, batch_size=16, epochs=6, verbose=0).history
    assert set(history) == {"loss", "accuracy", "perplexity"}
    assert history["loss"][-1] < history["loss"][0] - 0.3
    assert np.isfinite(history["perplexity"]).all()
