"""The t2t training recipe in one call: `compile_transformer(model, hp)`."""

import keras
import tensorflow as tf

from tfblocks.models.hparams import LEGACY_NOAM
from tfblocks.training.losses import SmoothedCrossEntropy
from tfblocks.training.metrics import MaskedAccuracy, Perplexity
from tfblocks.training.schedules import NoamSchedule, RsqrtDecay


def learning_rate_schedule(hp):
    """The schedule named by `hp.learning_rate_schedule`, with `hp`'s constants.

    Args:
        hp: an `HParams`.

    Returns:
        `RsqrtDecay` (t2t `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`) or,
        for `"legacy"`, `NoamSchedule` with t2t's Adam multiplier `10 · learning_rate`.

    Example:

    >>> from tfblocks.models.hparams import hparams
    >>> type(learning_rate_schedule(hparams("transformer_base_v1"))).__name__
    'NoamSchedule'
    """
    if hp.learning_rate_schedule == LEGACY_NOAM:
        # t2t legacy: 5000 · d^-½ · min(...) · 0.002 (Adam correction) · learning_rate.
        return NoamSchedule(hp.hidden_size, hp.learning_rate_warmup_steps, 10.0 * hp.learning_rate)
    return RsqrtDecay(hp.hidden_size, hp.learning_rate_warmup_steps, hp.learning_rate_constant)


def compile_transformer(model, hp, jit_compile=True, learning_rate=None, **compile_kwargs):
    """Compiles `model` with t2t's optimizer, schedule, loss and metrics.

    Adam(β₁, β₂, ε from `hp`) on `learning_rate_schedule(hp)`,
    `SmoothedCrossEntropy(hp.label_smoothing)`, `MaskedAccuracy` and `Perplexity`.
    Under a `mixed_float16` policy Keras wraps the optimizer in a
    `LossScaleOptimizer` itself. Call it inside `strategy.scope()` when distributing.

    XLA is the default, but under a `tf.distribute` strategy `jit_compile` is turned
    off, as Keras' own `jit_compile="auto"` does: Keras would compile the whole
    multi-device `strategy.run` with XLA, which fails ("Trying to access resource
    ... located in device CPU:1 from device CPU:0"). A TPU strategy compiles the
    step with XLA regardless.

    Args:
        model: a model from `build_transformer`.
        hp: the `HParams` it was built from.
        jit_compile: compile the train step with XLA (ignored under a strategy).
        learning_rate: optional float or schedule replacing the preset's schedule
            (e.g. for a short run that cannot afford thousands of warm-up steps).
        **compile_kwargs: passed on to `model.compile` (e.g. `steps_per_execution`).

    Returns:
        The model (compiled in place).

    Example:

    >>> from tfblocks.models import build_transformer, hparams
    >>> hp = hparams("transformer_tiny", vocab_size=50)
    >>> model = compile_transformer(build_transformer(hp), hp, jit_compile=False)
    >>> float(model.optimizer.beta_2), model.loss.label_smoothing
    (0.997, 0.1)
    """
    if tf.distribute.has_strategy() or getattr(model, "_distribute_strategy", None):
        jit_compile = False
    optimizer = keras.optimizers.Adam(
        learning_rate=learning_rate_schedule(hp) if learning_rate is None else learning_rate,
        beta_1=hp.optimizer_adam_beta1,
        beta_2=hp.optimizer_adam_beta2,
        epsilon=hp.optimizer_adam_epsilon,
    )
    model.compile(
        optimizer=optimizer,
        loss=SmoothedCrossEntropy(hp.label_smoothing),
        metrics=[MaskedAccuracy(), Perplexity()],
        jit_compile=jit_compile,
        **compile_kwargs,
    )
    return model
