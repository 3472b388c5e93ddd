"""Cached (incremental) attention and blocks equal the uncached computation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfblocks import MultiHeadAttention, TransformerBlock

RNG = np.random.default_rng(5)


def _np(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def test_cached_self_attention_equals_causal_attention():
    x = RNG.normal(size=(2, 6, 16)).astype("float32")
    mha = MultiHeadAttention(num_heads=4)
    full = _np(mha(x, x, use_causal_mask=True))
    cache = mha.init_cache(2, 8)
    assert tuple(cache["key"].shape) == (2, 4, 8, 4)  # [B, H, S_max, depth]
    for i in range(6):
        out, cache = mha(x[:, i : i + 1], cache=cache, cache_index=i)
        np.testing.assert_allclose(_np(out)[:, 0], full[:, i], atol=1e-5)
    # The cache holds exactly the projected keys and values of the six positions, heads first.
    for name, dense in (("key", mha.key_dense), ("value", mha.value_dense)):
        want = _np(dense(x)).reshape(2, 6, 4, 4).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(_np(cache[name])[:, :, :6], want, atol=1e-5)
        np.testing.assert_array_equal(_np(cache[name])[:, :, 6:], 0.0)


def test_cached_chunk_of_several_positions():
    x = RNG.normal(size=(1, 5, 8)).astype("float32")
    mha = MultiHeadAttention(num_heads=2)
    full = _np(mha(x, x, use_causal_mask=True))
    cache = mha.init_cache(1, 5)
    first, cache = mha(x[:, :3], cache=cache, cache_index=0)
    second, _ = mha(x[:, 3:], cache=cache, cache_index=3)
    np.testing.assert_allclose(np.concatenate([_np(first), _np(second)], 1), full, atol=1e-5)


def test_static_cache_equals_cross_attention_with_padding():
    q = RNG.normal(size=(2, 3, 8)).astype("float32")
    ctx = RNG.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[True] * 5, [True] * 2 + [False] * 3])
    mha = MultiHeadAttention(num_heads=2)
    want = _np(mha(q, ctx, value_mask=mask))
    cache = mha.compute_cache(ctx)
    assert tuple(cache["value"].shape) == (2, 2, 5, 4)  # [B, H, S, depth]
    got, same = mha(q, cache=cache, value_mask=mask)
    np.testing.assert_allclose(_np(got), want, atol=1e-5)
    np.testing.assert_array_equal(_np(same["key"]), _np(cache["key"]))


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_cached_decoder_block_equals_full_block(norm_first, dtype):
    tol = {"float32": 1e-5, "mixed_float16": 2e-2, "mixed_bfloat16": 1e-1}[dtype]
    x = RNG.normal(size=(2, 7, 16)).astype("float32")
    ctx = RNG.normal(size=(2, 4, 16)).astype("float32")
    ctx_mask = np.array([[True] * 4, [True] * 3 + [False]])
    block = TransformerBlock(4, 32, norm_first=norm_first, causal=True, cross_attention=True,
                             dtype=dtype)  # fmt: skip
    full = _np(block(x, context=ctx, context_padding_mask=ctx_mask))
    cache = block.init_cache(2, 7, context=ctx)

    @tf.function(jit_compile=True)
    def step(x_i, cache, i):
        return block(x_i, cache=cache, cache_index=i, context_padding_mask=ctx_mask)

    for i in range(7):
        out, cache = step(x[:, i : i + 1], cache, tf.constant(i))
        assert keras.backend.standardize_dtype(out.dtype) == block.compute_dtype
        np.testing.assert_allclose(_np(out)[:, 0], full[:, i], atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_cached_block_with_marian_options_equals_full_block(dtype):
    """Biases on every projection, swish, epsilon 1e-5, Post-LN: cached equals uncached."""
    tol = {"float32": 1e-5, "mixed_float16": 2e-2, "mixed_bfloat16": 1e-1}[dtype]
    x = RNG.normal(size=(2, 5, 16)).astype("float32")
    ctx = RNG.normal(size=(2, 4, 16)).astype("float32")
    ctx_mask = np.array([[True] * 4, [True] * 2 + [False] * 2])
    options = {"activation": "swish", "use_bias": True, "epsilon": 1e-5, "dtype": dtype}
    block = TransformerBlock(4, 32, norm_first=False, causal=True, cross_attention=True, **options)
    block(x, context=ctx)
    for weight in block.weights:
        if weight.path.endswith("/bias"):
            weight.assign(RNG.normal(0.0, 0.5, size=weight.shape).astype("float32"))
    full = _np(block(x, context=ctx, context_padding_mask=ctx_mask))
    cache = block.init_cache(2, 5, context=ctx)
    for i in range(5):
        out, cache = block(
            x[:, i : i + 1], cache=cache, cache_index=i, context_padding_mask=ctx_mask
        )
        np.testing.assert_allclose(_np(out)[:, 0], full[:, i], atol=tol, rtol=tol)


def test_cache_errors():
    x = np.zeros((1, 2, 8), "float32")
    mha = MultiHeadAttention(num_heads=2)
    with pytest.raises(ValueError, match="must be built"):
        mha(x, cache={"key": x, "value": x}, cache_index=0)
    mha(x, x)
    with pytest.raises(ValueError, match=r"cache=\['k', 'v'\]"):
        mha(x, cache={"k": x, "v": x}, cache_index=0)
    with pytest.raises(ValueError, match="value=None"):
        mha(x)
    block = TransformerBlock(2, 16, causal=True, cross_attention=True)
    with pytest.raises(ValueError, match="must be built"):
        block.init_cache(1, 4, context=x)
    block(x, context=x)
    with pytest.raises(ValueError, match="context=None"):
        block.init_cache(1, 4)
    with pytest.raises(ValueError, match="cache_index=None"):
        block(x, cache=block.init_cache(1, 4, context=x))
