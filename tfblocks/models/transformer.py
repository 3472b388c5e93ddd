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

The model's parts live beside this module, as functions over its own sublayers rather
than Keras layers (so every weight keeps its path and saved weights keep loading):
`options` checks the constructor's arguments, `embeddings` makes the token embeddings and
the logits layers, `stacks` the encoder and decoder blocks and the one loop over them,
`inputs` holds `padding_mask`, `shift_right` and the checks of what the methods receive.

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

from tfblocks.ids import BOS_ID, PACKED_LM_FEATURES, PACKED_TARGET_FEATURES
from tfblocks.layers import segment_mask
from tfblocks.models.embeddings import make_embeddings, make_logits_layers
from tfblocks.models.inputs import (
    check_decode_arguments,
    check_ids,
    check_packed,
    packed_features,
    padding_mask,
    shift_right,
)
from tfblocks.models.options import ARGUMENTS, LAYER_NORM_EPSILON, check_arguments
from tfblocks.models.stacks import make_stack, run_stack


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
        position_offset: the timing signal's position of each sequence's first token
            (0, t2t; 2 in M2M-100 / NLLB, which count from `padding_idx + 1`).
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
        position_offset=0,
        decoder_start="bos",
        source_vocab_size=None,
        final_logits_bias=False,
        dtype=None,
        **kwargs,
    ):
        # === Arguments ===
        config = check_arguments(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            filter_size=filter_size,
            num_heads=num_heads,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            dropout=dropout,
            attention_dropout=attention_dropout,
            relu_dropout=relu_dropout,
            norm_first=norm_first,
            shared_embedding_and_softmax_weights=shared_embedding_and_softmax_weights,
            max_relative_position=max_relative_position,
            add_timing_signal=add_timing_signal,
            ffn_activation=ffn_activation,
            attention_use_bias=attention_use_bias,
            ffn_use_bias=ffn_use_bias,
            norm_epsilon=norm_epsilon,
            scale_embedding=scale_embedding,
            timescale_rule=timescale_rule,
            max_positions=max_positions,
            position_offset=position_offset,
            decoder_start=decoder_start,
            source_vocab_size=source_vocab_size,
            final_logits_bias=final_logits_bias,
        )
        has_input = config["num_encoder_layers"] > 0
        # The embedding call argument that makes the decoder's first input a zero vector.
        self._zeroed_start = BOS_ID if decoder_start == "zeros" else None

        # === Layers (in this order, so that a seeded build draws the same weights) ===
        self.target_embedding, self.source_embedding, self.softmax = make_embeddings(config, dtype)
        self.encoder_blocks, self.encoder_norm = make_stack("encoder", config, dtype)
        self.decoder_blocks, self.decoder_norm = make_stack("decoder", config, dtype)
        self.logits_dtype, self.logits_bias = make_logits_layers(config)

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

        # === Config: every argument is an attribute of the same name (`get_config`) ===
        for name, value in config.items():
            setattr(self, name, value)

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
        source_ids = check_ids("source_ids", source_ids)
        source_mask = padding_mask(source_ids)  # [B, S]
        check_packed("segment_ids", segment_ids, "positions", positions)
        same_pair = None if segment_ids is None else segment_mask(segment_ids, segment_ids)
        x = self.source_embedding(source_ids, positions=positions, training=training)  # [B, S, d]
        return run_stack(
            self.encoder_blocks,
            self.encoder_norm,
            x,
            return_attention_scores=return_attention_scores,
            padding_mask=source_mask,
            attention_mask=same_pair,  # [B, S, S] or None
            training=training,
        )

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
        decoder_ids = check_ids("decoder_ids", decoder_ids)
        check_decode_arguments(
            self,
            encoder_output=encoder_output,
            cache=cache,
            index=index,
            return_attention_scores=return_attention_scores,
            segment_ids=segment_ids,
            positions=positions,
            source_segment_ids=source_segment_ids,
        )
        if cache is not None:
            return self._decode_cached(decoder_ids, source_mask, cache, index, training)
        same_pair = cross_pair = None
        if segment_ids is not None:
            same_pair = segment_mask(segment_ids, segment_ids)  # [B, T, T]
            if self.has_input:
                cross_pair = segment_mask(segment_ids, source_segment_ids)  # [B, T, S]
        x = self.target_embedding(
            decoder_ids, positions=positions, zeroed_id=self._zeroed_start, training=training
        )  # [B, T, d]
        return run_stack(
            self.decoder_blocks,
            self.decoder_norm,
            x,
            return_attention_scores=return_attention_scores,
            context=encoder_output,
            padding_mask=padding_mask(decoder_ids),  # [B, T]
            context_padding_mask=source_mask,
            attention_mask=same_pair,  # [B, T, T] or None
            context_attention_mask=cross_pair,  # [B, T, S] or None
            training=training,
        )

    def call(self, inputs, training=None, mask=None):
        """The functional graph, or for packed rows (a dict with the segment features) the
        same methods with segment masks (see the module docstring)."""
        packed = PACKED_TARGET_FEATURES if self.has_input else PACKED_LM_FEATURES
        if isinstance(inputs, dict) and any(k in inputs for k in packed):
            return self._call_packed(inputs, training)
        return super().call(inputs, training=training, mask=mask)

    def _call_packed(self, features, training):
        source, (target_ids, segments, positions) = packed_features(features, self.has_input)
        decoder_ids = shift_right(target_ids, segment_ids=segments, positions=positions)
        if source is None:  # a language model
            hidden = self.decode(
                decoder_ids, training=training, segment_ids=segments, positions=positions
            )
            return self.logits(hidden)
        source_ids, source_segments, source_positions = source
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
        x = self.target_embedding(
            decoder_ids, start_index=index, zeroed_id=self._zeroed_start, training=training
        )  # [B, T, d]
        return run_stack(  # (hidden, new_cache)
            self.decoder_blocks,
            self.decoder_norm,
            x,
            caches=cache,
            cache_index=index,
            context_padding_mask=source_mask,
            training=training,
        )

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
        # `__init__` keeps every constructor argument as an attribute of the same name.
        arguments = {name: getattr(self, name) for name in ARGUMENTS}
        return {**super().get_config(), **arguments}  # super(): name, trainable, dtype
