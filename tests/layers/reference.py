"""Small NumPy references of the formulas the layers implement (float64)."""

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention(query, value, wq, wk, wv, wo, num_heads, mask=None, key=None):
    """softmax(Q Kᵀ / √d_k) V per head, heads concatenated, times W_O.

    `mask` is boolean, broadcastable to [B, T, S], True = may attend. Fully masked
    rows give the uniform average (the layer's documented behaviour).
    Returns (output [B, T, out], weights [B, H, T, S]).
    """
    key = value if key is None else key
    q, k, v = query @ wq, key @ wk, value @ wv
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
    return out @ wo, weights


def layer_norm(x, gamma, beta, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


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
