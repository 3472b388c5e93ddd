"""Tests for tfblocks.training.recipe: the t2t optimizer settings, a short fit, gradient
accumulation."""

import numpy as np
import pytest

from tests.fixtures import synthetic_pairs, tiny_hparams, tiny_model
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


def test_the_train_step_is_traced_once():
    """Adam's moments exist after `compile_transformer`: created inside the first trace of
    the train step, they would make `tf.function` trace the whole step twice."""
    hp = hparams("transformer_tiny", vocab_size=20, hidden_size=16, filter_size=16,
                 num_heads=2, num_encoder_layers=1, num_decoder_layers=1)  # fmt: skip
    model = compile_transformer(build_transformer(hp), hp, jit_compile=False)
    assert model.optimizer.built
    assert len(model.optimizer.variables) > 2 * len(model.trainable_variables)  # m and v
    traces = []
    step = model.train_step

    def counting_step(data):
        traces.append(1)  # runs in Python once per trace
        return step(data)

    model.train_step = counting_step
    ids = np.random.default_rng(0).integers(3, 20, size=(8, 5)).astype("int32")
    model.fit({"inputs": ids, "targets": ids}, ids, batch_size=4, epochs=2, verbose=0)
    assert len(traces) == 1
    assert int(model.optimizer.iterations) == 4


@pytest.mark.parametrize("jit_compile", [False, True])
def test_accumulated_micro_batches_equal_one_batch_n_times_larger(jit_compile):
    """`accumulate_steps=4` on batches of 4 rows of equal token counts: the weights of one
    batch of 16 per update, the schedule at the update count (a rising warm-up, where a
    micro-batch count would give another rate)."""
    small = {"hidden_size": 16, "filter_size": 16, "num_heads": 2}
    x, y = synthetic_pairs(32, 6, 20, padded=False)  # every row: 6 tokens
    initial = tiny_model(tiny_hparams(20, **small), seed=0).get_weights()
    trained = {}
    for steps, batch_size in ((1, 16), (4, 4)):
        hp = tiny_hparams(20, accumulate_steps=steps, **small)
        model = tiny_model(
            hp, weights=initial, jit_compile=jit_compile and steps > 1,
            learning_rate=NoamSchedule(16, warmup_steps=4),
        )  # fmt: skip
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False)
        assert int(model.optimizer.iterations) == 2
        trained[steps] = model.get_weights()
    moved = max(float(np.abs(a - b).max()) for a, b in zip(trained[1], initial, strict=True))
    assert moved > 1e-3
    for a, b in zip(trained[4], trained[1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
