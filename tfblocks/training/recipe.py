"""The t2t training recipe in one call: `compile_transformer(model, hp)`."""

import logging

import tensorflow as tf

from tfblocks import _backend, _checks
from tfblocks.models.hyperparameters import LEGACY_NOAM
from tfblocks.training import xla_step
from tfblocks.training.losses import SmoothedCrossEntropy
from tfblocks.training.metrics import CrossEntropy, MaskedAccuracy, Perplexity
from tfblocks.training.optimizers import FusedAdam
from tfblocks.training.schedules import NoamSchedule, RsqrtDecay


def learning_rate_schedule(hp):
    """The schedule named by `hp.learning_rate_schedule`, with `hp`'s constants.

    Args:
        hp: an `HParams`.

    Returns:
        `RsqrtDecay` (t2t `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`) or,
        for `"legacy"`, `NoamSchedule` with t2t's Adam multiplier `10 · learning_rate`.

    Example:

    >>> from tfblocks.models.hyperparameters import hparams
    >>> type(learning_rate_schedule(hparams("transformer_base_v1"))).__name__
    'NoamSchedule'
    """
    if hp.learning_rate_schedule == LEGACY_NOAM:
        # t2t legacy: 5000 · d^-½ · min(...) · 0.002 (Adam correction) · learning_rate.
        return NoamSchedule(hp.hidden_size, hp.learning_rate_warmup_steps, 10.0 * hp.learning_rate)
    return RsqrtDecay(hp.hidden_size, hp.learning_rate_warmup_steps, hp.learning_rate_constant)


def compile_transformer(
    model, hp, jit_compile=True, learning_rate=None, ema_decay=None, **compile_kwargs
):
    """Compiles `model` with t2t's optimizer, schedule, loss and metrics.

    Adam(β₁, β₂, ε from `hp`; `FusedAdam`, Keras' Adam with one fused kernel per
    variable) on `learning_rate_schedule(hp)`,
    `SmoothedCrossEntropy(hp.label_smoothing)`, `MaskedAccuracy` and `Perplexity`.
    Under a `mixed_float16` policy Keras wraps the optimizer in a
    `LossScaleOptimizer` itself. Call it inside `strategy.scope()` when distributing.

    With `hp.accumulate_steps = n > 1` every batch is a micro-batch, and the weights are
    updated after every n-th with the mean of the n micro-batch gradients: each
    micro-batch's token mean weighs the same whatever its token count, as in t2t, and the
    schedule counts updates (`FusedAdam`). `ema_decay` keeps a moving average of the
    trained weights in the optimizer; `tfblocks.training.averaged_weights(model)` reads
    it, and the model keeps its trained weights after `fit`.

    XLA is the default, also under `MirroredStrategy` and
    `MultiWorkerMirroredStrategy`: there Keras cannot compile its whole
    `strategy.run` (keras-team/keras#19005, #20763), so each replica's forward pass,
    loss, backward pass and metrics are compiled instead, with the token-count and
    gradient all-reduces and the optimizer update outside XLA
    (`tfblocks.training.xla_step`); `model.jit_compile` stays True. Where that cannot
    compile either (several replicas on the CPUs of one process) the step runs
    without XLA and one warning says so. A TPU strategy compiles the step with XLA
    itself (`model.jit_compile` is False there).

    Args:
        model: a model from `build_transformer`.
        hp: the `HParams` it was built from.
        jit_compile: compile the train step with XLA (per replica under a strategy).
        learning_rate: optional float or schedule replacing the preset's schedule
            (e.g. for a short run that cannot afford thousands of warm-up steps).
        ema_decay: None, or the decay d of a moving average of the weights, 0 < d < 1:
            `average ← d · average + (1 − d) · weights` after every update.
        **compile_kwargs: passed on to `model.compile` (e.g. `steps_per_execution`).

    Returns:
        The model (compiled in place; for a built model the optimizer's variables exist
        too, so the first `fit` traces its train step once).

    Raises:
        ValueError: `ema_decay` is not a number between 0 and 1.

    Example:

    >>> from tfblocks.models import build_transformer, hparams
    >>> hp = hparams("transformer_tiny", vocab_size=50)
    >>> model = compile_transformer(build_transformer(hp), hp, jit_compile=False)
    >>> float(model.optimizer.beta_2), model.loss.label_smoothing
    (0.997, 0.1)
    """
    if ema_decay is not None:
        _checks.check_fraction("ema_decay", ema_decay)
    strategy = _active_strategy(model)
    per_replica_xla = False
    if strategy is not None and jit_compile:
        reason = xla_step.unsupported_reason(strategy)
        per_replica_xla = reason is None
        if reason and not isinstance(strategy, tf.distribute.TPUStrategy):
            logging.getLogger(__name__).warning(
                "compile_transformer: jit_compile=False (training without XLA) under %s.",
                reason,
            )
        jit_compile = per_replica_xla
    optimizer = FusedAdam(
        learning_rate=learning_rate_schedule(hp) if learning_rate is None else learning_rate,
        beta_1=hp.optimizer_adam_beta1,
        beta_2=hp.optimizer_adam_beta2,
        epsilon=hp.optimizer_adam_epsilon,
        gradient_accumulation_steps=hp.accumulate_steps if hp.accumulate_steps > 1 else None,
        **({} if ema_decay is None else {"use_ema": True, "ema_momentum": ema_decay}),
    )
    model.compile(
        optimizer=optimizer,
        loss=SmoothedCrossEntropy(hp.label_smoothing),
        metrics=[MaskedAccuracy(), CrossEntropy(), Perplexity()],
        jit_compile=jit_compile,
        **compile_kwargs,
    )
    if model.built and not model.optimizer.built:
        # Adam's moments now: variables created while tracing the train step (where Keras
        # defers them without a strategy) make `tf.function` trace the whole step twice.
        if _backend.is_tensorflow():
            with model.distribute_strategy.scope():
                model.optimizer.build(model.trainable_variables)
        else:
            model.optimizer.build(model.trainable_variables)
    if per_replica_xla:
        xla_step.install(model)
    else:
        xla_step.uninstall(model)  # in case an earlier compile installed it
    return model


def _active_strategy(model):
    """The `tf.distribute` strategy `model` trains under, or None for the default (and
    under another Keras backend, which has no `tf.distribute`)."""
    if not _backend.is_tensorflow():
        return None
    strategy = getattr(model, "_distribute_strategy", None)
    if strategy is None and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
    return strategy
