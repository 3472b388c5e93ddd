"""The t2t encoder–decoder Transformer, built with the Keras functional API.

`build_transformer(hp)` returns a `keras.Model` with two int32 inputs, `"inputs"`
(source ids `[B, S]`) and `"targets"` (target ids `[B, T]`), and float32 logits
`[B, T, vocab]` (float32 also under mixed precision). Teacher forcing happens inside
the model: the decoder reads the targets shifted right by one position, so a dataset
yields `({"inputs": src, "targets": tgt}, tgt)` and position t predicts `tgt[t]`.

Token ids are fixed project-wide: `PAD_ID = 0`, `EOS_ID = 1`, `UNK_ID = 2`,
`BOS_ID = 3`. Departure from t2t: t2t shifts the *embedded* targets right, so the
first decoder input is a zero vector; here the shifted ids start with `BOS_ID`, so
the Keras padding mask stays `ids != PAD_ID` and decoding starts from `<s>` like the
seed notes describe.

Layout, top to bottom (t2t `transformer.body`): shared `SinusoidalEmbedding`
(embedding × √d + timing signal + dropout) → `num_encoder_layers` `TransformerBlock`s
(→ LayerNorm when Pre-LN) → `num_decoder_layers` causal `TransformerBlock`s with
cross-attention over the encoder output (→ LayerNorm when Pre-LN) → tied softmax
`h · Eᵀ`. With `shared_embedding_and_softmax_weights=False` the source, the target
and the softmax each get their own matrix.

`encoder_decoder(model)` rebuilds the encoder and the decoder as separate functional
models sharing the trained layers (also after a `.keras` reload), for decoding.
"""

import keras
from keras import ops

from tfblocks.layers import SinusoidalEmbedding, TransformerBlock

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
BOS_ID = 3
LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package="tfblocks")
class _TiedEmbedding(SinusoidalEmbedding):
    """A `SinusoidalEmbedding` that also computes the tied logits in the graph.

    `layer(ids)` embeds; `layer(h, reverse=True)` returns `h · Eᵀ`. Calling one
    layer object both ways keeps the weight shared in a functional model and
    through `.keras` serialization.
    """

    def call(self, x, start_index=0, reverse=False, training=None):
        if reverse:
            return self.attend(x)  # [B, T, vocab]
        return super().call(x, start_index=start_index, training=training)

    def compute_mask(self, x, previous_mask=None):
        # The logits carry no mask: padding is excluded by the loss and metrics.
        if "float" in keras.backend.standardize_dtype(x.dtype):
            return None
        return super().compute_mask(x, previous_mask)

    def compute_output_spec(self, x, start_index=0, reverse=False, training=None):
        last = self.vocab_size if reverse else self.hidden_size
        shape = tuple(x.shape[:-1]) if reverse else tuple(x.shape)
        return keras.KerasTensor((*shape, last), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="tfblocks")
class _ShiftRight(keras.layers.Layer):
    """Teacher forcing: `[y0, y1, …, y_{T-1}]` → `[start_id, y0, …, y_{T-2}]`."""

    def __init__(self, start_id=BOS_ID, **kwargs):
        super().__init__(**kwargs)
        self.start_id = int(start_id)

    def call(self, ids):
        ids = ops.cast(ids, "int32")
        start = ops.full_like(ids[:, :1], self.start_id)  # [B, 1]
        return ops.concatenate([start, ids[:, :-1]], axis=1)  # [B, T]

    def compute_output_spec(self, ids):
        return keras.KerasTensor(tuple(ids.shape), dtype="int32")

    def get_config(self):
        return {**super().get_config(), "start_id": self.start_id}


@keras.saving.register_keras_serializable(package="tfblocks")
class _PaddingMask(keras.layers.Layer):
    """Boolean `[B, L]` mask, True where `ids != PAD_ID`."""

    def call(self, ids):
        return ops.not_equal(ids, PAD_ID)

    def compute_output_spec(self, ids):
        return keras.KerasTensor(tuple(ids.shape), dtype="bool")


def _norm(name):
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=name)


def _make_layers(hp):
    """Creates every layer of the model, named so `encoder_decoder` can find them."""

    def embedding(cls, name):
        return cls(
            vocab_size=hp.vocab_size,
            hidden_size=hp.hidden_size,
            dropout=hp.layer_prepostprocess_dropout,
            name=name,
        )

    def block(name, decoder):
        return TransformerBlock(
            num_heads=hp.num_heads,
            filter_size=hp.filter_size,
            dropout=hp.layer_prepostprocess_dropout,
            attention_dropout=hp.attention_dropout,
            relu_dropout=hp.relu_dropout,
            norm_first=hp.norm_first,
            causal=decoder,
            cross_attention=decoder,
            epsilon=LAYER_NORM_EPSILON,
            name=name,
        )

    if hp.shared_embedding_and_softmax_weights:
        source = target = embedding(_TiedEmbedding, "embedding")
        softmax = None
    else:
        source = embedding(SinusoidalEmbedding, "source_embedding")
        target = embedding(SinusoidalEmbedding, "target_embedding")
        softmax = keras.layers.Dense(hp.vocab_size, use_bias=False, name="softmax")
    return {
        "source_embedding": source,
        "target_embedding": target,
        "softmax": softmax,
        "encoder": [block(f"encoder_layer_{i}", False) for i in range(hp.num_encoder_layers)],
        "encoder_norm": _norm("encoder_norm") if hp.norm_first else None,
        "decoder": [block(f"decoder_layer_{i}", True) for i in range(hp.num_decoder_layers)],
        "decoder_norm": _norm("decoder_norm") if hp.norm_first else None,
        "logits": keras.layers.Activation("linear", dtype="float32", name="logits"),
    }


def _encode(layers, source_ids, source_mask):
    x = layers["source_embedding"](source_ids)  # [B, S, d]
    for block in layers["encoder"]:
        x = block(x, padding_mask=source_mask)
    if layers["encoder_norm"] is not None:
        x = layers["encoder_norm"](x)
    return x  # [B, S, d]


def _decode(layers, decoder_ids, encoder_output, source_mask, target_mask):
    x = layers["target_embedding"](decoder_ids)  # [B, T, d]
    for block in layers["decoder"]:
        x = block(
            x,
            context=encoder_output,
            padding_mask=target_mask,
            context_padding_mask=source_mask,
        )
    if layers["decoder_norm"] is not None:
        x = layers["decoder_norm"](x)
    if layers["softmax"] is None:
        logits = layers["target_embedding"](x, reverse=True)  # [B, T, vocab]
    else:
        logits = layers["softmax"](x)  # [B, T, vocab]
    return layers["logits"](logits)  # float32


def build_transformer(hp, name="transformer"):
    """Builds the t2t encoder–decoder Transformer as a functional `keras.Model`.

    Args:
        hp: an `HParams` (see `tfblocks.hparams`).
        name: the model's name.

    Returns:
        A `keras.Model` mapping `{"inputs": [B, S] int32, "targets": [B, T] int32}`
        (0 = padding) to float32 logits `[B, T, hp.vocab_size]`. The targets are
        shifted right (starting with `BOS_ID`) inside the model.

    Example:

    >>> import numpy as np
    >>> from tfblocks.models.hparams import hparams
    >>> model = build_transformer(hparams("transformer_tiny", vocab_size=40))
    >>> src = np.array([[5, 6, 7, 1, 0]], "int32")
    >>> tgt = np.array([[8, 9, 1, 0]], "int32")
    >>> logits = model({"inputs": src, "targets": tgt})
    >>> tuple(logits.shape), str(logits.dtype)
    ((1, 4, 40), "<dtype: 'float32'>")
    """
    layers = _make_layers(hp)
    source_ids = keras.Input((None,), dtype="int32", name="inputs")
    target_ids = keras.Input((None,), dtype="int32", name="targets")
    source_mask = _PaddingMask(name="source_padding")(source_ids)  # [B, S]
    decoder_ids = _ShiftRight(BOS_ID, name="shift_right")(target_ids)  # [B, T]
    target_mask = _PaddingMask(name="target_padding")(decoder_ids)  # [B, T]
    encoder_output = _encode(layers, source_ids, source_mask)
    logits = _decode(layers, decoder_ids, encoder_output, source_mask, target_mask)
    return keras.Model(
        inputs={"inputs": source_ids, "targets": target_ids}, outputs=logits, name=name
    )


def transformer_layers(model):
    """The layers of a `build_transformer` model (built or reloaded), by role.

    Returns a dict with `source_embedding`, `target_embedding` (the same layer when
    tied), `softmax` (None when tied), `encoder` / `decoder` (lists of blocks),
    `encoder_norm` / `decoder_norm` (None for Post-LN) and `logits`. Decoding and
    the examples use it instead of reaching into the model by layer names.
    """

    def get(name):
        try:
            return model.get_layer(name)
        except ValueError:
            return None

    def stack(prefix):
        blocks = []
        while (layer := get(f"{prefix}_layer_{len(blocks)}")) is not None:
            blocks.append(layer)
        return blocks

    shared = get("embedding")
    layers = {
        "source_embedding": shared or get("source_embedding"),
        "target_embedding": shared or get("target_embedding"),
        "softmax": get("softmax"),
        "encoder": stack("encoder"),
        "encoder_norm": get("encoder_norm"),
        "decoder": stack("decoder"),
        "decoder_norm": get("decoder_norm"),
        "logits": get("logits"),
    }
    if layers["source_embedding"] is None or not layers["encoder"] or not layers["decoder"]:
        raise ValueError(
            f"model={model.name!r} was not built by `build_transformer` (no embedding, "
            "encoder_layer_0 or decoder_layer_0 layer)."
        )
    return layers


def encoder_decoder(model):
    """Splits a `build_transformer` model into an encoder and a decoder model.

    Both share the model's layers (and so its weights).

    Args:
        model: a model from `build_transformer`, possibly reloaded from `.keras`.

    Returns:
        `(encoder, decoder)`: `encoder` maps `{"inputs": [B, S]}` to the encoder
        output `[B, S, d]`; `decoder` maps `{"decoder_inputs": [B, T]` ids that
        start with `BOS_ID`, `"encoder_output": [B, S, d]`, `"inputs": [B, S]`
        source ids (for the padding mask)`}` to float32 logits `[B, T, vocab]`.

    Example:

    >>> import numpy as np
    >>> from tfblocks.models.hparams import hparams
    >>> model = build_transformer(hparams("transformer_tiny", vocab_size=40))
    >>> encoder, decoder = encoder_decoder(model)
    >>> src = np.array([[5, 6, 7, 1]], "int32")
    >>> enc = encoder({"inputs": src})
    >>> logits = decoder({"decoder_inputs": np.array([[BOS_ID]], "int32"),
    ...                   "encoder_output": np.asarray(enc), "inputs": src})
    >>> tuple(enc.shape), tuple(logits.shape)
    ((1, 4, 128), (1, 1, 40))
    """
    layers = transformer_layers(model)
    hidden = layers["source_embedding"].hidden_size

    source_ids = keras.Input((None,), dtype="int32", name="inputs")
    source_mask = _PaddingMask(name="source_padding")(source_ids)
    encoder = keras.Model(
        inputs={"inputs": source_ids},
        outputs=_encode(layers, source_ids, source_mask),
        name=f"{model.name}_encoder",
    )

    decoder_ids = keras.Input((None,), dtype="int32", name="decoder_inputs")
    encoder_output = keras.Input((None, hidden), name="encoder_output")
    source_ids = keras.Input((None,), dtype="int32", name="inputs")
    source_mask = _PaddingMask(name="source_padding")(source_ids)
    target_mask = _PaddingMask(name="target_padding")(decoder_ids)
    logits = _decode(layers, decoder_ids, encoder_output, source_mask, target_mask)
    decoder = keras.Model(
        inputs={
            "decoder_inputs": decoder_ids,
            "encoder_output": encoder_output,
            "inputs": source_ids,
        },
        outputs=logits,
        name=f"{model.name}_decoder",
    )
    return encoder, decoder
