"""t2t learning-rate schedules as Keras `LearningRateSchedule`s.

`step` is the optimizer's `iterations` (0 before the first update), exactly t2t's
global step, so both schedules reproduce t2t's values step for step.
"""

import keras
from keras import ops


def _positive(name, value, integer=False):
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "integer" if integer else "number"
        raise ValueError(f"`{name}` must be a positive {kind}, got {name}={value!r}.")
    return value


@keras.saving.register_keras_serializable(package="tfblocks")
class RsqrtDecay(keras.optimizers.schedules.LearningRateSchedule):
    """t2t `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`.

    `lr(step) = constant · min(1, step / warmup_steps) · max(step, warmup_steps)^-½ ·
    hidden_size^-½`: linear warm-up to the peak `constant / √(warmup_steps · d)`,
    then decay as `1/√step`.

    Args:
        hidden_size: d_model.
        warmup_steps: linear warm-up steps (t2t `learning_rate_warmup_steps`).
        constant: t2t `learning_rate_constant` (2.0 in `transformer_base`).

    Example:

    >>> schedule = RsqrtDecay(hidden_size=512, warmup_steps=8000, constant=2.0)
    >>> round(float(schedule(8000)), 7)
    0.0009882
    """

    def __init__(self, hidden_size, warmup_steps=8000, constant=2.0):
        self.hidden_size = _positive("hidden_size", hidden_size, integer=True)
        self.warmup_steps = _positive("warmup_steps", warmup_steps, integer=True)
        self.constant = float(_positive("constant", constant))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        return (
            self.constant
            * ops.minimum(1.0, step / warmup)
            * ops.rsqrt(ops.maximum(step, warmup))
            * self.hidden_size**-0.5
        )

    def get_config(self):
        return {
            "hidden_size": self.hidden_size,
            "warmup_steps": self.warmup_steps,
            "constant": self.constant,
        }


@keras.saving.register_keras_serializable(package="tfblocks")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """t2t's legacy "noam" schedule (the paper's formula, counted from step + 1).

    `lr(step) = multiplier · hidden_size^-½ · min((step + 1) · warmup_steps^-1.5,
    (step + 1)^-½)`. t2t computes `5000 · 0.002 · learning_rate` in front of it for
    Adam, so `multiplier = 10 · hparams.learning_rate` (1.0 for
    `transformer_base_v1`, i.e. the paper's schedule).

    Args:
        hidden_size: d_model.
        warmup_steps: warm-up steps.
        multiplier: constant factor.

    Example:

    >>> schedule = NoamSchedule(hidden_size=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 7)
    0.0006988
    """

    def __init__(self, hidden_size, warmup_steps=4000, multiplier=1.0):
        self.hidden_size = _positive("hidden_size", hidden_size, integer=True)
        self.warmup_steps = _positive("warmup_steps", warmup_steps, integer=True)
        self.multiplier = float(_positive("multiplier", multiplier))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return (
            self.multiplier
            * self.hidden_size**-0.5
            * ops.minimum(step * float(self.warmup_steps) ** -1.5, ops.rsqrt(step))
        )

    def get_config(self):
        return {
            "hidden_size": self.hidden_size,
            "warmup_steps": self.warmup_steps,
            "multiplier": self.multiplier,
        }
