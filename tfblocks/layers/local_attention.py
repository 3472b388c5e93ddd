"""Blocked local self-attention (t2t `masked_local_attention_1d` / `local_attention_1d`).

The sequence is cut into blocks of `window` positions (the last block padded), and the
queries of block n attend only to the keys of a few neighbouring blocks, so logits are
`[B, H, n_blocks, window, W]` with W = 2·window or 3·window: time and memory grow
linearly with the length (O(n·r·d)) instead of quadratically. The exact windows, for a
query at position i in block n = i // window and a key at position j in block j // window:

- causal (t2t `masked_local_attention_1d`): j // window ∈ {n − 1, n} and j ≤ i.
- non-causal, `non_causal_window="centered"` (the default; what t2t's
  `local_attention_1d` docstring describes for `filter_width = block_length`: the own
  block and `filter_width` positions on each side): j // window ∈ {n − 1, n, n + 1}.
- non-causal, `non_causal_window="t2t"` (what t2t's `local_attention_1d` code computes
  for `filter_width = block_length`: it pads the keys by `filter_width + block_length`
  on each side and takes the first three padded blocks per query block, which shifts the
  window one block to the left): j // window ∈ {n − 2, n − 1, n}. A query sees the later
  positions of its own block, never the next block.

Departure from t2t: padding comes from the padding masks, not from all-zero key vectors
(t2t's `embedding_to_padding` on the padded keys), so a real key that happens to be zero
is still attended. t2t's other `filter_width` values are not offered.
"""

from typing import NamedTuple

import keras
from keras import ops

from tfblocks.layers import _utils
from tfblocks.layers.attention import MultiHeadAttention

# Block offsets of the key window relative to the query's block, per window kind.
_OFFSETS = {"causal": (-1, 0), "centered": (-1, 0, 1), "t2t": (-2, -1, 0)}
NON_CAUSAL_WINDOWS = ("centered", "t2t")


class BlockedMask(NamedTuple):
    """What `LocalMultiHeadAttention._attention_mask` hands to `_compute_attention`."""

    offsets: tuple  # static block offsets of the key window, e.g. (-1, 0)
    mask: object  # boolean [B|1, nb, r, W], True = may attend


def _length(x):
    """The static length of axis 1 when known (keeps shapes static), else a tensor."""
    return x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]


def _visible(query_pos, key_pos, window, offsets, causal):
    """The window, once for both paths: may the query at `query_pos` see `key_pos`?

    True when the key's block is within `offsets` of the query's block (and, if causal,
    the key is not later). Positions broadcast against each other.
    """
    query_block, key_block = query_pos // window, key_pos // window
    ok = ops.logical_and(
        key_block >= query_block + min(offsets), key_block <= query_block + max(offsets)
    )
    return ops.logical_and(ok, key_pos <= query_pos) if causal else ok


def _blocks(x, window, pad_value=0):
    """[B, L, ...] -> padded to a multiple of window -> [B, nb, window, ...]."""
    length = _length(x)
    pad = (window - length % window) % window
    widths = [[0, 0], [0, pad]] + [[0, 0]] * (len(x.shape) - 2)
    x = ops.pad(x, widths, constant_values=pad_value)  # [B, nb*window, ...]
    num_blocks = (length + pad) // window
    return ops.reshape(x, (ops.shape(x)[0], num_blocks, window, *x.shape[2:]))  # [B, nb, r, ...]


def _neighbours(x, offsets, pad_value=0):
    """[B, nb, r, ...] -> [B, nb, len(offsets)·r, ...]: block n + o for each offset o.

    Blocks before the first / after the last are `pad_value` (zeros, False for masks).
    """
    before, after = max(0, -min(offsets)), max(0, max(offsets))
    num_blocks = x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]
    widths = [[0, 0], [before, after]] + [[0, 0]] * (len(x.shape) - 2)
    padded = ops.pad(x, widths, constant_values=pad_value)  # [B, before+nb+after, r, ...]
    parts = [padded[:, before + o : before + o + num_blocks] for o in offsets]  # [B, nb, r, ...]
    return ops.concatenate(parts, axis=2)  # [B, nb, W, ...]


@keras.saving.register_keras_serializable(package="tfblocks")
class LocalMultiHeadAttention(MultiHeadAttention):
    """Restricted (local) self-attention over blocks of `window` positions, t2t style.

    A `MultiHeadAttention` whose queries see only nearby blocks (see the module
    docstring for the exact windows): causal calls follow t2t's
    `masked_local_attention_1d` (own block and the previous one), non-causal calls
    `local_attention_1d` with `filter_width = block_length` in one of two readings.
    Cost O(n·r), not O(n²). Query and value must have the same length;
    `attention_mask` is not supported, and the returned scores are blocked:
    `[B, H, ceil(T / r), r, W]` with W = 2r (causal) or 3r. With a cache (incremental
    decoding, causal) the window is applied as a mask over the cache.

    Args:
        num_heads: number of attention heads.
        window: block length r.
        non_causal_window: `"centered"` (previous, own and next block) or `"t2t"`
            (two previous blocks and the own one, as t2t's code runs).
        **kwargs: the other `MultiHeadAttention` arguments (`key_dim`, `dropout`,
            `use_bias`, ...) and base layer arguments.

    Example:

    >>> import numpy as np
    >>> local = LocalMultiHeadAttention(num_heads=2, window=4)
    >>> x = np.random.rand(1, 10, 8).astype("float32")
    >>> y, scores = local(x, x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((1, 10, 8), (1, 2, 3, 4, 8))
    """

    def __init__(self, num_heads, window, non_causal_window="centered", **kwargs):
        super().__init__(num_heads, **kwargs)
        self.window = _utils.check_positive_int("window", window)
        self.non_causal_window = _utils.check_choice(
            "non_causal_window", non_causal_window, NON_CAUSAL_WINDOWS
        )

    def _attention_mask(self, query, value, query_mask, value_mask, attention_mask, causal):
        if attention_mask is not None:
            raise ValueError(
                "`attention_mask` is not supported with local attention "
                f"(window={self.window}); use padding masks."
            )
        t_len, s_len = query.shape[1], value.shape[1]
        if t_len is not None and s_len is not None and t_len != s_len:
            raise ValueError(
                f"Local attention (window={self.window}) needs query and value of the "
                f"same length, got {t_len} and {s_len}."
            )
        r = self.window
        offsets = _OFFSETS["causal" if causal else self.non_causal_window]
        positions = _blocks(ops.expand_dims(ops.arange(_length(query), dtype="int32"), 0), r, -1)
        real = positions >= 0  # [1, nb, r]; False marks the padding of the last block
        if value_mask is not None:
            _utils.check_mask_shape("value_mask", value_mask, tuple(value.shape[:2]))
            real = ops.logical_and(_blocks(ops.cast(value_mask, "bool"), r, False), real)
        mask = ops.expand_dims(_neighbours(real, offsets, False), 2)  # [B|1, nb, 1, W]
        # Absolute positions of the queries and of the window's key slots.
        block_start = ops.arange(ops.shape(positions)[1], dtype="int32") * r  # [nb]
        slots = ops.convert_to_tensor([o * r + i for o in offsets for i in range(r)], "int32")
        key_pos = ops.expand_dims(block_start, 1) + ops.expand_dims(slots, 0)  # [nb, W]
        query_pos = ops.expand_dims(block_start, 1) + ops.arange(r, dtype="int32")  # [nb, r]
        allowed = _visible(
            ops.expand_dims(query_pos, 2), ops.expand_dims(key_pos, 1), r, offsets, causal
        )  # [nb, r, W]
        mask = ops.logical_and(mask, ops.expand_dims(allowed, 0))  # [B|1, nb, r, W]
        if query_mask is not None:
            _utils.check_mask_shape("query_mask", query_mask, tuple(query.shape[:2]))
            query_ok = _blocks(ops.cast(query_mask, "bool"), r, False)  # [B, nb, r]
            mask = ops.logical_and(mask, ops.expand_dims(query_ok, -1))  # [B, nb, r, W]
        return BlockedMask(offsets, mask)

    def _compute_attention(
        self, q, k, v, mask=None, training=None, return_scores=False, heads_first=False
    ):
        if not isinstance(mask, BlockedMask):
            # Cached decoding: dense attention over the cache, windowed by `_cache_mask`.
            return super()._compute_attention(q, k, v, mask, training, return_scores, heads_first)
        r, offsets = self.window, mask.offsets
        length = _length(q)
        qb, kb, vb = (_blocks(t, r) for t in (q, k, v))  # [B, nb, r, H, d]
        kw, vw = _neighbours(kb, offsets), _neighbours(vb, offsets)  # [B, nb, W, H, d]
        batch = ops.shape(qb)[0]
        num_blocks = qb.shape[1] if qb.shape[1] is not None else ops.shape(qb)[1]
        logits = ops.einsum("bnqhd,bnkhd->bhnqk", qb, kw)  # [B, H, nb, r, W]
        # Softmax in float32 even under mixed precision.
        weights = _utils.masked_softmax(logits, ops.expand_dims(mask.mask, 1))  # [B, H, nb, r, W]
        dropped = self.dropout_layer(ops.cast(weights, v.dtype), training=training)
        out = ops.einsum("bhnqk,bnkhd->bnqhd", dropped, vw)  # [B, nb, r, H, dv]
        out = ops.reshape(out, (batch, num_blocks * r, *out.shape[-2:]))  # [B, nb·r, H, dv]
        return out[:, :length], weights  # [B, L, H, dv]

    def _cache_mask(self, rows, cols):
        # Cached decoding is causal: masked_local_attention_1d's own + previous block.
        return _visible(rows, cols, self.window, _OFFSETS["causal"], causal=True)

    def get_config(self):
        config = super().get_config()
        config.update({"window": self.window, "non_causal_window": self.non_causal_window})
        return config
