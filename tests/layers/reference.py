"""Small NumPy references of the formulas the layers implement (float64)."""

import math

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention(query, value, wq, wk, wv, wo, num_heads, mask=None, key=None, biases=None):
    """softmax(Q Kᵀ / √d_k) V per head, heads concatenated, times W_O.

    `mask` is boolean, broadcastable to [B, T, S], True = may attend. Fully masked
    rows give the uniform average (the layer's documented behaviour). `biases`: optional
    (b_q, b_k, b_v, b_o) added after each projection (q is scaled after its bias).
    Returns (output [B, T, out], weights [B, H, T, S]).
    """
    key = value if key is None else key
    bq, bk, bv, bo = biases if biases is not None else (0.0, 0.0, 0.0, 0.0)
    q, k, v = query @ wq + bq, key @ wk + bk, value @ wv + bv
    b, t, _ = q.shape
    s = k.shape[1]
    dk, dv = q.shape[-1] // num_heads, v.shape[-1] // num_heads
    q = q.reshape(b, t, num_heads, dk).transpose(0, 2, 1, 3)
    k = k.reshape(b, s, num_heads, dk).transpose(0, 2, 1, 3)
    v = v.reshape(b, s, num_heads, dv).transpose(0, 2, 1, 3)
    logits = (q / np.sqrt(dk)) @ k.transpose(0, 1, 3, 2)  # [B, H, T, S]
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, bool)[:, None], logits.shape)
        logits = np.where(mask, logits, -np.inf)
        all_masked = ~mask.any(-1, keepdims=True)
        logits = np.where(all_masked, 0.0, logits)
    weights = softmax(logits)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, num_heads * dv)
    return out @ wo + bo, weights


def layer_norm(x, gamma, beta, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def activation(name, h):
    """The FFN activations: relu, exact gelu, swish (= silu) `h · sigmoid(h)`."""
    if name == "relu":
        return np.maximum(0.0, h)
    if name == "gelu":
        return 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))
    return h / (1 + np.exp(-h))


def half_depth_signal(length, channels, start_index=0):
    """Hugging Face Marian's sinusoidal table (even `channels`), written from its rule:
    column j holds `p / 10000^(2·(j // 2) / d)`; the sines of the even columns fill the
    first half, the cosines of the odd columns the second half."""
    angles = np.array(
        [
            [p / np.power(10000.0, 2 * (j // 2) / channels) for j in range(channels)]
            for p in range(start_index, start_index + length)
        ]
    )
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=-1)[None]


def timing_signal(length, channels, min_timescale=1.0, max_timescale=1e4, start_index=0):
    """t2t get_timing_signal_1d written out position by position, channel by channel."""
    half = channels // 2
    out = np.zeros((1, length, channels))
    for p in range(length):
        pos = p + start_index
        for i in range(half):
            inv = min_timescale * np.exp(
                -i * np.log(max_timescale / min_timescale) / max(half - 1, 1)
            )
            out[0, p, i] = np.sin(pos * inv)
            out[0, p, half + i] = np.cos(pos * inv)
    return out


def t2t_local_1d_visibility(length, block_length, filter_width):
    """[length, length] booleans: which keys t2t's `local_attention_1d` code lets a query see.

    Follows the index arithmetic of that function (for `filter_width % block_length == 0`):
    keys are zero-padded to a multiple of `block_length`, then by `filter_width +
    block_length` on each side; query block n attends to padded key blocks n .. n + 2·f
    with f = filter_width // block_length. Zero (padding) keys are masked out.
    """
    assert filter_width % block_length == 0, "only whole blocks are transcribed"
    blocks = -(-length // block_length)
    pad = filter_width + block_length
    # Key position held by each slot of the padded key sequence; -1 = padding.
    slots = np.full(pad + blocks * block_length + pad, -1)
    slots[pad : pad + length] = np.arange(length)
    slot_blocks = slots.reshape(-1, block_length)
    seen = np.zeros((length, length), bool)
    for n in range(blocks):
        keys = slot_blocks[n : n + 2 * (filter_width // block_length) + 1].ravel()
        keys = keys[keys >= 0]
        rows = np.arange(n * block_length, min((n + 1) * block_length, length))
        seen[np.ix_(rows, keys)] = True
    return seen


def _weight(w):
    return np.asarray(w, "float64")


def _bias(dense):
    return 0.0 if dense.bias is None else _weight(dense.bias)


def _attention(x, ctx, mha, mask):
    denses = (mha.query_dense, mha.key_dense, mha.value_dense, mha.output_dense)
    ws = [_weight(d.kernel) for d in denses]
    biases = [_bias(d) for d in denses]
    return attention(x, ctx, *ws, mha.num_heads, mask, biases=biases)[0]


def _norm(x, ln):
    return layer_norm(x, _weight(ln.gamma), _weight(ln.beta), eps=ln.epsilon)


def _ffn(x, ffn):
    h = x @ _weight(ffn.filter_dense.kernel) + _bias(ffn.filter_dense)
    h = activation(ffn.activation, h)
    return h @ _weight(ffn.output_dense.kernel) + _bias(ffn.output_dense)


def transformer_block(block, x, ctx=None, mask=None, ctx_mask=None):
    """A built `TransformerBlock` written out with these references and its weights (no
    dropout); `mask` / `ctx_mask`: boolean `[B, T]` / `[B, S]` padding masks."""
    t = x.shape[1]
    self_mask = np.ones((x.shape[0], t, t), bool)
    if mask is not None:
        self_mask &= mask[:, :, None] & mask[:, None, :]
    if block.causal:
        self_mask &= np.tril(np.ones((t, t), bool))[None]

    def sub(h, norm, fn):
        if block.norm_first:
            return h + fn(_norm(h, norm))
        return _norm(h + fn(h), norm)

    x = sub(
        x, block.self_attention_norm, lambda h: _attention(h, h, block.self_attention, self_mask)
    )
    if block.cross_attention:
        cross_mask = np.ones((x.shape[0], t, ctx.shape[1]), bool)
        if mask is not None:
            cross_mask &= mask[:, :, None]
        if ctx_mask is not None:
            cross_mask &= ctx_mask[:, None, :]
        x = sub(
            x,
            block.cross_attention_norm,
            lambda h: _attention(h, ctx, block.cross_attention, cross_mask),
        )
    return sub(x, block.ffn_norm, lambda h: _ffn(h, block.ffn))
