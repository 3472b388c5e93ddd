"""t2t's label-smoothed cross-entropy (`common_layers.smoothing_cross_entropy`).

The target class gets probability `1 − ε`, every other class `ε / (V − 1)` (not Keras'
`label_smoothing`, which spreads ε over all V classes including the target), and the
entropy of that soft target is subtracted so that a perfect prediction scores 0.
Padding positions (`y_true == PAD_ID`) do not count; the result is the mean over the
real tokens of the *global* batch, also under `tf.distribute`.
"""

import math

import keras
import tensorflow as tf
from keras import ops

from tfblocks import _backend
from tfblocks._xla import compiled_if_large, in_xla_context
from tfblocks.ids import PAD_ID


def _check_smoothing(label_smoothing):
    if (
        isinstance(label_smoothing, bool)
        or not isinstance(label_smoothing, (int, float))
        or not 0.0 <= label_smoothing < 1.0
    ):
        raise ValueError(
            f"`label_smoothing` must be a float in [0, 1), got label_smoothing={label_smoothing!r}."
        )
    return float(label_smoothing)


def smoothed_token_losses(y_true, logits, label_smoothing):
    """Per-token t2t smoothed cross-entropy minus its minimum, `[B, T]`, float32.

    Args:
        y_true: int `[B, T]` target ids.
        logits: `[B, T, V]` unnormalised scores.
        label_smoothing: ε in [0, 1).

    Returns:
        float32 `[B, T]`: `H(q, p) − H(q)` with q the smoothed target distribution;
        0 for a prediction equal to q. Padding positions are *not* zeroed here.
    """
    logits = ops.cast(logits, "float32")
    vocab = logits.shape[-1]
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    # Entropy of the soft target, t2t's "normalizing" constant (1e-20 avoids log 0).
    normalizing = -(confidence * math.log(confidence) + (vocab - 1) * low * math.log(low + 1e-20))
    if not _backend.is_tensorflow():  # JAX: the same sum, the backend's autodiff
        soft_target = ops.one_hot(ops.cast(y_true, "int32"), vocab) * (confidence - low) + low
        return -ops.sum(soft_target * ops.log_softmax(logits), axis=-1) - normalizing
    ids = tf.cast(y_true, tf.int32)
    if in_xla_context():
        return _cross_entropy(ids, logits, confidence, low) - normalizing
    entropy = compiled_if_large(
        ops.shape(logits),
        COMPILE_MIN_LOGITS,
        lambda: _compiled_cross_entropy(ids, logits, confidence, low),
        lambda: _cross_entropy(ids, logits, confidence, low),
    )
    return entropy - normalizing


def _cross_entropy(ids, logits, confidence, low):
    """H(q, p) `[B, T]` for q = `confidence` on `ids`, `low` elsewhere.

    TensorFlow's fused kernel computes the gradient p − q in the same pass. Picking the
    target's logit with a gather instead would make its gradient a scatter into a
    [B, T, V] tensor (`UnsortedSegmentSum`), costly on a CPU without XLA.
    """
    soft_target = tf.one_hot(
        ids, tf.shape(logits)[-1], on_value=confidence, off_value=low, dtype=tf.float32
    )
    return tf.nn.softmax_cross_entropy_with_logits(soft_target, logits)


# Outside an XLA-compiled step, logits of at least COMPILE_MIN_LOGITS elements go through
# one small compiled function (XLA fuses the one-hot, the softmax and the gradient's
# product), compiled once per shape; below that a compilation does not pay back and the
# same ops run as TensorFlow kernels (equal up to rounding). Figures, AVX2 and AVX-512
# CPUs: docs/performance.md, "Measured design choices".
COMPILE_MIN_LOGITS = 1 << 22
_compiled_cross_entropy = tf.function(
    _cross_entropy, jit_compile=True, reduce_retracing=True, autograph=False
)


def global_token_mean(total, count):
    """`total / count` where `count` is summed over all replicas, Keras-scaled.

    Keras sums the gradients of the per-replica losses and divides the reported loss
    by the replica count, expecting each replica to return its share of the global
    mean. Returning `replica_total / global_count` makes the sum over replicas the
    exact token mean of the global batch, however tokens are spread over replicas.
    """
    if not _backend.is_tensorflow():
        return ops.divide_no_nan(total, count)
    replica = tf.distribute.get_replica_context()
    if replica is not None and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        count = replica.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return ops.divide_no_nan(total, count)


def token_weights(y_true, sample_weight=None):
    """Float32 weights `[B, T]`: 0 at padding (`y_true == PAD_ID`), else `sample_weight`
    (`[B]` per sentence or `[B, T]` per token; 1 when None). The one place the loss and
    the metrics decide which tokens count.

    Example:

    >>> import numpy as np
    >>> np.asarray(token_weights(np.array([[5, 1, 0]]))).tolist()
    [[1.0, 1.0, 0.0]]
    """
    weights = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")  # [B, T]
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) == 1:
            sample_weight = ops.expand_dims(sample_weight, -1)  # [B, 1]
        weights = weights * sample_weight
    return weights


@keras.saving.register_keras_serializable(package="tfblocks")
class SmoothedCrossEntropy(keras.losses.Loss):
    """t2t label-smoothed cross-entropy over non-padding tokens.

    `loss = Σ_real (H(q, p) − H(q)) / #real` with `q = 1 − ε` on the target and
    `ε / (V − 1)` elsewhere; `y_true == 0` is padding. `sample_weight` (`[B]` or
    `[B, T]`) multiplies each token's weight. Under `tf.distribute` the token count
    is all-reduced so the mean is over the global batch.

    Args:
        label_smoothing: ε in [0, 1); t2t's default is 0.1.
        name: loss name.
        dtype: dtype of the loss computations (float32 by default).

    Example:

    >>> import numpy as np
    >>> loss = SmoothedCrossEntropy(label_smoothing=0.1)
    >>> y = np.array([[2, 1, 0]])
    >>> perfect = np.log(np.where(np.eye(4)[y] > 0, 0.9, 0.1 / 3))
    >>> abs(float(loss(y, perfect))) < 1e-6
    True
    >>> round(float(loss(y, np.zeros((1, 3, 4)))), 4)  # uniform prediction
    0.9514
    """

    def __init__(self, label_smoothing=0.1, name="smoothed_cross_entropy", dtype=None):
        super().__init__(name=name, reduction="sum_over_batch_size", dtype=dtype)
        self.label_smoothing = _check_smoothing(label_smoothing)

    def call(self, y_true, y_pred):
        """Per-token losses `[B, T]`, 0 at padding."""
        losses = smoothed_token_losses(y_true, y_pred, self.label_smoothing)
        return losses * ops.cast(token_weights(y_true), losses.dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            losses = smoothed_token_losses(y_true, y_pred, self.label_smoothing)
            weights = token_weights(y_true, sample_weight)  # [B, T]
            loss = global_token_mean(ops.sum(losses * weights), ops.sum(weights))
            return ops.cast(loss, self.dtype)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "dtype": self.dtype}
