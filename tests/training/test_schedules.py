"""Tests for tfblocks.training.schedules against t2t's formulas."""

import keras
import numpy as np
import pytest

from tfblocks.training.schedules import NoamSchedule, RsqrtDecay

STEPS = np.array([0, 1, 10, 3999, 4000, 7999, 8000, 8001, 100000])


def test_rsqrt_decay_matches_formula():
    schedule = RsqrtDecay(hidden_size=512, warmup_steps=8000, constant=2.0)
    got = np.array([float(schedule(s)) for s in STEPS])
    expected = 2.0 * np.minimum(1, STEPS / 8000) / np.sqrt(np.maximum(STEPS, 8000)) / np.sqrt(512)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got[0] == 0.0 and got.argmax() == list(STEPS).index(8000)


def test_noam_matches_t2t_legacy_formula():
    # t2t: 5000 · d^-½ · min((s+1)·w^-1.5, (s+1)^-½) · 0.002 (Adam) · learning_rate (0.1).
    schedule = NoamSchedule(hidden_size=512, warmup_steps=4000, multiplier=10 * 0.1)
    got = np.array([float(schedule(s)) for s in STEPS])
    s = STEPS + 1.0
    expected = 5000 * 512**-0.5 * np.minimum(s * 4000**-1.5, s**-0.5) * 0.002 * 0.1
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize(
    "schedule", [RsqrtDecay(256, 100, 1.5), NoamSchedule(256, 100, 0.5)], ids=["rsqrt", "noam"]
)
def test_serializable_inside_an_optimizer(schedule):
    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    restored = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert type(restored.learning_rate) is not float
    restored_schedule = restored._learning_rate
    assert type(restored_schedule) is type(schedule)
    assert restored_schedule.get_config() == schedule.get_config()
    assert float(restored_schedule(50)) == pytest.approx(float(schedule(50)))


@pytest.mark.parametrize("cls", [RsqrtDecay, NoamSchedule])
def test_invalid_arguments(cls):
    with pytest.raises(ValueError, match="hidden_size=0"):
        cls(0)
    with pytest.raises(ValueError, match=r"warmup_steps=1\.5"):
        cls(8, warmup_steps=1.5)
