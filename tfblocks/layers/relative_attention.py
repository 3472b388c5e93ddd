"""Relative position self-attention (Shaw et al. 2018; t2t `dot_product_attention_relative`).

Every pair (query position i, key position j) gets the clipped distance
`d = clip(j − i, −k, k)` (k = `max_relative_position`), which indexes two learned tables of
`2k + 1` rows, one for keys (`a_K`, depth `key_dim`) and one for values (`a_V`, depth
`value_dim`), shared by all heads. With q already scaled by `key_dim ** -0.5`:

    logits[i, j] = q_i · k_j + q_i · a_K[d(i, j)]
    output_i     = Σ_j w[i, j] · (v_j + a_V[d(i, j)])

so the attention knows how far apart two tokens are, whatever their absolute positions,
and t2t's `transformer_relative` drops the sinusoidal timing signal. In incremental
decoding the positions are those of the cache: the query at step i sees the keys
0 … i at distances −i … 0, exactly as in the full pass.

Departures from t2t: none in the formula. t2t computes the distance matrix from the
lengths (and a separate path for one decoding step); here the positions come with the
mask (`RelativeMask`), so the full pass, the cache and packed rows (where the distance
within a pair equals the distance in the row) share one computation.
"""

from typing import NamedTuple

import keras
from keras import ops

from tfblocks.layers import _utils
from tfblocks.layers.attention import MultiHeadAttention, key_value_subscripts


class RelativeMask(NamedTuple):
    """What `RelativeMultiHeadAttention._attention_mask` hands to `_compute_attention`."""

    mask: object  # boolean [B|1, T, S] or None
    query_positions: object  # int [T]
    key_positions: object  # int [S]


def relative_positions(query_positions, key_positions, max_relative_position):
    """Table rows `clip(j − i, −k, k) + k` of every query i and key j: int `[T, S]`.

    Example:

    >>> import numpy as np
    >>> relative_positions(np.arange(3), np.arange(4), 2).numpy().tolist()
    [[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3]]
    """
    distance = ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 1)  # [T, S]
    k = max_relative_position
    return ops.clip(ops.cast(distance, "int32"), -k, k) + k


@keras.saving.register_keras_serializable(package="tfblocks")
class RelativeMultiHeadAttention(MultiHeadAttention):
    """Self-attention with learned relative position representations (see the module).

    A `MultiHeadAttention` with two more weights, `relative_keys` `[2k + 1, key_dim]` and
    `relative_values` `[2k + 1, value_dim]`. Masks, caches, dropout, mixed precision and the
    returned scores are those of `MultiHeadAttention`; a precomputed cache without a
    `cache_index` (cross-attention over an encoder output) has no query positions and is
    refused.

    Args:
        num_heads: number of attention heads.
        max_relative_position: k, the largest distance told apart (t2t's
            `max_relative_position`, 20 in `transformer_relative`); farther keys share the
            table rows of ±k.
        relative_initializer: initializer of the two tables (t2t: Glorot uniform).
        **kwargs: the other `MultiHeadAttention` arguments and base layer arguments.

    Example:

    >>> import numpy as np
    >>> attention = RelativeMultiHeadAttention(num_heads=2, max_relative_position=3)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> tuple(attention(x, x, use_causal_mask=True).shape)
    (1, 5, 8)
    >>> tuple(attention.relative_keys.shape), tuple(attention.relative_values.shape)
    ((7, 4), (7, 4))
    """

    def __init__(
        self, num_heads, max_relative_position, relative_initializer="glorot_uniform", **kwargs
    ):
        super().__init__(num_heads, **kwargs)
        self.max_relative_position = _utils.check_positive_int(
            "max_relative_position", max_relative_position
        )
        self.relative_initializer = keras.initializers.get(relative_initializer)

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        rows = 2 * self.max_relative_position + 1
        self.relative_keys = self.add_weight(
            name="relative_keys",
            shape=(rows, self._key_depth),
            initializer=_utils.clone_initializer(self.relative_initializer),
        )
        self.relative_values = self.add_weight(
            name="relative_values",
            shape=(rows, self._value_depth),
            initializer=_utils.clone_initializer(self.relative_initializer),
        )

    def _attention_mask(self, query, value, query_mask, value_mask, attention_mask, causal):
        mask = super()._attention_mask(query, value, query_mask, value_mask, attention_mask, causal)
        query_positions = ops.arange(ops.shape(query)[1], dtype="int32")  # [T]
        key_positions = ops.arange(ops.shape(value)[1], dtype="int32")  # [S]
        return RelativeMask(mask, query_positions, key_positions)

    def _incremental_mask(self, mask, query_positions, key_positions):
        return RelativeMask(mask, query_positions, key_positions)

    def _compute_attention(
        self, q, k, v, mask=None, training=None, return_scores=False, heads_first=False
    ):
        if not isinstance(mask, RelativeMask):
            raise ValueError(
                f"RelativeMultiHeadAttention '{self.name}' needs the positions of its queries "
                "and keys: call it on a query and value, or with an incremental cache "
                "(`cache_index`), not with a precomputed cache."
            )
        rows = relative_positions(
            mask.query_positions, mask.key_positions, self.max_relative_position
        )  # [T, S]
        a_k = ops.take(ops.cast(self.relative_keys, q.dtype), rows, axis=0)  # [T, S, dk]
        a_v = ops.take(ops.cast(self.relative_values, v.dtype), rows, axis=0)  # [T, S, dv]
        kv = key_value_subscripts(heads_first)
        logits = ops.einsum(f"bthd,{kv}->bhts", q, k) + ops.einsum(
            "bthd,tsd->bhts", q, a_k
        )  # [B, H, T, S]
        boolean = None if mask.mask is None else ops.expand_dims(mask.mask, 1)  # [B|1, 1, T, S]
        # Softmax in float32 even under mixed precision.
        weights = _utils.masked_softmax(logits, boolean)  # [B, H, T, S], float32
        dropped = self.dropout_layer(ops.cast(weights, v.dtype), training=training)
        output = ops.einsum(f"bhts,{kv}->bthd", dropped, v) + ops.einsum(
            "bhts,tsd->bthd", dropped, a_v
        )  # [B, T, H, dv]
        return output, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_relative_position": self.max_relative_position,
                "relative_initializer": keras.initializers.serialize(self.relative_initializer),
            }
        )
        return config
