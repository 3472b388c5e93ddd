"""`Transformer`s from `HParams`: the encoder–decoder and the decoder-only language model.

Hparams objects stop here: the builders read an `HParams` and pass explicit
arguments to the `Transformer` constructor.
"""

from tfblocks.models.transformer import Transformer


def _from_hparams(hp, num_encoder_layers, name, dtype=None):
    return Transformer(
        vocab_size=hp.vocab_size,
        hidden_size=hp.hidden_size,
        filter_size=hp.filter_size,
        num_heads=hp.num_heads,
        num_encoder_layers=num_encoder_layers,
        num_decoder_layers=hp.num_decoder_layers,
        dropout=hp.layer_prepostprocess_dropout,
        attention_dropout=hp.attention_dropout,
        relu_dropout=hp.relu_dropout,
        norm_first=hp.norm_first,
        shared_embedding_and_softmax_weights=hp.shared_embedding_and_softmax_weights,
        max_relative_position=(
            hp.max_relative_position if hp.self_attention_type == "dot_product_relative" else None
        ),
        add_timing_signal=hp.pos in ("timing", "emb"),
        max_positions=hp.max_length if hp.pos == "emb" else None,
        ffn_activation=hp.ffn_activation,
        attention_use_bias=hp.attention_use_bias,
        ffn_use_bias=hp.ffn_use_bias,
        norm_epsilon=hp.norm_epsilon,
        scale_embedding=hp.multiply_embedding_mode == "sqrt_depth",
        timescale_rule=hp.timescale_rule,
        position_offset=hp.position_offset,
        decoder_start=hp.decoder_start,
        source_vocab_size=hp.source_vocab_size or None,
        final_logits_bias=hp.final_logits_bias,
        name=name,
        dtype=dtype,
    )


def build_transformer(hp, name="transformer", dtype=None):
    """Builds the t2t encoder–decoder `Transformer` from an `HParams`.

    Args:
        hp: an `HParams` (see `tfblocks.hparams`) with `num_encoder_layers >= 1`.
        name: the model's name.
        dtype: dtype policy of its layers (e.g. `"mixed_bfloat16"`); None: the global one.

    Returns:
        A `Transformer` mapping `{"inputs": [B, S] int32, "targets": [B, T] int32}`
        (0 = padding) to float32 logits `[B, T, hp.vocab_size]`. The targets are
        shifted right (starting with `BOS_ID`) inside the model.

    Example:

    >>> import numpy as np
    >>> from tfblocks.models.hyperparameters import hparams
    >>> model = build_transformer(hparams("transformer_tiny", vocab_size=40))
    >>> src = np.array([[5, 6, 7, 1, 0]], "int32")
    >>> tgt = np.array([[8, 9, 1, 0]], "int32")
    >>> logits = model({"inputs": src, "targets": tgt})
    >>> tuple(logits.shape), str(logits.dtype)
    ((1, 4, 40), "<dtype: 'float32'>")
    """
    if hp.num_encoder_layers == 0:
        raise ValueError(
            "`build_transformer` builds an encoder–decoder and needs num_encoder_layers >= 1, "
            "got num_encoder_layers=0; use `build_language_model` for a decoder-only model."
        )
    return _from_hparams(hp, hp.num_encoder_layers, name, dtype)


def build_language_model(hp, name="language_model"):
    """Builds a decoder-only `Transformer` language model (t2t `has_input=False`).

    Args:
        hp: an `HParams` with `num_encoder_layers=0` (e.g.
            `hparams("transformer_tiny", num_encoder_layers=0)`).
        name: the model's name.

    Returns:
        A `Transformer` mapping int32 ids `[B, T]` (0 = padding) to float32 logits
        `[B, T, vocab]` of the next token: position t sees `BOS, ids[:t]` and
        predicts `ids[t]`, so `model.fit(ids, ids)` trains it. Tied softmax, final
        LayerNorm when Pre-LN.

    Example:

    >>> import numpy as np
    >>> from tfblocks.models.hyperparameters import hparams
    >>> lm = build_language_model(hparams("transformer_tiny", vocab_size=40,
    ...                                   num_encoder_layers=0))
    >>> tuple(lm(np.array([[5, 6, 7, 1]], "int32")).shape)
    (1, 4, 40)
    """
    if hp.num_encoder_layers != 0:
        raise ValueError(
            "`build_language_model` builds a decoder-only model and needs "
            f"num_encoder_layers=0, got num_encoder_layers={hp.num_encoder_layers}; pass "
            "`hparams(..., num_encoder_layers=0)`."
        )
    return _from_hparams(hp, 0, name)
