"""Token-level metrics that ignore padding (`y_true == 0`).

Both keep a running sum and a token count in Keras metric variables, which
`tf.distribute` sums over replicas, so the result is exact over the global batch.
(keras-hub has a `Perplexity` too; this one shares the padding convention and the
float32 logits contract of `build_transformer` without importing keras-hub.)
"""

import keras
from keras import ops

from tfblocks.training.losses import token_weights


class _MaskedTokenMean(keras.metrics.Metric):
    """Mean of a per-token value over non-padding tokens."""

    def __init__(self, name, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def token_values(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        values = ops.cast(self.token_values(y_true, ops.cast(y_pred, "float32")), "float32")
        weights = token_weights(y_true, sample_weight)  # [B, T]
        self.total.assign_add(ops.cast(ops.sum(values * weights), self.dtype))
        self.count.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="tfblocks")
class MaskedAccuracy(_MaskedTokenMean):
    """Fraction of non-padding tokens whose arg-max logit is the target.

    Args:
        name: metric name.
        dtype: dtype of the accumulators.

    Example:

    >>> import numpy as np
    >>> m = MaskedAccuracy()
    >>> m.update_state(np.array([[1, 2, 0]]), np.eye(3)[[[1, 0, 0]]])
    >>> float(m.result())
    0.5
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        predicted = ops.argmax(y_pred, axis=-1)  # [B, T]
        return ops.equal(ops.cast(predicted, "int32"), ops.cast(y_true, "int32"))


@keras.saving.register_keras_serializable(package="tfblocks")
class CrossEntropy(_MaskedTokenMean):
    """Mean cross-entropy without label smoothing over non-padding tokens.

    t2t reports its evaluation loss without label smoothing; the training loss
    (`SmoothedCrossEntropy`) keeps it. `compile_transformer` adds this metric, so
    `model.evaluate` and the validation logs show `cross_entropy` next to `loss`.

    Args:
        name: metric name.
        dtype: dtype of the accumulators.

    Example:

    >>> import numpy as np
    >>> m = CrossEntropy()
    >>> m.update_state(np.array([[1, 0]]), np.zeros((1, 2, 4)))  # uniform over 4
    >>> round(float(m.result()), 4)  # ln 4
    1.3863
    """

    def __init__(self, name="cross_entropy", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        # −log p_y = lse(z) − z_y; the same lse as the loss's, which XLA computes once.
        ids = ops.expand_dims(ops.cast(y_true, "int32"), -1)  # [B, T, 1]
        target = ops.squeeze(ops.take_along_axis(y_pred, ids, axis=-1), -1)  # [B, T]
        return ops.logsumexp(y_pred, axis=-1) - target


@keras.saving.register_keras_serializable(package="tfblocks")
class Perplexity(CrossEntropy):
    """`exp` of the mean (unsmoothed) cross-entropy over non-padding tokens.

    Args:
        name: metric name.
        dtype: dtype of the accumulators.

    Example:

    >>> import numpy as np
    >>> m = Perplexity()
    >>> m.update_state(np.array([[1, 0]]), np.zeros((1, 2, 4)))  # uniform over 4
    >>> round(float(m.result()), 4)
    4.0
    """

    def __init__(self, name="perplexity", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def result(self):
        return ops.exp(super().result())
