"""Blocked local attention (t2t `masked_local_attention_1d` / `local_attention_1d`).

The sequence is cut into blocks of `window` positions. A query block attends to its
own block and the previous one (causal, t2t `masked_local_attention_1d`), or to the
previous, its own and the next block (non-causal, t2t `local_attention_1d` with
`filter_width = block_length`). Logits are `[B, H, n_blocks, window, 2|3·window]`, so
time and memory grow linearly with the length (O(n·r·d)) instead of quadratically.
"""

from keras import ops

from tfblocks.layers import _utils


def _length(x):
    """The static length of axis 1 when known (keeps shapes static), else a tensor."""
    return x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]


def _blocks(x, window, pad_value=0):
    # [B, L, ...] -> pad to a multiple of window -> [B, nb, window, ...]
    length = _length(x)
    pad = (window - length % window) % window
    widths = [[0, 0], [0, pad]] + [[0, 0]] * (len(x.shape) - 2)
    x = ops.pad(x, widths, constant_values=pad_value)
    num_blocks = (length + pad) // window
    return ops.reshape(x, (ops.shape(x)[0], num_blocks, window, *x.shape[2:]))


def _neighbours(x, causal):
    """Concatenates each block with the previous (and next) one on axis 2.

    [B, nb, r, ...] -> [B, nb, 2r or 3r, ...]; the missing neighbours of the first and
    last blocks are zeros (False for masks).
    """
    empty = ops.zeros_like(x[:, :1])  # [B, 1, r, ...]
    previous = ops.concatenate([empty, x[:, :-1]], axis=1)
    parts = [previous, x]
    if not causal:
        parts.append(ops.concatenate([x[:, 1:], empty], axis=1))
    return ops.concatenate(parts, axis=2)


def local_attention(q, k, v, window, causal, query_mask=None, value_mask=None, dropout=None):
    """Blocked local attention on split heads.

    Args:
        q: `[B, L, H, dk]` queries, already scaled.
        k: `[B, L, H, dk]` keys.
        v: `[B, L, H, dv]` values.
        window: block length r.
        causal: forbid attending to later positions.
        query_mask: optional boolean `[B, L]`.
        value_mask: optional boolean `[B, L]`.
        dropout: optional callable applied to the attention weights.

    Returns:
        `(output [B, L, H, dv], weights [B, H, nb, r, 2r|3r])`; weights are float32.
    """
    length = _length(q)
    qb, kb, vb = (_blocks(t, window) for t in (q, k, v))  # [B, nb, r, H, d]
    positions = _blocks(ops.expand_dims(ops.arange(length, dtype="int32"), 0), window, -1)
    positions = positions[0]  # [nb, r]; -1 marks the padding added to fill the last block
    real = positions >= 0
    if value_mask is not None:
        key_ok = ops.logical_and(_blocks(ops.cast(value_mask, "bool"), window, False), real)
    else:
        key_ok = ops.expand_dims(real, 0)  # [1, nb, r]
    key_ok = _neighbours(key_ok, causal)  # [B|1, nb, W]
    mask = ops.expand_dims(key_ok, 2)  # [B|1, nb, 1, W]
    if causal:
        # Absolute positions of the window slots: previous block, then own block.
        block_start = ops.arange(ops.shape(positions)[0], dtype="int32") * window  # [nb]
        slots = ops.arange(2 * window, dtype="int32") - window  # [2r]
        key_pos = ops.expand_dims(block_start, 1) + ops.expand_dims(slots, 0)  # [nb, 2r]
        query_pos = ops.expand_dims(block_start, 1) + ops.arange(window, dtype="int32")  # [nb, r]
        allowed = ops.expand_dims(key_pos, 1) <= ops.expand_dims(query_pos, 2)  # [nb, r, 2r]
        mask = ops.logical_and(mask, ops.expand_dims(allowed, 0))  # [B|1, nb, r, 2r]
    if query_mask is not None:
        query_ok = _blocks(ops.cast(query_mask, "bool"), window, False)  # [B, nb, r]
        mask = ops.logical_and(mask, ops.expand_dims(query_ok, -1))
    kw, vw = _neighbours(kb, causal), _neighbours(vb, causal)  # [B, nb, W, H, d]
    logits = ops.einsum("bnqhd,bnkhd->bhnqk", qb, kw)  # [B, H, nb, r, W]
    weights = _utils.masked_softmax(logits, ops.expand_dims(mask, 1))  # [B, H, nb, r, W]
    dropped = ops.cast(weights, v.dtype)
    if dropout is not None:
        dropped = dropout(dropped)
    out = ops.einsum("bhnqk,bnkhd->bnqhd", dropped, vw)  # [B, nb, r, H, dv]
    num_blocks = ops.shape(out)[1] if out.shape[1] is None else out.shape[1]
    out = ops.reshape(out, (ops.shape(out)[0], num_blocks * window, *out.shape[3:]))
    return out[:, :length], weights  # [B, L, H, dv]
