"""The two ends of a `Transformer`: its token embeddings and the layers of its logits.

`make_embeddings` and `make_logits_layers` create them from the model's checked arguments
(`options.check_arguments`); the model holds them as attributes and calls them in its own
`encode` / `decode` / `logits`. `_TiedEmbedding` is the embedding that also computes the
tied logits `h · Eᵀ`, `_LogitsBias` Marian's `final_logits_bias`.
"""

import keras
from keras import ops

from tfblocks import _checks
from tfblocks.layers import SinusoidalEmbedding


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


def make_embeddings(config, dtype=None):
    """The token embeddings and the untied softmax of a model.

    Args:
        config: the model's arguments, as `options.check_arguments` returns them.
        dtype: dtype policy of the layers.

    Returns:
        `(target_embedding, source_embedding, softmax)`. The source embedding is the
        target's own layer when the two share a vocabulary and a matrix, and None in a
        decoder-only model; `softmax` is None when the logits are tied to the target
        embedding (`_TiedEmbedding`).
    """
    vocab_size = config["vocab_size"]
    has_input = config["num_encoder_layers"] > 0
    tied = config["shared_embedding_and_softmax_weights"]
    separate_source = has_input and (not tied or config["source_vocab_size"] is not None)

    def embedding(cls, name, size):
        return cls(
            size,
            config["hidden_size"],
            dropout=config["dropout"],
            add_timing_signal=config["add_timing_signal"],
            scale=config["scale_embedding"],
            timescale_rule=config["timescale_rule"],
            max_positions=config["max_positions"],
            position_offset=config["position_offset"],
            dtype=dtype,
            name=name,
        )

    if tied:
        # Named "embedding" when it is also the source's, as the one matrix of the model.
        name = "target_embedding" if separate_source else "embedding"
        target = embedding(_TiedEmbedding, name, vocab_size)
    else:
        target = embedding(SinusoidalEmbedding, "target_embedding", vocab_size)
    if separate_source:
        size = config["source_vocab_size"] or vocab_size
        source = embedding(SinusoidalEmbedding, "source_embedding", size)
    else:
        source = target if has_input else None
    softmax = (
        None
        if tied
        else keras.layers.Dense(vocab_size, use_bias=False, dtype=dtype, name="softmax")
    )
    return target, source, softmax


def make_logits_layers(config):
    """`(logits_dtype, logits_bias)`: the identity layer whose float32 policy makes the
    logits float32 under any dtype policy, and the `final_logits_bias` layer (None without
    one). Both are float32 whatever the model's policy."""
    logits_dtype = keras.layers.Activation("linear", dtype="float32", name="logits")
    logits_bias = (
        _LogitsBias(config["vocab_size"], dtype="float32", name="final_logits_bias")
        if config["final_logits_bias"]
        else None
    )
    return logits_dtype, logits_bias
