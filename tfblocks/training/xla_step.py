"""XLA-compiled training under `tf.distribute`: one compiled gradient step per replica.

Keras 3 on TensorFlow compiles its step by wrapping the whole `strategy.run(train_step)`
in `tf.function(jit_compile=True)`. Under `MirroredStrategy` and
`MultiWorkerMirroredStrategy` that cannot work: the optimizer's gradient all-reduce
is a `merge_call` inside the compiled function (keras-team/keras#20763), XLA cannot
compile collective ops on CPU at all ("Collectives are not yet implemented for CPU
devices when compiling with XLA"), and one XLA cluster cannot reach variables on
several devices (keras-team/keras#19005). So Keras turns XLA off for every
multi-replica run.

`install(model)` gives a model compiled with `SmoothedCrossEntropy` (what
`compile_transformer` does) a step that splits at exactly those points. Per replica,
in order:

1. *not compiled*: the replica's weighted token count, all-reduced (summed) over the
   replicas. The t2t loss is a mean over the tokens of the **global** batch, and this
   count is the only cross-replica value the loss needs; it does not depend on the
   weights, so it stays outside the gradient.
2. *one `tf.function(jit_compile=True)`*: the forward pass, the loss
   `Σ replica token losses / global count`, its gradient (the backward pass) and the
   metric updates. This is where nearly all the step's time goes.
3. *not compiled*: `optimizer.apply_gradients`, which sums the gradients over the
   replicas and updates the mirrored weights, as in Keras' own step.

The result is Keras' non-XLA step, number for number, up to floating-point summation
order: the same loss, the same per-replica gradient (whose replica sum is the gradient
of the global mean), the same loss-tracker and metric updates. `model.jit_compile`
stays `True`; evaluation and prediction compile their per-replica forward pass the
same way.

This also works with several replicas in one process (`MirroredStrategy` over GPUs, or
over logical CPUs in the tests): each replica's function is compiled for, and runs on,
its own device, which is what Keras' single cluster over all devices could not do.
Strategies that keep variables away from the replica's device (central storage,
parameter servers) are not covered: `unsupported_reason` names them and
`compile_transformer` falls back to the non-XLA step with one log line.
"""

import functools

import keras
import tensorflow as tf
from keras import ops

from tfblocks.training.losses import (
    SmoothedCrossEntropy,
    smoothed_token_losses,
    token_weights,
)

# The model attribute that holds the installed step (its compiled functions), for tests.
ATTRIBUTE = "_tfblocks_replica_xla"
_SUPPORTED = (
    tf.distribute.MirroredStrategy,
    tf.distribute.MultiWorkerMirroredStrategy,
    tf.distribute.OneDeviceStrategy,
)


def unsupported_reason(strategy):
    """Why per-replica XLA does not apply to `strategy`, or None when it does.

    It applies where every replica's variables live on the device that runs the
    replica: `MirroredStrategy` (GPUs, or logical CPUs in tests),
    `MultiWorkerMirroredStrategy` and `OneDeviceStrategy`. A `TPUStrategy` compiles
    its step with XLA itself; other strategies (central or parameter-server variable
    storage) keep the non-XLA step.

    Args:
        strategy: a `tf.distribute.Strategy`.

    Returns:
        None, or a sentence naming the strategy.

    Example:

    >>> unsupported_reason(tf.distribute.OneDeviceStrategy("/cpu:0")) is None
    True
    """
    if isinstance(strategy, _SUPPORTED):
        return None
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "a TPUStrategy compiles its step with XLA itself"
    return (
        f"{type(strategy).__name__}: per-replica XLA needs each replica's variables on "
        "its own device (MirroredStrategy, MultiWorkerMirroredStrategy, OneDeviceStrategy)"
    )


def _batch_size(x):
    return tf.shape(next(v for v in tf.nest.flatten(x) if v is not None))[0]


class ReplicaXlaStep:
    """The train / test / predict steps that `install` puts on a model.

    Args:
        model: a compiled Keras model whose loss is a `SmoothedCrossEntropy`.
    """

    def __init__(self, model):
        if not isinstance(model.loss, SmoothedCrossEntropy):
            raise ValueError(
                "Per-replica XLA needs the model compiled with a SmoothedCrossEntropy "
                f"loss (compile_transformer does), got loss={model.loss!r}."
            )
        self.model = model
        self.label_smoothing = model.loss.label_smoothing
        self.loss_dtype = model.loss.dtype
        # Compiled once per make_*_function (a recompiled model gets fresh ones).
        self.train_gradients = None
        self.test_metrics = None
        self.predict_logits = None

    # --- The cross-replica part, outside XLA -------------------------------------
    def global_count(self, y, sample_weight):
        """The weighted token count of the global batch (an all-reduce when distributed)."""
        count = ops.sum(token_weights(y, sample_weight))
        replica = tf.distribute.get_replica_context()
        if replica is not None and tf.distribute.get_strategy().num_replicas_in_sync > 1:
            count = replica.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return count

    # --- The per-replica part, inside XLA ----------------------------------------
    def replica_loss(self, x, y, y_pred, sample_weight, count):
        """This replica's share of the global loss; updates the loss tracker.

        Keras sums the replicas' gradients, so each replica returns
        `Σ its token losses / global count` (plus its share of any `add_loss` terms);
        the reported loss is that times the replica count, averaged over replicas.
        """
        model = self.model
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        losses = smoothed_token_losses(y, y_pred, self.label_smoothing)  # [B, T]
        total = ops.sum(losses * token_weights(y, sample_weight))
        loss = ops.cast(ops.divide_no_nan(total, count), self.loss_dtype)
        for extra in model.losses:  # add_loss / regularizers, scaled like Keras does
            extra = ops.cast(ops.sum(extra), loss.dtype)
            loss = loss + extra / replicas
        model._loss_tracker.update_state(loss * replicas, sample_weight=_batch_size(x))
        return loss

    def _train_gradients(self, x, y, sample_weight, count):
        model = self.model
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = self.replica_loss(x, y, y_pred, sample_weight, count)
            scaled = model.optimizer.scale_loss(loss)  # LossScaleOptimizer: × scale
        gradients = tape.gradient(scaled, model.trainable_weights)
        return gradients, model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _test_metrics(self, x, y, sample_weight, count):
        y_pred = self.model(x, training=False)
        self.replica_loss(x, y, y_pred, sample_weight, count)
        return self.model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # --- The steps Keras calls inside strategy.run -------------------------------
    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        count = self.global_count(y, sample_weight)  # all-reduce: outside XLA
        gradients, logs = self.train_gradients(x, y, sample_weight, count)  # XLA
        # Gradient all-reduce and the update: outside XLA, as in Keras' own step.
        self.model.optimizer.apply_gradients(
            zip(gradients, self.model.trainable_weights, strict=True)
        )
        return logs

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        count = self.global_count(y, sample_weight)
        return self.test_metrics(x, y, sample_weight, count)

    def predict_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        return self.predict_logits(x)

    # --- Building Keras' step functions without Keras' whole-step XLA ------------
    def _compiled(self, fn):
        return tf.function(fn, jit_compile=True, reduce_retracing=True, autograph=False)

    def make_function(self, kind, force=False):
        """`model.make_{kind}_function`: Keras' loop around our step, outer jit off."""
        model = self.model
        existing = getattr(model, f"{kind}_function")
        if existing is not None and not force:
            return existing
        if kind == "train":
            self.train_gradients = self._compiled(self._train_gradients)
        elif kind == "test":
            self.test_metrics = self._compiled(self._test_metrics)
        else:
            self.predict_logits = self._compiled(lambda x: self.model(x, training=False))
        make = getattr(type(model), f"make_{kind}_function")
        saved = model._jit_compile
        model._jit_compile = False  # Keras must not compile the whole strategy.run
        try:
            return make(model, force=force)
        finally:
            model._jit_compile = saved


def install(model):
    """Makes a compiled `model` train, evaluate and predict with per-replica XLA.

    Call after `model.compile(..., jit_compile=True)` under a `MirroredStrategy` or
    `MultiWorkerMirroredStrategy` (`compile_transformer` does this). The model's
    `train_step`, `test_step`, `predict_step` and `make_*_function` are replaced on
    this instance only; `model.jit_compile` stays True.

    Args:
        model: a Keras model compiled with a `SmoothedCrossEntropy` loss.

    Returns:
        The `ReplicaXlaStep` installed (also `getattr(model, ATTRIBUTE)`).

    Raises:
        ValueError: the model's loss is not a `SmoothedCrossEntropy`.
    """
    step = ReplicaXlaStep(model)
    setattr(model, ATTRIBUTE, step)
    model.train_step = step.train_step
    model.test_step = step.test_step
    model.predict_step = step.predict_step
    for kind in ("train", "test", "predict"):
        setattr(model, f"make_{kind}_function", functools.partial(step.make_function, kind))
    model.train_function = model.test_function = model.predict_function = None
    return step


def uninstall(model):
    """Undoes `install` (when a model is compiled again without per-replica XLA)."""
    if getattr(model, ATTRIBUTE, None) is None:
        return
    for name in (ATTRIBUTE, "train_step", "test_step", "predict_step"):
        delattr(model, name)
    for kind in ("train", "test", "predict"):
        delattr(model, f"make_{kind}_function")
    model.train_function = model.test_function = model.predict_function = None
