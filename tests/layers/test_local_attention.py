"""Restricted (local) attention equals full attention under the block-band mask."""

import keras
import numpy as np
import pytest

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import TransformerBlock
from tfblocks.layers import LocalMultiHeadAttention

RNG = np.random.default_rng(17)


def _np(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def band_mask(length, window, causal, non_causal_window="centered"):
    """The documented windows, position by position: query block n = i // window sees
    key blocks {n-1, n} and j <= i (causal), {n-1, n, n+1} ("centered") or
    {n-2, n-1, n} ("t2t", t2t's local_attention_1d code with filter_width = block)."""
    i = np.arange(length)[:, None]
    j = np.arange(length)[None, :]
    diff = i // window - j // window  # query block minus key block
    if causal:
        return (diff >= 0) & (diff <= 1) & (j <= i)
    if non_causal_window == "t2t":
        return (diff >= 0) & (diff <= 2)
    return np.abs(diff) <= 1


CASES = [(True, "centered"), (False, "centered"), (False, "t2t")]


@pytest.mark.parametrize(("length", "window"), [(12, 4), (11, 4), (3, 5), (9, 1), (13, 3)])
def test_t2t_window_is_what_t2t_code_computes(length, window):
    # t2t pads filter_width + block_length on each side: two previous blocks + own.
    t2t = reference.t2t_local_1d_visibility(length, window, filter_width=window)
    np.testing.assert_array_equal(band_mask(length, window, False, "t2t"), t2t)
    assert length <= 2 * window or not np.array_equal(band_mask(length, window, False), t2t)


@pytest.mark.parametrize(("causal", "non_causal_window"), CASES)
@pytest.mark.parametrize(("length", "window"), [(12, 4), (11, 4), (3, 5), (9, 1), (13, 3)])
def test_local_equals_full_attention_with_band_mask(causal, non_causal_window, length, window):
    x = RNG.normal(size=(2, length, 8)).astype("float32")
    value_mask = np.ones((2, length), bool)
    value_mask[1, length - 2 :] = False
    local = LocalMultiHeadAttention(num_heads=2, window=window, non_causal_window=non_causal_window)
    got = _np(local(x, x, value_mask=value_mask, query_mask=value_mask, use_causal_mask=causal))
    ws = [
        _np(d.kernel).astype("float64")
        for d in (local.query_dense, local.key_dense, local.value_dense, local.output_dense)
    ]
    mask = band_mask(length, window, causal, non_causal_window)[None] & value_mask[:, None, :]
    mask = mask & value_mask[:, :, None]
    want, _ = reference.attention(x, x, *ws, 2, mask)
    np.testing.assert_allclose(got[value_mask], want[value_mask], atol=1e-5)


def test_blocked_scores_shape_and_rows_sum_to_one():
    x = RNG.normal(size=(1, 10, 8)).astype("float32")
    _, causal_scores = LocalMultiHeadAttention(2, window=4)(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    _, scores = LocalMultiHeadAttention(2, window=4)(x, x, return_attention_scores=True)
    assert tuple(causal_scores.shape) == (1, 2, 3, 4, 8)
    assert tuple(scores.shape) == (1, 2, 3, 4, 12)
    np.testing.assert_allclose(_np(scores).sum(-1), 1.0, atol=1e-6)


def test_t2t_window_sees_two_previous_blocks_not_the_next():
    # Block 2 (positions 6..8, window 3) under "t2t": key blocks 0, 1, 2; "centered": 1, 2, 3.
    x = RNG.normal(size=(1, 12, 8)).astype("float32")
    t2t = LocalMultiHeadAttention(2, window=3, non_causal_window="t2t")
    _, scores = t2t(x, x, return_attention_scores=True)
    # Block 0's slots for blocks -2 and -1 are empty: all its weight is on its own block.
    np.testing.assert_allclose(_np(scores)[0, :, 0, :, 6:].sum(-1), 1.0, atol=1e-6)
    changed = x.copy()
    changed[0, 9:] = RNG.normal(size=(3, 8))  # block 3 only
    before, after = _np(t2t(x, x)), _np(t2t(changed, changed))
    np.testing.assert_allclose(after[0, :9], before[0, :9], atol=1e-6)
    centered = LocalMultiHeadAttention(2, window=3)
    centered(x, x)
    centered.set_weights(t2t.get_weights())
    assert not np.allclose(_np(centered(changed, changed))[0, 6:9], _np(centered(x, x))[0, 6:9])


@pytest.mark.parametrize("non_causal_window", ["centered", "t2t"])
def test_layer_harness_local(tmp_path, non_causal_window):
    x = RNG.normal(size=(2, 10, 8)).astype("float32")
    run_layer_test(
        LocalMultiHeadAttention,
        {"num_heads": 2, "window": 3, "non_causal_window": non_causal_window, "dropout": 0.1},
        {"query": x, "value": x},
        expected_output_shape=(2, 10, 8),
        call_kwargs={"use_causal_mask": non_causal_window == "centered"},
        positional=["query", "value"],
        tmp_path=tmp_path,
        check_bad_inputs=True,
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


def test_t2t_window_in_a_block_round_trips(tmp_path):
    x = RNG.normal(size=(2, 9, 16)).astype("float32")
    block = TransformerBlock(4, 32, attention_window=3, non_causal_window="t2t")
    assert isinstance(block.self_attention, LocalMultiHeadAttention)
    assert block.self_attention.non_causal_window == "t2t"
    inp = keras.Input((9, 16))
    model = keras.Model(inp, block(inp))
    path = str(tmp_path / "local.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(_np(reloaded(x)), _np(model(x)), atol=1e-6)
    assert reloaded.layers[-1].self_attention.non_causal_window == "t2t"


def test_local_attention_errors():
    x = np.zeros((1, 4, 8), "float32")
    with pytest.raises(ValueError, match="window=0"):
        LocalMultiHeadAttention(2, window=0)
    with pytest.raises(ValueError, match="non_causal_window='left'"):
        LocalMultiHeadAttention(2, window=2, non_causal_window="left")
    with pytest.raises(ValueError, match="attention_mask"):
        LocalMultiHeadAttention(2, window=2)(x, x, attention_mask=np.ones((1, 4, 4), bool))
    with pytest.raises(ValueError, match="same length, got 4 and 6"):
        LocalMultiHeadAttention(2, window=2)(x, np.zeros((1, 6, 8), "float32"))


def test_unknown_length_in_a_compiled_model():
    inp = keras.Input((None, 8))
    mha = LocalMultiHeadAttention(2, window=4)
    model = keras.Model(inp, mha(inp, inp, use_causal_mask=True))
    model.compile(loss="mse", jit_compile=True)
    for length in (7, 13):
        x = RNG.normal(size=(2, length, 8)).astype("float32")
        got = model.predict(x, verbose=0)
        np.testing.assert_allclose(got, _np(mha(x, x, use_causal_mask=True)), atol=1e-5)
