"""Multi-head attention with t2t semantics (`common_attention.multihead_attention`).

Each of q, k, v and the output transform is a `keras.layers.Dense` on the last axis
(kernel `(in_dim, num_heads * depth)`, no bias by default, as t2t `compute_qkv`), so
the same matrix is applied at every position. Departures from t2t: the mask is a
boolean "may attend" tensor (t2t passes an additive bias), and a fully masked row
yields a uniform average of the values instead of depending on a literal -1e9.

Speed: when q, k and v are projected from one tensor (self-attention) the three
kernels are concatenated at call time and applied as one matrix product
`x · [W_q | W_k | W_v]` (k and v alike for cross-attention); the variables stay the
three `Dense` kernels, so parameters and checkpoints are unchanged. One wider matmul
keeps the CPU/GPU busier than three narrow ones, and its backward pass is one
`dx` product instead of three plus a sum (docs/performance.md, "Measured design choices").

Extension points (subclasses override these, nothing else branches): `_attention_mask`
builds whatever mask `_compute_attention` consumes, `_compute_attention` is the one
place q, k and v meet, and `_cache_mask` says which cache slots a decoded position may
see (`_incremental_mask` hands positions on in incremental decoding).
`LocalMultiHeadAttention` (local_attention.py) overrides the first three,
`RelativeMultiHeadAttention` (relative_attention.py) the first two and the last.

Caches hold k and v heads first, `[B, H, S, d]`: the layout the two attention
products want (batch dimensions b, h leading). Stored as `[B, S, H, d]`, each
decoding step would copy every cache into that layout before its products, which
costs more than the products themselves at beam-search batch sizes
(docs/performance.md, "Measured design choices").
"""

import keras
import numpy as np
from keras import ops

from tfblocks.layers import _utils
from tfblocks.layers.dropout import HashDropout


def key_value_subscripts(heads_first):
    """The einsum subscripts of k and v: `"bhsd"` (a cache's layout) or `"bshd"`."""
    return "bhsd" if heads_first else "bshd"


@keras.saving.register_keras_serializable(package="tfblocks")
class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over `num_heads` heads, t2t style.

    `softmax(q kᵀ / √key_dim) v` per head, heads concatenated and projected by the
    output matrix W_O. q is scaled by `key_dim ** -0.5` right after its projection
    (the only place it is scaled); the softmax always runs in float32 (also under
    mixed precision).

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
        cache: a K/V cache from `init_cache` (with `cache_index`: incremental
            self-attention) or `compute_cache` (without: attention over fixed k/v);
            `{"key": [B, H, S, dk], "value": [B, H, S, dv]}`.
            With a cache the call returns `(output, cache)`, or
            `(output, scores, cache)` with `return_attention_scores=True`.
        cache_index: position of the first query in the sequence being decoded.

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
        self.dropout_layer = HashDropout(
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

    def build(self, query_shape, value_shape=None, key_shape=None):
        if value_shape is None:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' must be built (called once with a "
                "`value`) before it is called with a `cache`; got value=None."
            )
        key_shape = value_shape if key_shape is None else key_shape
        in_dim = query_shape[-1]
        if self.key_dim is None and in_dim % self.num_heads != 0:
            raise ValueError(
                f"The query's last dimension ({in_dim}) must be divisible by "
                f"`num_heads`, got num_heads={self.num_heads} (or pass `key_dim`)."
            )
        self._input_dims = {"query": in_dim, "value": value_shape[-1], "key": key_shape[-1]}
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
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, depth))  # [B, L, H, depth]

    def _heads_first(self, x, depth):
        """`[B, L, H·depth]` -> `[B, H, L, depth]`: the layout of a cache."""
        return ops.transpose(self._split_heads(x, depth), (0, 2, 1, 3))

    def _scale_query(self, q):
        """q `[B, T, H, dk]` times `dk ** -0.5`: the one place q is scaled."""
        return q * ops.cast(self._key_depth**-0.5, q.dtype)

    def _project_query(self, query):
        """`[B, T, dim]` -> scaled q `[B, T, H, dk]`."""
        return self._scale_query(self._split_heads(self.query_dense(query), self._key_depth))

    def _can_fuse(self, denses):
        """Whether `denses` are plain `Dense` layers whose kernels can be concatenated."""
        return all(
            type(d) is keras.layers.Dense
            and d.quantization_mode is None
            and not getattr(d, "lora_enabled", False)
            for d in denses
        )

    def _project(self, x, denses):
        """`[x · W for W in denses]` (plus biases), as one matmul when the layers allow.

        The kernels `[in, units_i]` are concatenated at call time into
        `[in, Σ units_i]`; the result is split back on the last axis. Same parameters,
        same values (up to float summation order) as calling each `Dense`.
        """
        if len(denses) == 1 or not self._can_fuse(denses):
            return [dense(x) for dense in denses]
        kernel = ops.concatenate([ops.cast(d.kernel, x.dtype) for d in denses], axis=-1)
        y = ops.matmul(x, kernel)  # [B, L, in] · [in, Σ units] -> [B, L, Σ units]
        if self.use_bias:
            bias = ops.concatenate([ops.cast(d.bias, x.dtype) for d in denses], axis=-1)
            y = y + bias  # [B, L, Σ units]
        ends = np.cumsum([d.units for d in denses])[:-1].tolist()
        return ops.split(y, ends, axis=-1)  # each [B, L, units_i]

    def _combine_heads(self, x):
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], -1))  # [B, T, H, dv] -> [B, T, H*dv]
        return self.output_dense(x)

    def _check_inputs(self, query, value, key):
        layout = ("batch", "length", "dim")
        _utils.check_rank("query", query, layout)
        _utils.check_rank("value", value, layout)
        if key is not None:
            _utils.check_rank("key", key, layout)
            _utils.check_same_dim(1, "length", {"value": value, "key": key})
        _utils.check_same_dim(0, "batch size", {"query": query, "value": value, "key": key})
        for name, x in (("query", query), ("value", value), ("key", key)):
            if x is not None:
                _utils.check_last_dim(name, x, self._input_dims[name])

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_index=None,
    ):
        if cache is not None:
            return self._call_cached(
                query,
                value,
                cache,
                cache_index,
                value_mask,
                attention_mask,
                return_attention_scores,
                training,
            )
        if value is None:
            raise ValueError("`value` is required unless a `cache` is given, got value=None.")
        self._check_inputs(query, value, key)
        if key is None:
            key = value
            key_mask = None  # the key is the value: its mask is `value_mask`.
        if key_mask is not None:
            value_mask = key_mask if value_mask is None else ops.logical_and(value_mask, key_mask)
        mask = self._attention_mask(
            query, value, query_mask, value_mask, attention_mask, use_causal_mask
        )
        if query is value and key is value:  # self-attention: one fused projection
            q, k, v = self._project(query, [self.query_dense, self.key_dense, self.value_dense])
        else:
            (q,) = self._project(query, [self.query_dense])
            k, v = self._project_key_value(key, value)
        q = self._scale_query(self._split_heads(q, self._key_depth))  # [B, T, H, dk]
        k = self._split_heads(k, self._key_depth)  # [B, S, H, dk]
        v = self._split_heads(v, self._value_depth)  # [B, S, H, dv]
        output, scores = self._compute_attention(
            q, k, v, mask, training=training, return_scores=return_attention_scores
        )  # [B, T, H, dv]
        output = self._combine_heads(output)  # [B, T, out]
        if return_attention_scores:
            return output, scores
        return output

    def _project_key_value(self, key, value):
        """Unsplit k `[B, S, H·dk]` and v `[B, S, H·dv]` (one matmul when key is value)."""
        if key is value:
            return self._project(value, [self.key_dense, self.value_dense])
        return self.key_dense(key), self.value_dense(value)

    def _attention_mask(self, query, value, query_mask, value_mask, attention_mask, causal):
        """The mask `_compute_attention` consumes: boolean `[B|1, T, S]` or None."""
        return _utils.merge_attention_masks(
            query,
            value,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=causal,
        )

    def _compute_attention(
        self, q, k, v, mask=None, training=None, return_scores=False, heads_first=False
    ):
        """Scaled dot-product attention on split heads: the one place q, k, v meet.

        Args:
            q: `[B, T, H, dk]` queries, already scaled by `dk ** -0.5`.
            k: `[B, S, H, dk]` keys (`[B, H, S, dk]` with `heads_first`: a cache).
            v: `[B, S, H, dv]` values (`[B, H, S, dv]` with `heads_first`).
            mask: what `_attention_mask` returned (here boolean `[B|1, T, S]` or None).
            training: enables dropout on the weights.
            return_scores: whether the caller uses the weights.
            heads_first: the layout of k and v.

        Returns:
            `(output [B, T, H, dv], weights [B, H, T, S] float32)`.
        """
        kv = key_value_subscripts(heads_first)
        if mask is not None:
            mask = ops.expand_dims(mask, 1)  # [B|1, 1, T, S]
        logits = ops.einsum(f"bthd,{kv}->bhts", q, k)  # [B, H, T, S]
        # Softmax in float32 even under mixed precision: float16 logits overflow.
        weights = _utils.masked_softmax(logits, mask)  # [B, H, T, S], float32
        dropped = self.dropout_layer(ops.cast(weights, v.dtype), training=training)
        output = ops.einsum(f"bhts,{kv}->bthd", dropped, v)  # [B, T, H, dv]
        return output, weights

    def _cache_mask(self, rows, cols):
        """Which cache slots each decoded position sees: `[T, 1]`, `[1, S]` -> `[T, S]`."""
        return cols <= rows

    def _incremental_mask(self, mask, query_positions, key_positions):
        """What `_compute_attention` gets in incremental decoding: here the boolean
        `[1, T, S_max]` mask; subclasses may add the positions `[T]` and `[S_max]`."""
        return mask

    def _call_cached(
        self, query, value, cache, cache_index, value_mask, attention_mask, return_scores, training
    ):
        """Attention over a K/V cache (t2t `fast_decode`); see `init_cache`/`compute_cache`."""
        if not self.built:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' must be built (called once) before it "
                "is called with a `cache`."
            )
        if not isinstance(cache, dict) or set(cache) != {"key", "value"}:
            got = sorted(cache) if isinstance(cache, dict) else type(cache).__name__
            raise ValueError(
                f"`cache` must be a dict with the entries 'key' and 'value', got cache={got}."
            )
        _utils.check_rank("query", query, ("batch", "length", "dim"))
        _utils.check_last_dim("query", query, self._input_dims["query"])
        layout = ("batch", "heads", "max_length", "depth")
        _utils.check_rank("cache['key']", cache["key"], layout)
        _utils.check_rank("cache['value']", cache["value"], layout)
        _utils.check_same_dim(0, "batch size", {"query": query, "cache['key']": cache["key"]})
        q = self._project_query(query)  # [B, T, H, dk], scaled
        k, v = cache["key"], cache["value"]  # [B, H, S_max, dk], [B, H, S_max, dv]
        if cache_index is None:
            # A static cache (cross-attention over a fixed encoder output).
            mask = _utils.merge_attention_masks(  # k[:, 0]: [B, S, dk], only its shape is used
                query, k[:, 0], value_mask=value_mask, attention_mask=attention_mask
            )
        else:
            # Incremental self-attention: write the new positions' k/v at cache_index,
            # then let query t (absolute position cache_index + t) see `_cache_mask`.
            source = query if value is None else value
            index = ops.cast(cache_index, "int32")
            start = (0, 0, index, 0)
            k_new, v_new = self._project_key_value(source, source)
            k_new = self._heads_first(k_new, self._key_depth)  # [B, H, T, dk]
            v_new = self._heads_first(v_new, self._value_depth)  # [B, H, T, dv]
            k = ops.slice_update(k, start, ops.cast(k_new, k.dtype))  # [B, H, S_max, dk]
            v = ops.slice_update(v, start, ops.cast(v_new, v.dtype))  # [B, H, S_max, dv]
            rows = index + ops.expand_dims(ops.arange(ops.shape(query)[1], dtype="int32"), 1)
            cols = ops.expand_dims(ops.arange(ops.shape(k)[2], dtype="int32"), 0)
            mask = ops.expand_dims(self._cache_mask(rows, cols), 0)  # [1, T, S_max]
            if attention_mask is not None:
                mask = ops.logical_and(mask, ops.cast(attention_mask, "bool"))
            mask = self._incremental_mask(mask, rows[:, 0], cols[0])
            cache = {"key": k, "value": v}
        output, weights = self._compute_attention(
            q, k, v, mask, training=training, return_scores=return_scores, heads_first=True
        )  # [B, T, H, dv]
        output = self._combine_heads(output)
        if return_scores:
            return output, weights, cache
        return output, cache

    def init_cache(self, batch_size, max_length):
        """An empty self-attention cache: zeros `[batch_size, H, max_length, depth]`.

        Used with `call(x, cache=cache, cache_index=i)`, which writes the k/v of the new
        positions at `i` and returns `(output, updated_cache)`. The shapes never change,
        so a decoding loop over it compiles with XLA.
        """
        dtype = self.compute_dtype
        return {
            "key": ops.zeros((batch_size, self.num_heads, max_length, self._key_depth), dtype),
            "value": ops.zeros((batch_size, self.num_heads, max_length, self._value_depth), dtype),
        }

    def compute_cache(self, value, key=None):
        """The projected k/v of a fixed `value` (e.g. the encoder output), computed once.

        Used with `call(query, cache=cache, value_mask=...)` (no `cache_index`), which
        returns `(output, cache)`.
        """
        k, v = self._project_key_value(value if key is None else key, value)
        return {
            "key": self._heads_first(k, self._key_depth),  # [B, H, S, dk]
            "value": self._heads_first(v, self._value_depth),  # [B, H, S, dv]
        }

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
