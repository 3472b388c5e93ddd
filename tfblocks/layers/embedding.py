"""Token embedding plus the t2t sinusoidal timing signal, with tied softmax logits.

Mirrors t2t's symbol modality (`bottom`/`top` with shared weights) followed by
`common_attention.add_timing_signal_1d`: embeddings are initialised N(0, d^-0.5),
multiplied by √d, zeroed at padding (id 0), the timing signal is added, then dropout
(t2t `layer_prepostprocess_dropout`). `attend(h)` gives the tied logits `h · Eᵀ`.

Options for imported models (defaults are t2t's): `timescale_rule="half_depth"` spaces the
timescales over d/2 steps instead of t2t's d/2 − 1 (Hugging Face's Marian models; Marian's
own C++ code uses t2t's rule), `max_positions` reads the signal from a stored table of that
many positions (a weight, so an imported table can replace it), `scale=False` skips the √d.
"""

import math

import keras
from keras import ops

from tfblocks.ids import PAD_ID
from tfblocks.layers import _utils
from tfblocks.layers.dropout import HashDropout

TIMESCALE_RULES = ("t2t", "half_depth")


def timing_signal(
    length, channels, min_timescale=1.0, max_timescale=1e4, start_index=0, timescale_rule="t2t"
):
    """The t2t sinusoidal position signal (`get_timing_signal_1d`).

    For `i < channels // 2`: `inv_timescale_i = min_timescale · exp(−i · log(max/min) / n)`
    with `n = max(channels // 2 − 1, 1)` (t2t, and Marian's C++ code) or
    `n = channels // 2` (`timescale_rule="half_depth"`: `10000^(−2i/d)` of the paper, as
    Hugging Face's Marian models compute it); position p gets `sin(p · inv_timescale)` in
    the first half of the channels and `cos(p · inv_timescale)` in the second half
    (concatenated, not interleaved); one zero channel is appended when `channels` is odd.

    Args:
        length: number of positions (int or scalar tensor).
        channels: size of the signal's last axis.
        min_timescale: shortest wavelength scale.
        max_timescale: longest wavelength scale.
        start_index: position of the first row (int or scalar tensor), used when
            decoding one position at a time.
        timescale_rule: `"t2t"` (d/2 − 1 steps) or `"half_depth"` (d/2 steps).

    Returns:
        float32 tensor `[1, length, channels]`.

    Example:

    >>> tuple(timing_signal(10, 512).shape)
    (1, 10, 512)
    """
    channels = _utils.check_positive_int("channels", channels)
    if isinstance(length, int) and (isinstance(length, bool) or length < 0):
        raise ValueError(f"`length` must be a non-negative integer, got length={length!r}.")
    if not 0 < min_timescale <= max_timescale:
        raise ValueError(
            "`min_timescale` and `max_timescale` must satisfy 0 < min <= max, got "
            f"min_timescale={min_timescale!r}, max_timescale={max_timescale!r}."
        )
    position = ops.cast(ops.arange(length), "float32") + ops.cast(start_index, "float32")
    signal = timing_signal_at(
        position, channels, min_timescale, max_timescale, timescale_rule
    )  # [L, C]
    return ops.expand_dims(signal, 0)  # [1, L, C]


def timing_signal_at(
    positions, channels, min_timescale=1.0, max_timescale=1e4, timescale_rule="t2t"
):
    """The timing signal of `timing_signal` at given positions: `[...]` → float32 `[..., channels]`.

    Packed rows (several pairs in one row, `make_dataset(shapes="packed")`) restart the
    positions at 0 for each pair, so the signal is looked up per token instead of per column.

    Example:

    >>> import numpy as np
    >>> at = timing_signal_at(np.array([[0, 1, 0]]), 8)
    >>> bool(np.allclose(at[0, 2], timing_signal(1, 8)[0, 0]))
    True
    """
    channels = _utils.check_positive_int("channels", channels)
    _utils.check_choice("timescale_rule", timescale_rule, TIMESCALE_RULES)
    num_timescales = channels // 2
    steps = num_timescales - 1 if timescale_rule == "t2t" else num_timescales
    log_increment = math.log(float(max_timescale) / float(min_timescale)) / max(steps, 1)
    inv_timescales = min_timescale * ops.exp(
        ops.cast(ops.arange(num_timescales), "float32") * -log_increment
    )  # [C/2]
    scaled_time = ops.expand_dims(ops.cast(positions, "float32"), -1) * inv_timescales  # [..., C/2]
    signal = ops.concatenate(
        [ops.sin(scaled_time), ops.cos(scaled_time)], axis=-1
    )  # [..., 2*(C/2)]
    if channels % 2:
        pad = [[0, 0]] * (len(signal.shape) - 1) + [[0, 1]]
        signal = ops.pad(signal, pad)  # [..., C]
    return signal


@keras.saving.register_keras_serializable(package="tfblocks")
class SinusoidalEmbedding(keras.layers.Layer):
    """Token embedding × √d + sinusoidal timing signal, with tied output logits.

    Args:
        vocab_size: number of token ids; id 0 (`PAD_ID`) is padding.
        hidden_size: embedding size d.
        mask_zero: emit the Keras mask `ids != 0` (padding positions are zeroed
            before the timing signal is added either way, as in t2t).
        scale: multiply embeddings by √d (t2t `multiply_embedding_mode="sqrt_depth"`).
        min_timescale: timing signal's shortest timescale.
        max_timescale: timing signal's longest timescale.
        dropout: dropout after adding the signal (t2t `layer_prepostprocess_dropout`).
        embeddings_initializer: defaults to N(0, hidden_size^-0.5).
        add_timing_signal: add the sinusoidal timing signal (t2t `pos="timing"`); False
            for models whose attention knows positions (t2t `pos=None`, relative
            attention).
        timescale_rule: `"t2t"` or `"half_depth"` (see `timing_signal`).
        max_positions: None computes the signal at each call; an int keeps it in a
            trainable weight `position_embeddings` `[max_positions, hidden_size]`
            initialised with the signal (t2t `pos="emb"`, whose table starts random;
            an importer overwrites it with a model's stored table). Positions must then
            stay below `max_positions`. Needs `add_timing_signal`.
        position_offset: the signal's position of a sequence's first token (0, t2t);
            every position is shifted by it, `start_index` and `positions` included
            (fairseq's M2M-100 / NLLB count from `padding_idx + 1` = 2).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        ids: integer `[B, L]` in `[0, vocab_size)`. Float ids, other ranks, and (when
            executing eagerly) ids out of range raise `ValueError`. Inside a
            `tf.function` / XLA the values are not checked (that would need a host
            sync; an XLA gather clamps an id out of range silently): the data paths
            that feed ids (`make_dataset`, `Translator`, `Generator`) guarantee it.
        start_index: position of the first id (for one-step decoding).
        positions: optional int `[B, L]`, each token's position (packed rows restart it
            per pair); replaces `start_index`.
        zeroed_id: optional id whose embedding is zeroed like padding's, though it is
            not masked: t2t's zero vector as the decoder's first input (the model passes
            its start id here with `decoder_start="zeros"`).
        training: enables dropout.

    Example:

    >>> import numpy as np
    >>> emb = SinusoidalEmbedding(vocab_size=100, hidden_size=16)
    >>> h = emb(np.array([[5, 7, 0]]))
    >>> tuple(h.shape), tuple(emb.attend(h).shape)
    ((1, 3, 16), (1, 3, 100))
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        mask_zero=True,
        scale=True,
        min_timescale=1.0,
        max_timescale=1e4,
        dropout=0.0,
        embeddings_initializer=None,
        add_timing_signal=True,
        timescale_rule="t2t",
        max_positions=None,
        position_offset=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.add_timing_signal = bool(add_timing_signal)
        self.position_offset = _utils.check_non_negative_int("position_offset", position_offset)
        if self.position_offset and max_positions is not None:
            raise ValueError(
                "`position_offset` shifts a computed timing signal; a stored table "
                "(`max_positions`) is read from position 0, got "
                f"position_offset={position_offset}, max_positions={max_positions}."
            )
        self.timescale_rule = _utils.check_choice("timescale_rule", timescale_rule, TIMESCALE_RULES)
        self.max_positions = _utils.check_optional_positive_int("max_positions", max_positions)
        if self.max_positions is not None and not self.add_timing_signal:
            raise ValueError(
                "`max_positions` (a stored position table) needs add_timing_signal=True, got "
                f"max_positions={max_positions}, add_timing_signal={add_timing_signal!r}."
            )
        self.vocab_size = _utils.check_positive_int("vocab_size", vocab_size)
        self.hidden_size = _utils.check_positive_int("hidden_size", hidden_size)
        self.mask_zero = bool(mask_zero)
        self.scale = bool(scale)
        if not 0 < min_timescale <= max_timescale:
            raise ValueError(
                "`min_timescale` and `max_timescale` must satisfy 0 < min <= max, got "
                f"min_timescale={min_timescale!r}, max_timescale={max_timescale!r}."
            )
        self.min_timescale = float(min_timescale)
        self.max_timescale = float(max_timescale)
        self.dropout = _utils.check_rate("dropout", dropout)
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = self.mask_zero
        self.dropout_layer = HashDropout(
            self.dropout, dtype=self.dtype_policy, name="embedding_dropout"
        )

    def build(self, ids_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.hidden_size),
            initializer=self.embeddings_initializer,
        )
        self.position_embeddings = None
        if self.max_positions is not None:
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_positions, self.hidden_size),
                initializer=self._signal_table,
            )
        self.dropout_layer.build(None)

    def _signal_table(self, shape, dtype=None):
        """The timing signal of positions `[0, shape[0])`: the stored table's initial value."""
        table = timing_signal(
            shape[0],
            shape[1],
            self.min_timescale,
            self.max_timescale,
            timescale_rule=self.timescale_rule,
        )[0]  # [max_positions, d]
        return ops.cast(table, dtype or "float32")

    def _signal(self, length, start_index, positions):
        """The position signal `[1, L, d]` (or `[B, L, d]` at given `positions`)."""
        if self.position_embeddings is not None:
            if positions is None:
                positions = ops.expand_dims(
                    ops.arange(length, dtype="int32") + ops.cast(start_index, "int32"), 0
                )  # [1, L]
            return ops.take(self.position_embeddings, ops.cast(positions, "int32"), axis=0)
        if positions is None:
            return timing_signal(
                length,
                self.hidden_size,
                self.min_timescale,
                self.max_timescale,
                start_index=start_index,
                timescale_rule=self.timescale_rule,
            )  # [1, L, d]
        return timing_signal_at(
            positions, self.hidden_size, self.min_timescale, self.max_timescale, self.timescale_rule
        )  # [B, L, d]

    def call(self, ids, start_index=0, positions=None, zeroed_id=None, training=None):
        _utils.check_rank("ids", ids, ("batch", "length"))
        _utils.check_token_ids("ids", ids, self.vocab_size)
        ids = ops.cast(ids, "int32")
        x = ops.take(self.embeddings, ids, axis=0)  # [B, L, d]
        if self.scale:
            x = x * ops.cast(self.hidden_size**0.5, x.dtype)
        # t2t zeroes the embedding of padding so it carries no signal.
        keep = ops.not_equal(ids, PAD_ID)  # [B, L]
        if zeroed_id is not None:
            keep = ops.logical_and(keep, ops.not_equal(ids, zeroed_id))
        x = x * ops.cast(ops.expand_dims(keep, -1), x.dtype)
        if not self.add_timing_signal:
            return self.dropout_layer(x, training=training)
        if positions is not None:
            _utils.check_mask_shape("positions", positions, tuple(ids.shape))
            positions = ops.cast(positions, "int32") + self.position_offset
        start_index = start_index + self.position_offset
        signal = self._signal(ops.shape(ids)[1], start_index, positions)  # [1|B, L, d]
        x = x + ops.cast(signal, x.dtype)
        return self.dropout_layer(x, training=training)

    def compute_mask(self, ids, previous_mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(ids, PAD_ID)

    def compute_output_shape(self, ids_shape):
        return (*tuple(ids_shape), self.hidden_size)

    def attend(self, h):
        """Tied softmax logits `h · Eᵀ`: `[..., d]` → `[..., vocab_size]`."""
        return ops.matmul(h, ops.transpose(ops.cast(self.embeddings, h.dtype)))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size,
                "mask_zero": self.mask_zero,
                "scale": self.scale,
                "min_timescale": self.min_timescale,
                "max_timescale": self.max_timescale,
                "dropout": self.dropout,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
                "add_timing_signal": self.add_timing_signal,
                "timescale_rule": self.timescale_rule,
                "max_positions": self.max_positions,
                "position_offset": self.position_offset,
            }
        )
        return config
