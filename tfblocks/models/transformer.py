"""`Transformer`: the one model class that owns the t2t forward pass.

A `keras_hub.models.Backbone` (a functional `keras.Model` subclass): the constructor
creates the sublayers as attributes, traces its own `encode` / `decode` / `logits`
methods on `keras.Input`s to build the functional graph, and `get_config` returns the
constructor arguments, so a `.keras` file rebuilds it. Training calls the model
(`model.fit`); decoding, export, the attention-map example and the cost model call
the same three methods, so the forward pass is written once:

- `encode(source_ids)` → encoder output `[B, S, d]`;
- `decode(decoder_ids, encoder_output, source_mask, cache=None, index=None)` →
  decoder hidden states `[B, T, d]` (and the updated cache when decoding
  incrementally);
- `logits(hidden)` → float32 logits `[B, T, vocab]` (tied softmax `h · Eᵀ`, or its
  own matrix).

Two shapes of model (t2t's `has_input`):

- encoder–decoder (`num_encoder_layers > 0`, `build_transformer`): inputs
  `{"inputs": [B, S], "targets": [B, T]}` int32 (0 = padding);
- decoder-only language model (`num_encoder_layers == 0`, `build_language_model`):
  input `[B, T]` int32 ids, output the logits of the *next* token at every position.

Packed rows (t2t `pack_examples`; `make_dataset(shapes="packed")`): the encoder–decoder
also takes a dict with the features `inputs_segmentation`, `inputs_position`,
`targets_segmentation`, `targets_position` (segment 1, 2, … per pair in a row, 0 =
padding; positions restart at 0 per pair), the language model a dict `{"ids",
"ids_segmentation", "ids_position"}`. Calling the model with them runs the same
`encode` / `decode` / `logits` with one attention mask per batch from the segment ids
(`tfblocks.layers.segment_mask`): self-attention stays within a pair (causal in the
decoder), cross-attention sees only the same pair's source, the timing signal is taken at
each token's position within its pair, and the shifted decoder input restarts with
`BOS_ID` at each pair (`shift_right(..., segment_ids, positions)`), so every pair gets the
logits it would get alone in a row. Departure from t2t: t2t shifts the packed row as a
whole, so a pair's first decoder input is the previous pair's EOS.

Teacher forcing happens inside the model: the decoder reads the targets shifted
right by one position, starting with `BOS_ID`. Departure from t2t: t2t shifts the
*embedded* targets, so its first decoder input is a zero vector; here the shifted ids
start with `BOS_ID`, so the padding mask stays `ids != PAD_ID` and decoding starts
from `<s>` as the study notes describe.

Layout (t2t `transformer.body`): `SinusoidalEmbedding` (× √d + timing signal +
dropout) → `TransformerBlock`s (→ LayerNorm when Pre-LN) → causal decoder blocks with
cross-attention over the encoder output (→ LayerNorm when Pre-LN) → softmax.

Architectures of imported models (Marian / OPUS-MT) are options of the same layers, t2t's
values the defaults: the FFN activation (`ffn_activation="swish"`), biases on the attention
projections (`attention_use_bias`) and the FFN (`ffn_use_bias`), `norm_epsilon`, a bias
added to the float32 logits (`final_logits_bias`), the timing signal's `timescale_rule`
and a stored position table (`max_positions`), `scale_embedding`, the decoder's first
input (`decoder_start`: `BOS_ID`'s embedding, or t2t's zero vector), and a separate source
vocabulary (`source_vocab_size`) with a tied or untied softmax. Post-LN stacks
(`norm_first=False`) end without a LayerNorm, as Hugging Face's Marian models do.
"""

import keras
import keras_hub
from keras import ops

from tfblocks import _checks
from tfblocks.ids import (
    BOS_ID,
    PACKED_LM_FEATURES,
    PACKED_SOURCE_FEATURES,
    PACKED_TARGET_FEATURES,
    PAD_ID,
)
from tfblocks.layers import SinusoidalEmbedding, TransformerBlock, segment_mask
from tfblocks.layers.embedding import TIMESCALE_RULES
from tfblocks.layers.feed_forward import ACTIVATIONS

LAYER_NORM_EPSILON = 1e-6
DECODER_STARTS = ("bos", "zeros")


@keras.saving.register_keras_serializable(package="tfblocks")
class _TiedEmbedding(SinusoidalEmbedding):
    """A `SinusoidalEmbedding` that also computes the tied logits in the graph.

    `layer(ids)` embeds; `layer(h, reverse=True)` returns `h · Eᵀ`. Calling one
    layer object both ways keeps the weight shared in a functional model and
    through `.keras` serialization.
    """

    def call(self, x, start_index=0, positions=None, zeroed_id=None, reverse=False, training=None):
        if reverse:
            return self.attend(x)  # [B, T, vocab]
        return super().call(
            x, start_index=start_index, positions=positions, zeroed_id=zeroed_id, training=training
        )

    def compute_mask(self, x, previous_mask=None):
        # The logits carry no mask: padding is excluded by the loss and metrics.
        if "float" in keras.backend.standardize_dtype(x.dtype):
            return None
        return super().compute_mask(x, previous_mask)

    def compute_output_spec(
        self, x, start_index=0, positions=None, zeroed_id=None, reverse=False, training=None
    ):
        last = self.vocab_size if reverse else self.hidden_size
        shape = tuple(x.shape[:-1]) if reverse else tuple(x.shape)
        return keras.KerasTensor((*shape, last), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="tfblocks")
class _LogitsBias(keras.layers.Layer):
    """Adds a bias `[vocab]` to float32 logits `[..., vocab]` (Marian's `final_logits_bias`,
    added after the tied or untied projection)."""

    def __init__(self, vocab_size, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
        self.supports_masking = True  # what reaches it passes on, as without the bias

    def build(self, logits_shape=None):
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros")

    def call(self, logits):
        return logits + ops.cast(self.bias, logits.dtype)  # [..., vocab]

    def compute_output_shape(self, logits_shape):
        return tuple(logits_shape)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size}


def padding_mask(ids):
    """Boolean `[B, L]` mask, True where `ids != PAD_ID`."""
    return ops.not_equal(ids, PAD_ID)


def shift_right(ids, start_id=BOS_ID, segment_ids=None, positions=None):
    """Teacher forcing: `[y0, y1, …, y_{T-1}]` → `[start_id, y0, …, y_{T-2}]`.

    For packed rows give the `segment_ids` and `positions` of `ids`: each pair then starts
    with `start_id` (where its position is 0) and padding (segment 0) stays `PAD_ID`.

    Example:

    >>> import numpy as np
    >>> ids = np.array([[7, 1, 8, 9, 1, 0]])
    >>> shift_right(ids).numpy().tolist()
    [[3, 7, 1, 8, 9, 1]]
    >>> shift_right(ids, segment_ids=np.array([[1, 1, 2, 2, 2, 0]]),
    ...             positions=np.array([[0, 1, 0, 1, 2, 0]])).numpy().tolist()
    [[3, 7, 3, 8, 9, 0]]
    """
    ids = ops.cast(ids, "int32")
    start = ops.full_like(ids[:, :1], start_id)  # [B, 1]
    shifted = ops.concatenate([start, ids[:, :-1]], axis=1)  # [B, T]
    if segment_ids is None and positions is None:
        return shifted
    if segment_ids is None or positions is None:
        raise ValueError(
            "`segment_ids` and `positions` go together (packed rows), got only "
            f"{'segment_ids' if positions is None else 'positions'}."
        )
    shifted = ops.where(ops.equal(positions, 0), ops.cast(start_id, "int32"), shifted)
    return ops.where(ops.equal(segment_ids, 0), ops.cast(PAD_ID, "int32"), shifted)


@keras.saving.register_keras_serializable(package="tfblocks")
class Transformer(keras_hub.models.Backbone):
    """The t2t Transformer: encoder–decoder, or decoder-only with `num_encoder_layers=0`.

    Build it from an `HParams` with `build_transformer(hp)` /
    `build_language_model(hp)`; the constructor takes the architecture explicitly.

    Args:
        vocab_size: token ids `[0, vocab_size)` (of the target, and of the source unless
            `source_vocab_size` is given); 0 is padding.
        hidden_size: d_model.
        filter_size: inner size of the feed-forward networks.
        num_heads: attention heads.
        num_encoder_layers: encoder blocks; 0 makes a decoder-only language model.
        num_decoder_layers: decoder blocks (at least 1).
        dropout: residual and embedding dropout (t2t `layer_prepostprocess_dropout`).
        attention_dropout: dropout on the attention weights.
        relu_dropout: dropout inside the FFN.
        norm_first: Pre-LN (each stack ends with a LayerNorm) or Post-LN.
        shared_embedding_and_softmax_weights: one matrix for the source and target
            embeddings and the softmax; otherwise each has its own.
        max_relative_position: relative position self-attention in every block
            (`RelativeMultiHeadAttention`, t2t `dot_product_relative`) up to this
            distance; None = plain dot-product attention.
        add_timing_signal: add the sinusoidal timing signal to the embeddings (t2t
            `pos="timing"`; `transformer_relative` turns it off).
        ffn_activation: the FFN activation, `"relu"` (t2t), `"gelu"` or `"swish"` /
            `"silu"` (Marian).
        attention_use_bias: biases on the q, k, v and output projections (t2t: none;
            Marian: all).
        ffn_use_bias: biases on the two FFN layers (t2t and Marian: yes).
        norm_epsilon: every LayerNorm's epsilon (t2t 1e-6; Marian / Hugging Face 1e-5).
        scale_embedding: multiply the embeddings by √d (t2t
            `multiply_embedding_mode="sqrt_depth"`, Marian's `scale_embedding`).
        timescale_rule: the timing signal's spacing of timescales, `"t2t"` (over d/2 − 1
            steps, also Marian's C++ code) or `"half_depth"` (over d/2: Hugging Face's
            Marian models); see `tfblocks.layers.timing_signal`.
        max_positions: None computes the timing signal; an int reads it from a table
            weight of that many positions per embedding (`position_embeddings`,
            initialised with the signal; t2t `pos="emb"`, an imported model's table).
        decoder_start: the decoder's first input: `"bos"` (the embedding of `BOS_ID`, which
            the shifted targets start with) or `"zeros"` (t2t's zero vector; the id stays
            `BOS_ID`, its embedding is zeroed; the timing signal is still added).
        source_vocab_size: None: the source uses the target vocabulary (and, with
            `shared_embedding_and_softmax_weights`, the same matrix); an int: the source
            has its own vocabulary and embedding matrix of that size, and
            `shared_embedding_and_softmax_weights` ties only the target embedding and the
            softmax. Encoder–decoder only.
        final_logits_bias: add a trainable bias `[vocab_size]` (zeros at first) to the
            float32 logits, after the tied or untied projection (Marian).
        dtype: dtype policy of every sublayer (e.g. `"mixed_bfloat16"`); defaults to
            the global policy. The logits are float32 either way.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Being a KerasHub `Backbone`, it saves and loads in the KerasHub preset layout
    (`model.save_to_preset(dir)`, `Transformer.from_preset(dir)`; see
    `tfblocks.models.save_preset` for the model together with its tokenizer).

    Example:

    >>> import numpy as np
    >>> model = Transformer(vocab_size=40, hidden_size=16, filter_size=32, num_heads=2,
    ...                     num_encoder_layers=1, num_decoder_layers=1)
    >>> src = np.array([[5, 6, 7, 1, 0]], "int32")
    >>> tgt = np.array([[8, 9, 1, 0]], "int32")
    >>> tuple(model({"inputs": src, "targets": tgt}).shape)
    (1, 4, 40)
    >>> memory = model.encode(src)
    >>> hidden = model.decode(shift_right(tgt), memory, padding_mask(src))
    >>> tuple(model.logits(hidden).shape)
    (1, 4, 40)
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        filter_size,
        num_heads,
        num_encoder_layers,
        num_decoder_layers,
        dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
        norm_first=True,
        shared_embedding_and_softmax_weights=True,
        max_relative_position=None,
        add_timing_signal=True,
        ffn_activation="relu",
        attention_use_bias=False,
        ffn_use_bias=True,
        norm_epsilon=LAYER_NORM_EPSILON,
        scale_embedding=True,
        timescale_rule="t2t",
        max_positions=None,
        decoder_start="bos",
        source_vocab_size=None,
        final_logits_bias=False,
        dtype=None,
        **kwargs,
    ):
        # === Arguments ===
        vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
        hidden_size = _checks.check_positive_int("hidden_size", hidden_size)
        filter_size = _checks.check_positive_int("filter_size", filter_size)
        num_heads = _checks.check_positive_int("num_heads", num_heads)
        num_encoder_layers = _checks.check_non_negative_int(
            "num_encoder_layers", num_encoder_layers
        )
        num_decoder_layers = _checks.check_positive_int("num_decoder_layers", num_decoder_layers)
        dropout = _checks.check_rate("dropout", dropout)
        attention_dropout = _checks.check_rate("attention_dropout", attention_dropout)
        relu_dropout = _checks.check_rate("relu_dropout", relu_dropout)
        if hidden_size % num_heads:
            raise ValueError(
                "`hidden_size` must be divisible by `num_heads`, got "
                f"hidden_size={hidden_size}, num_heads={num_heads}."
            )
        max_relative_position = _checks.check_optional_positive_int(
            "max_relative_position", max_relative_position
        )
        has_input = num_encoder_layers > 0
        tied = bool(shared_embedding_and_softmax_weights)
        _checks.check_choice("ffn_activation", ffn_activation, ACTIVATIONS)
        for name, value in (
            ("attention_use_bias", attention_use_bias),
            ("ffn_use_bias", ffn_use_bias),
            ("scale_embedding", scale_embedding),
            ("final_logits_bias", final_logits_bias),
        ):
            _checks.check_bool(name, value)
        norm_epsilon = _checks.check_positive_float("norm_epsilon", norm_epsilon)
        _checks.check_choice("timescale_rule", timescale_rule, TIMESCALE_RULES)
        max_positions = _checks.check_optional_positive_int("max_positions", max_positions)
        _checks.check_choice("decoder_start", decoder_start, DECODER_STARTS)
        source_vocab_size = _checks.check_optional_positive_int(
            "source_vocab_size", source_vocab_size
        )
        if source_vocab_size is not None and not has_input:
            raise ValueError(
                "A decoder-only language model (num_encoder_layers=0) has no source "
                f"vocabulary, got source_vocab_size={source_vocab_size}."
            )
        separate_source = has_input and (not tied or source_vocab_size is not None)
        # The embedding call argument that makes the decoder's first input a zero vector.
        self._zeroed_start = BOS_ID if decoder_start == "zeros" else None

        # === Layers ===
        def embedding(cls, name, size=vocab_size):
            return cls(
                size,
                hidden_size,
                dropout=dropout,
                add_timing_signal=add_timing_signal,
                scale=scale_embedding,
                timescale_rule=timescale_rule,
                max_positions=max_positions,
                dtype=dtype,
                name=name,
            )

        def block(name, decoder):
            return TransformerBlock(
                num_heads=num_heads,
                filter_size=filter_size,
                dropout=dropout,
                attention_dropout=attention_dropout,
                relu_dropout=relu_dropout,
                norm_first=norm_first,
                causal=decoder,
                cross_attention=decoder and has_input,
                activation=ffn_activation,
                use_bias=attention_use_bias,
                ffn_use_bias=ffn_use_bias,
                epsilon=norm_epsilon,
                max_relative_position=max_relative_position,
                dtype=dtype,
                name=name,
            )

        def norm(name):
            if not norm_first:
                return None
            return keras.layers.LayerNormalization(epsilon=norm_epsilon, dtype=dtype, name=name)

        if tied:
            self.target_embedding = embedding(
                _TiedEmbedding, "target_embedding" if separate_source else "embedding"
            )
        else:
            self.target_embedding = embedding(SinusoidalEmbedding, "target_embedding")
        if separate_source:
            self.source_embedding = embedding(
                SinusoidalEmbedding, "source_embedding", source_vocab_size or vocab_size
            )
        else:
            self.source_embedding = self.target_embedding if has_input else None
        self.softmax = (
            None
            if tied
            else keras.layers.Dense(vocab_size, use_bias=False, dtype=dtype, name="softmax")
        )
        self.encoder_blocks = [
            block(f"encoder_layer_{i}", False) for i in range(num_encoder_layers)
        ]
        self.encoder_norm = norm("encoder_norm") if has_input else None
        self.decoder_blocks = [block(f"decoder_layer_{i}", True) for i in range(num_decoder_layers)]
        self.decoder_norm = norm("decoder_norm")
        self.logits_dtype = keras.layers.Activation("linear", dtype="float32", name="logits")
        self.logits_bias = (
            _LogitsBias(vocab_size, dtype="float32", name="final_logits_bias")
            if final_logits_bias
            else None
        )

        # === Functional model: the methods below, traced once on keras.Input ===
        if has_input:
            source_ids = keras.Input((None,), dtype="int32", name="inputs")
            target_ids = keras.Input((None,), dtype="int32", name="targets")
            inputs = {"inputs": source_ids, "targets": target_ids}
            encoder_output = self.encode(source_ids)
            hidden = self.decode(shift_right(target_ids), encoder_output, padding_mask(source_ids))
        else:
            inputs = keras.Input((None,), dtype="int32", name="ids")
            hidden = self.decode(shift_right(inputs))
        super().__init__(inputs=inputs, outputs=self.logits(hidden), dtype=dtype, **kwargs)
        self.token_embedding = self.target_embedding  # the Backbone convention

        # === Config ===
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.filter_size = filter_size
        self.num_heads = num_heads
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.norm_first = bool(norm_first)
        self.shared_embedding_and_softmax_weights = tied
        self.max_relative_position = max_relative_position
        self.add_timing_signal = bool(add_timing_signal)
        self.ffn_activation = ffn_activation
        self.attention_use_bias = attention_use_bias
        self.ffn_use_bias = ffn_use_bias
        self.norm_epsilon = norm_epsilon
        self.scale_embedding = scale_embedding
        self.timescale_rule = timescale_rule
        self.max_positions = max_positions
        self.decoder_start = decoder_start
        self.source_vocab_size = source_vocab_size
        self.final_logits_bias = final_logits_bias

    @property
    def has_input(self):
        """True for an encoder–decoder, False for a decoder-only language model."""
        return bool(self.encoder_blocks)

    # The forward pass, written once -----------------------------------------------------------

    def encode(
        self,
        source_ids,
        training=None,
        return_attention_scores=False,
        segment_ids=None,
        positions=None,
    ):
        """Encoder output `[B, S, d]` for source ids `[B, S]` (0 = padding).

        With `return_attention_scores`, also a list with each block's dict of
        `[B, H, S, S]` attention weights (`"self_attention"`). Packed rows give their
        `segment_ids` and `positions` (int `[B, S]`, t2t's `inputs_segmentation` and
        `inputs_position`): each pair then attends only to itself.

        Example:

        >>> import numpy as np
        >>> model = Transformer(40, 16, 32, 2, num_encoder_layers=1, num_decoder_layers=1)
        >>> tuple(model.encode(np.array([[5, 6, 1, 0]], "int32")).shape)
        (1, 4, 16)
        """
        if not self.has_input:
            raise ValueError(
                f"Model '{self.name}' is a decoder-only language model (num_encoder_layers=0): "
                "it has no encoder to run."
            )
        source_ids = _check_ids("source_ids", source_ids)
        source_mask = padding_mask(source_ids)  # [B, S]
        _check_packed("segment_ids", segment_ids, "positions", positions)
        same_pair = None if segment_ids is None else segment_mask(segment_ids, segment_ids)
        x = self.source_embedding(source_ids, positions=positions, training=training)  # [B, S, d]
        scores = []
        for block in self.encoder_blocks:
            x = block(
                x,
                padding_mask=source_mask,
                attention_mask=same_pair,  # [B, S, S] or None
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                x, block_scores = x
                scores.append(block_scores)
        x = x if self.encoder_norm is None else self.encoder_norm(x)
        return (x, scores) if return_attention_scores else x

    def decode(
        self,
        decoder_ids,
        encoder_output=None,
        source_mask=None,
        cache=None,
        index=None,
        training=None,
        return_attention_scores=False,
        segment_ids=None,
        positions=None,
        source_segment_ids=None,
    ):
        """Decoder hidden states for decoder input ids (they start with `BOS_ID`).

        Args:
            decoder_ids: int `[B, T]`: the targets shifted right (`shift_right`), or,
                with a `cache`, the ids of the positions `index, index + 1, …`.
            encoder_output: `[B, S, d]` from `encode` (encoder–decoder only).
            source_mask: boolean `[B, S]`, True at real source tokens.
            cache: per-block caches from `init_cache`, for incremental decoding.
            index: position of `decoder_ids[:, 0]` in the sequence (with `cache`).
            training: enables dropout.
            return_attention_scores: also return a list with each block's dict of
                attention weights (`"self_attention"` `[B, H, T, T]`,
                `"cross_attention"` `[B, H, T, S]`); not with a `cache`.
            segment_ids: packed rows: int `[B, T]` pair ids (0 = padding) of
                `decoder_ids` (`targets_segmentation`); not with a `cache`.
            positions: packed rows: int `[B, T]` positions within each pair
                (`targets_position`).
            source_segment_ids: packed rows of an encoder–decoder: the source's
                `[B, S]` pair ids (`inputs_segmentation`), so that each pair's
                cross-attention sees only its own source.

        Returns:
            Hidden states `[B, T, d]` (after the final LayerNorm when Pre-LN); with a
            `cache`, `(hidden, new_cache)`; with `return_attention_scores`,
            `(hidden, scores)`.
        """
        decoder_ids = _check_ids("decoder_ids", decoder_ids)
        if self.has_input and encoder_output is None and cache is None:
            raise ValueError(
                f"Model '{self.name}' is an encoder–decoder: `decode` needs the "
                "`encoder_output` of `encode`, got encoder_output=None."
            )
        if not self.has_input and encoder_output is not None:
            raise ValueError(
                f"Model '{self.name}' is decoder-only: it takes no `encoder_output`, got "
                f"one of shape {tuple(encoder_output.shape)}."
            )
        _check_packed("segment_ids", segment_ids, "positions", positions)
        if cache is not None:
            if return_attention_scores:
                raise ValueError("`return_attention_scores` is not supported with a `cache`.")
            if segment_ids is not None:
                raise ValueError("`segment_ids` (packed rows) is not supported with a `cache`.")
            return self._decode_cached(decoder_ids, source_mask, cache, index, training)
        same_pair = cross_pair = None
        if segment_ids is not None:
            same_pair = segment_mask(segment_ids, segment_ids)  # [B, T, T]
            if self.has_input:
                if source_segment_ids is None:
                    raise ValueError(
                        "Packed rows of an encoder–decoder need `source_segment_ids` with "
                        "`segment_ids`, got source_segment_ids=None."
                    )
                cross_pair = segment_mask(segment_ids, source_segment_ids)  # [B, T, S]
        x = self.target_embedding(
            decoder_ids, positions=positions, zeroed_id=self._zeroed_start, training=training
        )  # [B, T, d]
        target_mask = padding_mask(decoder_ids)  # [B, T]
        scores = []
        for block in self.decoder_blocks:
            x = block(
                x,
                context=encoder_output,
                padding_mask=target_mask,
                context_padding_mask=source_mask,
                attention_mask=same_pair,
                context_attention_mask=cross_pair,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                x, block_scores = x
                scores.append(block_scores)
        x = x if self.decoder_norm is None else self.decoder_norm(x)
        return (x, scores) if return_attention_scores else x

    def call(self, inputs, training=None, mask=None):
        """The functional graph, or for packed rows (a dict with the segment features) the
        same methods with segment masks (see the module docstring)."""
        packed = PACKED_TARGET_FEATURES if self.has_input else PACKED_LM_FEATURES
        if isinstance(inputs, dict) and any(k in inputs for k in packed):
            return self._call_packed(inputs, training)
        return super().call(inputs, training=training, mask=mask)

    def _call_packed(self, features, training):
        if self.has_input:
            target = ("targets", *PACKED_TARGET_FEATURES)
            names = ("inputs", *PACKED_SOURCE_FEATURES, *target)
        else:
            names = target = ("ids", *PACKED_LM_FEATURES)
        missing = [name for name in names if name not in features]
        if missing:
            raise ValueError(
                f"Packed rows need the features {list(names)}; missing {missing}, got "
                f"{sorted(features)}."
            )
        target_ids, segments, positions = (features[name] for name in target)
        decoder_ids = shift_right(target_ids, segment_ids=segments, positions=positions)
        if not self.has_input:
            hidden = self.decode(
                decoder_ids, training=training, segment_ids=segments, positions=positions
            )
            return self.logits(hidden)
        source_ids = features["inputs"]
        source_segments, source_positions = (features[name] for name in PACKED_SOURCE_FEATURES)
        memory = self.encode(
            source_ids, training=training, segment_ids=source_segments, positions=source_positions
        )
        hidden = self.decode(
            decoder_ids,
            memory,
            padding_mask(source_ids),
            training=training,
            segment_ids=segments,
            positions=positions,
            source_segment_ids=source_segments,
        )
        return self.logits(hidden)

    def _decode_cached(self, decoder_ids, source_mask, cache, index, training):
        if index is None:
            raise ValueError("`index` is required with a `cache`, got index=None.")
        if len(cache) != len(self.decoder_blocks):
            raise ValueError(
                f"`cache` must hold one entry per decoder block ({len(self.decoder_blocks)}), "
                f"got {len(cache)}."
            )
        x = self.target_embedding(
            decoder_ids, start_index=index, zeroed_id=self._zeroed_start, training=training
        )  # [B, T, d]
        new_cache = []
        for block, block_cache in zip(self.decoder_blocks, cache, strict=True):
            x, block_cache = block(
                x,
                cache=block_cache,
                cache_index=index,
                context_padding_mask=source_mask,
                training=training,
            )
            new_cache.append(block_cache)
        x = x if self.decoder_norm is None else self.decoder_norm(x)
        return x, new_cache

    def logits(self, hidden):
        """Float32 logits `[..., vocab]` of decoder hidden states `[..., d]` (plus the
        `final_logits_bias` when the model has one)."""
        if self.softmax is None:
            logits = self.target_embedding(hidden, reverse=True)  # tied: h · Eᵀ
        else:
            logits = self.softmax(hidden)
        logits = self.logits_dtype(logits)  # float32
        return logits if self.logits_bias is None else self.logits_bias(logits)

    def init_cache(self, batch_size, max_length, encoder_output=None):
        """Per-decoder-block caches for incremental decoding (t2t `fast_decode`).

        Self-attention k/v are zeros preallocated to `max_length`; cross-attention
        k/v are computed once from `encoder_output`. A list with one dict per block
        (`{"self": {...}, "cross": {...}}`), passed to `decode(..., cache=, index=)`.
        """
        if self.has_input and encoder_output is None:
            raise ValueError(
                "`init_cache` of an encoder–decoder needs the `encoder_output`, got None."
            )
        return [
            block.init_cache(batch_size, max_length, context=encoder_output)
            for block in self.decoder_blocks
        ]

    def get_config(self):
        return {
            **super().get_config(),  # name, trainable, dtype
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "filter_size": self.filter_size,
            "num_heads": self.num_heads,
            "num_encoder_layers": self.num_encoder_layers,
            "num_decoder_layers": self.num_decoder_layers,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "relu_dropout": self.relu_dropout,
            "norm_first": self.norm_first,
            "shared_embedding_and_softmax_weights": self.shared_embedding_and_softmax_weights,
            "max_relative_position": self.max_relative_position,
            "add_timing_signal": self.add_timing_signal,
            "ffn_activation": self.ffn_activation,
            "attention_use_bias": self.attention_use_bias,
            "ffn_use_bias": self.ffn_use_bias,
            "norm_epsilon": self.norm_epsilon,
            "scale_embedding": self.scale_embedding,
            "timescale_rule": self.timescale_rule,
            "max_positions": self.max_positions,
            "decoder_start": self.decoder_start,
            "source_vocab_size": self.source_vocab_size,
            "final_logits_bias": self.final_logits_bias,
        }


def _check_packed(segments_name, segments, positions_name, positions):
    """Segment ids and positions of packed rows come together, or not at all."""
    if (segments is None) != (positions is None):
        given, absent = (
            (segments_name, positions_name)
            if positions is None
            else (positions_name, segments_name)
        )
        raise ValueError(f"Packed rows need `{absent}` with `{given}`, got {absent}=None.")


def _check_ids(name, ids):
    """Integer ids of rank 2 (`[B, L]`), else a ValueError naming `name` and the shape."""
    if len(ids.shape) != 2:
        raise ValueError(f"`{name}` must be int ids of shape [batch, length], got {ids.shape}.")
    if "int" not in keras.backend.standardize_dtype(ids.dtype):
        raise ValueError(f"`{name}` must be integer token ids, got dtype {ids.dtype}.")
    return ids
