"""Restricted (local) attention equals full attention under the block-band mask."""

import keras
import numpy as np
import pytest

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import MultiHeadAttention, TransformerBlock

RNG = np.random.default_rng(17)


def _np(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def band_mask(length, window, causal):
    """t2t's visibility: own block and the previous one (and the next one if not causal)."""
    i = np.arange(length)[:, None]
    j = np.arange(length)[None, :]
    diff = i // window - j // window
    if causal:
        return (diff >= 0) & (diff <= 1) & (j <= i)
    return np.abs(diff) <= 1


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("length", "window"), [(12, 4), (11, 4), (3, 5), (9, 1)])
def test_local_equals_full_attention_with_band_mask(causal, length, window):
    x = RNG.normal(size=(2, length, 8)).astype("float32")
    value_mask = np.ones((2, length), bool)
    value_mask[1, length - 2 :] = False
    local = MultiHeadAttention(num_heads=2, attention_window=window)
    got = _np(local(x, x, value_mask=value_mask, query_mask=value_mask, use_causal_mask=causal))
    ws = [
        _np(d.kernel).astype("float64")
        for d in (local.query_dense, local.key_dense, local.value_dense, local.output_dense)
    ]
    mask = band_mask(length, window, causal)[None] & value_mask[:, None, :]
    mask = mask & value_mask[:, :, None]
    want, _ = reference.attention(x, x, *ws, 2, mask)
    np.testing.assert_allclose(got[value_mask], want[value_mask], atol=1e-5)


def test_blocked_scores_shape_and_rows_sum_to_one():
    x = RNG.normal(size=(1, 10, 8)).astype("float32")
    _, causal_scores = MultiHeadAttention(2, attention_window=4)(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    _, scores = MultiHeadAttention(2, attention_window=4)(x, x, return_attention_scores=True)
    assert tuple(causal_scores.shape) == (1, 2, 3, 4, 8)
    assert tuple(scores.shape) == (1, 2, 3, 4, 12)
    np.testing.assert_allclose(_np(scores).sum(-1), 1.0, atol=1e-6)


def test_layer_harness_local(tmp_path):
    x = RNG.normal(size=(2, 10, 8)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "attention_window": 3},
        {"query": x, "value": x},
        expected_output_shape=(2, 10, 8),
        call_kwargs={"use_causal_mask": True},
        positional=["query", "value"],
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [True, False])
def test_local_block_caches_like_it_computes(norm_first):
    x = RNG.normal(size=(1, 9, 16)).astype("float32")
    block = TransformerBlock(4, 32, causal=True, attention_window=3, norm_first=norm_first)
    full = _np(block(x))
    cache = block.init_cache(1, 9)
    for i in range(9):
        out, cache = block(x[:, i : i + 1], cache=cache, cache_index=i)
        np.testing.assert_allclose(_np(out)[:, 0], full[:, i], atol=1e-5)
    # A window really restricts: full causal attention gives a different result.
    wide = TransformerBlock(4, 32, causal=True, norm_first=norm_first)
    wide(x)
    wide.set_weights(block.get_weights())
    assert not np.allclose(_np(wide(x))[:, 6:], full[:, 6:], atol=1e-4)
    np.testing.assert_allclose(_np(wide(x))[:, :3], full[:, :3], atol=1e-5)


def test_local_attention_errors():
    x = np.zeros((1, 4, 8), "float32")
    with pytest.raises(ValueError, match="attention_window=0"):
        MultiHeadAttention(2, attention_window=0)
    with pytest.raises(ValueError, match="attention_mask"):
        MultiHeadAttention(2, attention_window=2)(x, x, attention_mask=np.ones((1, 4, 4), bool))
    with pytest.raises(ValueError, match="same length, got 4 and 6"):
        MultiHeadAttention(2, attention_window=2)(x, np.zeros((1, 6, 8), "float32"))


def test_unknown_length_in_a_compiled_model():
    inp = keras.Input((None, 8))
    mha = MultiHeadAttention(2, attention_window=4)
    model = keras.Model(inp, mha(inp, inp, use_causal_mask=True))
    model.compile(loss="mse", jit_compile=True)
    for length in (7, 13):
        x = RNG.normal(size=(2, length, 8)).astype("float32")
        got = model.predict(x, verbose=0)
        np.testing.assert_allclose(got, _np(mha(x, x, use_causal_mask=True)), atol=1e-5)
