"""One Transformer layer: self-attention, optional cross-attention, and the FFN.

Each sub-layer f is wrapped t2t style (`layer_preprocess` / `layer_postprocess`):

- Pre-LN (`norm_first=True`, t2t v2+/`transformer_base`): `x + dropout(f(LN(x)))`.
  The stack that uses these blocks must end with its own LayerNorm (the model
  builder adds it), as t2t does.
- Post-LN (`norm_first=False`, the paper / `transformer_base_v1`): `LN(x + dropout(f(x)))`.

LayerNorm epsilon is 1e-6 as in t2t by default (`epsilon`; Marian / Hugging Face use 1e-5).
A Post-LN stack needs no final LayerNorm (each block ends with one); Hugging Face's
Marian models are Post-LN stacks without one.
"""

import keras

from tfblocks.layers import _utils
from tfblocks.layers.attention import MultiHeadAttention
from tfblocks.layers.dropout import HashDropout
from tfblocks.layers.feed_forward import DenseReluDense
from tfblocks.layers.local_attention import NON_CAUSAL_WINDOWS, LocalMultiHeadAttention
from tfblocks.layers.relative_attention import RelativeMultiHeadAttention


@keras.saving.register_keras_serializable(package="tfblocks")
class TransformerBlock(keras.layers.Layer):
    """A Pre-LN or Post-LN Transformer encoder or decoder layer.

    Args:
        num_heads: attention heads.
        filter_size: inner size of the feed-forward network.
        key_dim: per-head depth; defaults to `hidden_size // num_heads`.
        dropout: residual dropout (t2t `layer_prepostprocess_dropout`).
        attention_dropout: dropout on attention weights.
        relu_dropout: dropout inside the FFN.
        norm_first: Pre-LN when True, Post-LN when False.
        causal: self-attention sees only earlier positions (decoder).
        cross_attention: add attention over a `context` (encoder output). After
            construction the attribute `cross_attention` holds that sublayer (or
            None), so its truth value is still this flag.
        activation: FFN activation, `"relu"`, `"gelu"` or `"swish"` / `"silu"`.
        use_bias: biases on the q, k, v and output projections of the attention
            sublayers (t2t: none; Marian: all four).
        ffn_use_bias: biases on the two FFN layers (t2t and Marian: yes).
        epsilon: LayerNorm epsilon.
        kernel_initializer: initializer of every kernel.
        attention_window: restricted (local) self-attention over blocks of this many
            positions (a `LocalMultiHeadAttention`); cross-attention stays full.
        max_relative_position: relative position self-attention
            (`RelativeMultiHeadAttention`, Shaw et al. 2018) telling distances up to this
            apart; None = plain dot-product. Not with `attention_window`.
        non_causal_window: the local window of a non-causal block, `"centered"` or
            `"t2t"` (see `LocalMultiHeadAttention`); unused without `attention_window`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        x: `[B, T, d]`.
        context: `[B, S, d_ctx]`; required when `cross_attention=True`.
        padding_mask: boolean `[B, T]`; defaults to the Keras mask of `x`.
        context_padding_mask: boolean `[B, S]`; defaults to the Keras mask of `context`.
        attention_mask: optional boolean `[B, T, T]` (True = may attend), ANDed with the
            padding and causal masks of the self-attention; e.g. `segment_mask` of packed
            rows, so that each pair attends only to itself.
        context_attention_mask: optional boolean `[B, T, S]` for the cross-attention.
        cache: decoding caches from `init_cache`; the call then returns
            `(output, new_cache)` for the positions `cache_index, cache_index + 1, ...`.
        cache_index: position of the first row of `x` in the decoded sequence.
        training: enables dropout.
        return_attention_scores: also return a dict with the `[B, H, T, S]` weights
            of `"self_attention"` (and `"cross_attention"`), without a cache.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=4, filter_size=64)
    >>> x = np.random.rand(2, 6, 16).astype("float32")
    >>> tuple(block(x, padding_mask=np.array([[1] * 6, [1] * 4 + [0] * 2], bool)).shape)
    (2, 6, 16)
    >>> decoder = TransformerBlock(4, 64, causal=True, cross_attention=True)
    >>> tuple(decoder(x[:, :3], context=x).shape)
    (2, 3, 16)
    """

    def __init__(
        self,
        num_heads,
        filter_size,
        key_dim=None,
        dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
        norm_first=True,
        causal=False,
        cross_attention=False,
        activation="relu",
        use_bias=False,
        ffn_use_bias=True,
        epsilon=1e-6,
        kernel_initializer="glorot_uniform",
        attention_window=None,
        non_causal_window="centered",
        max_relative_position=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _utils.check_positive_int("num_heads", num_heads)
        self.filter_size = _utils.check_positive_int("filter_size", filter_size)
        self.key_dim = _utils.check_optional_positive_int("key_dim", key_dim)
        self.dropout = _utils.check_rate("dropout", dropout)
        self.attention_dropout = _utils.check_rate("attention_dropout", attention_dropout)
        self.relu_dropout = _utils.check_rate("relu_dropout", relu_dropout)
        self.norm_first = bool(norm_first)
        self.causal = bool(causal)
        self.activation = activation
        self.use_bias = bool(use_bias)
        self.ffn_use_bias = _utils.check_bool("ffn_use_bias", ffn_use_bias)
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(f"`epsilon` must be a positive float, got epsilon={epsilon!r}.")
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attention_window = _utils.check_optional_positive_int(
            "attention_window", attention_window
        )
        self.non_causal_window = _utils.check_choice(
            "non_causal_window", non_causal_window, NON_CAUSAL_WINDOWS
        )
        self.max_relative_position = _utils.check_optional_positive_int(
            "max_relative_position", max_relative_position
        )
        if self.max_relative_position is not None and self.attention_window is not None:
            raise ValueError(
                "Relative position attention and local attention do not combine, got "
                f"max_relative_position={max_relative_position}, "
                f"attention_window={attention_window}."
            )
        self.supports_masking = True

        def attention(name, window=None, relative=None):
            common = {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.attention_dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": _utils.clone_initializer(self.kernel_initializer),
                "dtype": self.dtype_policy,
                "name": name,
            }
            if relative is not None:
                return RelativeMultiHeadAttention(max_relative_position=relative, **common)
            if window is None:
                return MultiHeadAttention(**common)
            return LocalMultiHeadAttention(
                window=window, non_causal_window=self.non_causal_window, **common
            )

        def norm(name):
            return keras.layers.LayerNormalization(
                epsilon=self.epsilon, dtype=self.dtype_policy, name=name
            )

        self.self_attention = attention(
            "self_attention", self.attention_window, self.max_relative_position
        )
        self.self_attention_norm = norm("self_attention_norm")
        # `cross_attention` is the sublayer itself when enabled and None otherwise,
        # so `bool(block.cross_attention)` is the constructor flag.
        self.cross_attention = attention("cross_attention") if cross_attention else None
        self.cross_attention_norm = norm("cross_attention_norm") if cross_attention else None
        self.ffn = DenseReluDense(
            self.filter_size,
            activation=activation,
            dropout=self.relu_dropout,
            use_bias=self.ffn_use_bias,
            kernel_initializer=_utils.clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="ffn",
        )
        self.ffn_norm = norm("ffn_norm")
        self.residual_dropout = HashDropout(
            self.dropout, dtype=self.dtype_policy, name="residual_dropout"
        )

    def build(self, x_shape, context_shape=None):
        hidden = x_shape[-1]
        self._input_dims = {
            "x": hidden,
            "context": None if context_shape is None else context_shape[-1],
        }
        if self.key_dim is None and hidden % self.num_heads != 0:
            raise ValueError(
                f"The hidden size ({hidden}) must be divisible by `num_heads`, got "
                f"num_heads={self.num_heads} (or pass `key_dim`)."
            )
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm.build(x_shape)
        if self.cross_attention is not None and context_shape is not None:
            self.cross_attention.build(x_shape, context_shape)
            self.cross_attention_norm.build(x_shape)
        self.ffn.build(x_shape)
        self.ffn_norm.build(x_shape)
        self.residual_dropout.build(None)

    def _sublayer(self, x, norm, fn, training):
        """Applies `fn` with the Pre-LN or Post-LN residual wrapping."""
        if self.norm_first:
            return x + self.residual_dropout(fn(norm(x)), training=training)
        return norm(x + self.residual_dropout(fn(x), training=training))

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_padding_mask=None,
        attention_mask=None,
        context_attention_mask=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention_scores=False,
    ):
        if cache is not None:
            if attention_mask is not None or context_attention_mask is not None:
                raise ValueError(
                    "`attention_mask` and `context_attention_mask` are not supported with a "
                    "`cache` (decoding runs one sequence per row)."
                )
            return self._call_cached(x, context, context_padding_mask, cache, cache_index, training)
        scores = {}
        if self.cross_attention is not None and context is None:
            raise ValueError(
                f"TransformerBlock '{self.name}' has cross_attention=True and must be "
                "called with `context` (the encoder output), got context=None."
            )
        if self.cross_attention is None and context is not None:
            raise ValueError(
                f"TransformerBlock '{self.name}' has cross_attention=False but was given "
                f"a `context` of shape {tuple(context.shape)}; build it with "
                "cross_attention=True to attend over a context."
            )
        self._check_inputs(x, context)
        if padding_mask is None:
            padding_mask = _utils.implicit_mask(x)
        else:
            _utils.check_mask_shape("padding_mask", padding_mask, tuple(x.shape[:2]))
        if context_padding_mask is None:
            context_padding_mask = _utils.implicit_mask(context)
        elif context is not None:
            _utils.check_mask_shape(
                "context_padding_mask", context_padding_mask, tuple(context.shape[:2])
            )

        def self_attention(h):
            out = self.self_attention(
                h,
                h,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                use_causal_mask=self.causal,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                out, scores["self_attention"] = out
            return out

        x = self._sublayer(x, self.self_attention_norm, self_attention, training)
        if self.cross_attention is not None:

            def cross_attention(h):
                out = self.cross_attention(
                    h,
                    context,
                    query_mask=padding_mask,
                    value_mask=context_padding_mask,
                    attention_mask=context_attention_mask,
                    training=training,
                    return_attention_scores=return_attention_scores,
                )
                if return_attention_scores:
                    out, scores["cross_attention"] = out
                return out

            x = self._sublayer(x, self.cross_attention_norm, cross_attention, training)
        x = self._sublayer(x, self.ffn_norm, lambda h: self.ffn(h, training=training), training)
        return (x, scores) if return_attention_scores else x

    def _check_inputs(self, x, context):
        layout = ("batch", "length", "dim")
        _utils.check_rank("x", x, layout)
        if context is not None:
            _utils.check_rank("context", context, layout)
            _utils.check_same_dim(0, "batch size", {"x": x, "context": context})
        for name, t in (("x", x), ("context", context)):
            if t is not None:
                _utils.check_last_dim(name, t, self._input_dims[name])

    def _call_cached(self, x, context, context_padding_mask, cache, cache_index, training):
        """One incremental decoding step over the caches made by `init_cache`."""
        if cache_index is None:
            raise ValueError("`cache_index` is required with a `cache`, got cache_index=None.")
        self._check_inputs(x, context)
        new_cache = {}

        def self_attention(h):
            out, new_cache["self"] = self.self_attention(
                h, cache=cache["self"], cache_index=cache_index, training=training
            )
            return out

        x = self._sublayer(x, self.self_attention_norm, self_attention, training)
        if self.cross_attention is not None:
            if "cross" not in cache:
                cache = {**cache, "cross": self.cross_attention.compute_cache(context)}
            new_cache["cross"] = cache["cross"]

            def cross_attention(h):
                out, _ = self.cross_attention(
                    h, cache=cache["cross"], value_mask=context_padding_mask, training=training
                )
                return out

            x = self._sublayer(x, self.cross_attention_norm, cross_attention, training)
        x = self._sublayer(x, self.ffn_norm, lambda h: self.ffn(h, training=training), training)
        return x, new_cache

    def init_cache(self, batch_size, max_length, context=None):
        """Caches for incremental decoding (t2t `fast_decode`).

        Args:
            batch_size: decoding batch size (× beam size for beam search).
            max_length: the most positions that will be decoded.
            context: the encoder output; its cross-attention k/v are computed once here.

        Returns:
            `{"self": {"key", "value"}}` preallocated to `max_length` (plus `"cross"`
            for a cross-attention block given `context`). Pass it with `cache_index=i`
            to `block(x_i, cache=cache, cache_index=i, context_padding_mask=...)`,
            which returns `(output, new_cache)`.
        """
        if not self.built:
            raise ValueError(
                f"TransformerBlock '{self.name}' must be built (called once) before init_cache()."
            )
        cache = {"self": self.self_attention.init_cache(batch_size, max_length)}
        if self.cross_attention is not None:
            if context is None:
                raise ValueError(
                    f"TransformerBlock '{self.name}' has cross-attention: init_cache() needs "
                    "the encoder output as `context`, got context=None."
                )
            cache["cross"] = self.cross_attention.compute_cache(context)
        return cache

    def compute_output_shape(self, x_shape, context_shape=None):
        return tuple(x_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "filter_size": self.filter_size,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "relu_dropout": self.relu_dropout,
                "norm_first": self.norm_first,
                "causal": self.causal,
                "cross_attention": self.cross_attention is not None,
                "activation": self.activation,
                "use_bias": self.use_bias,
                "ffn_use_bias": self.ffn_use_bias,
                "epsilon": self.epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "attention_window": self.attention_window,
                "non_causal_window": self.non_causal_window,
                "max_relative_position": self.max_relative_position,
            }
        )
        return config
