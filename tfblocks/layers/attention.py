"""Multi-head attention with t2t semantics (`common_attention.multihead_attention`).

Each of q, k, v and the output transform is a `keras.layers.Dense` on the last axis
(kernel `(in_dim, num_heads * depth)`, no bias by default, as t2t `compute_qkv`), so
the same matrix is applied at every position. Departures from t2t: the mask is a
boolean "may attend" tensor (t2t passes an additive bias), and a fully masked row
yields a uniform average of the values instead of depending on a literal -1e9.
"""

import keras
from keras import ops

from tfblocks.layers import _utils


@keras.saving.register_keras_serializable(package="tfblocks")
class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over `num_heads` heads, t2t style.

    `softmax(q kᵀ / √key_dim) v` per head, heads concatenated and projected by the
    output matrix W_O. q is scaled by `key_dim ** -0.5` before the dot product; the
    softmax always runs in float32 (also under mixed precision).

    Args:
        num_heads: number of attention heads.
        key_dim: depth of each head for q and k; defaults to `in_dim // num_heads`
            (then `in_dim` must be divisible by `num_heads`).
        value_dim: depth of each head for v; defaults to `key_dim`.
        output_dim: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention weights.
        use_bias: whether the four projections have biases (t2t: no).
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        kernel_regularizer: optional regularizer of the projection kernels.
        bias_regularizer: optional regularizer of the projection biases.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[B, T, dim]`.
        value: `[B, S, dim]`.
        key: `[B, S, dim]`; defaults to `value`.
        query_mask / value_mask / key_mask: boolean `[B, T]` / `[B, S]` padding masks;
            taken from the Keras implicit masks of the inputs when not given.
        attention_mask: boolean `[B, T, S]`, True = may attend; ANDed with the rest.
        use_causal_mask: forbid query i from attending key j > i.
        return_attention_scores: also return the `[B, H, T, S]` attention weights.
        training: enables dropout.

    Example:

    >>> import numpy as np
    >>> mha = MultiHeadAttention(num_heads=8)
    >>> x = np.random.rand(2, 5, 512).astype("float32")
    >>> y, scores = mha(x, x, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 5, 512), (2, 8, 5, 5))
    >>> tuple(mha.query_dense.kernel.shape)
    (512, 512)
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        use_bias=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _utils.check_positive_int("num_heads", num_heads)
        self.key_dim = _utils.check_optional_positive_int("key_dim", key_dim)
        self.value_dim = _utils.check_optional_positive_int("value_dim", value_dim)
        self.output_dim = _utils.check_optional_positive_int("output_dim", output_dim)
        self.dropout = _utils.check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.supports_masking = True
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=_utils.clone_initializer(self.kernel_initializer),
            bias_initializer=_utils.clone_initializer(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        in_dim = query_shape[-1]
        if self.key_dim is None and in_dim % self.num_heads != 0:
            raise ValueError(
                f"The query's last dimension ({in_dim}) must be divisible by "
                f"`num_heads`, got num_heads={self.num_heads} (or pass `key_dim`)."
            )
        self._key_depth = self.key_dim or in_dim // self.num_heads
        self._value_depth = self.value_dim or self._key_depth
        out_dim = self.output_dim or in_dim
        self.query_dense = self._dense(self.num_heads * self._key_depth, "query_dense")
        self.key_dense = self._dense(self.num_heads * self._key_depth, "key_dense")
        self.value_dense = self._dense(self.num_heads * self._value_depth, "value_dense")
        self.output_dense = self._dense(out_dim, "output_dense")
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense.build((*tuple(query_shape[:-1]), self.num_heads * self._value_depth))
        self.dropout_layer.build(None)

    def _split_heads(self, x, depth):
        # [B, L, H*depth] -> [B, L, H, depth]
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, depth))

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        if key is None:
            key = value
            key_mask = None  # the key is the value: its mask is `value_mask`.
        if key_mask is not None:
            value_mask = key_mask if value_mask is None else ops.logical_and(value_mask, key_mask)
        mask = _utils.merge_attention_masks(
            query,
            value,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        q = self._split_heads(self.query_dense(query), self._key_depth)  # [B, T, H, dk]
        k = self._split_heads(self.key_dense(key), self._key_depth)  # [B, S, H, dk]
        v = self._split_heads(self.value_dense(value), self._value_depth)  # [B, S, H, dv]
        output, weights = self.attend(q, k, v, mask, training=training)  # [B, T, H, dv]
        shape = ops.shape(output)
        output = ops.reshape(output, (shape[0], shape[1], -1))  # [B, T, H*dv]
        output = self.output_dense(output)
        if return_attention_scores:
            return output, weights
        return output

    def attend(self, q, k, v, mask=None, training=None):
        """Scaled dot-product attention on split heads.

        Args:
            q: `[B, T, H, dk]` queries (not yet scaled).
            k: `[B, S, H, dk]` keys.
            v: `[B, S, H, dv]` values.
            mask: optional boolean mask broadcastable to `[B, T, S]`.
            training: enables dropout on the weights.

        Returns:
            `(output [B, T, H, dv], weights [B, H, T, S])`; weights are float32.
        """
        q = q * ops.cast(self._key_depth**-0.5, q.dtype)
        logits = ops.einsum("bthd,bshd->bhts", q, k)  # [B, H, T, S]
        # Softmax in float32 even under mixed precision: float16 logits overflow.
        logits = ops.cast(logits, "float32")
        if mask is not None:
            bias = ops.where(
                ops.expand_dims(mask, 1),  # [B|1, 1, T, S]
                0.0,
                _utils.large_negative("float32"),
            )
            logits = logits + ops.cast(bias, "float32")
        weights = ops.softmax(logits, axis=-1)  # [B, H, T, S], float32
        dropped = self.dropout_layer(ops.cast(weights, v.dtype), training=training)
        output = ops.einsum("bhts,bshd->bthd", dropped, v)  # [B, T, H, dv]
        return output, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            }
        )
        return config
