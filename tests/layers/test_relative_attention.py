"""Relative position attention (Shaw et al. 2018, t2t `dot_product_attention_relative`):
the formula against NumPy, cached == full pass, padding invariance, the layer harness."""

import keras
import numpy as np
import pytest

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import TransformerBlock
from tfblocks.layers import RelativeMultiHeadAttention
from tfblocks.layers.relative_attention import relative_positions

RNG = np.random.default_rng(23)


def _np(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float64"))


def relative_reference(x, layer, mask, k):
    """The formula in float64, written out per head with explicit loops over the tables."""
    wq, wk, wv, wo = (
        _np(d.kernel) for d in (layer.query_dense, layer.key_dense, layer.value_dense,
                                 layer.output_dense)
    )  # fmt: skip
    table_k, table_v = _np(layer.relative_keys), _np(layer.relative_values)
    heads = layer.num_heads
    b, t, _ = x.shape
    q, kk, v = x @ wq, x @ wk, x @ wv
    depth = q.shape[-1] // heads
    q = q.reshape(b, t, heads, depth) / np.sqrt(depth)
    kk, v = kk.reshape(b, t, heads, depth), v.reshape(b, t, heads, depth)
    out = np.zeros((b, t, heads, depth))
    for i in range(t):
        rows = [min(max(j - i, -k), k) + k for j in range(t)]  # clip(j − i, −k, k) + k
        a_k, a_v = table_k[rows], table_v[rows]  # [t, depth]
        logits = np.einsum("bhd,bjhd->bhj", q[:, i], kk) + np.einsum("bhd,jd->bhj", q[:, i], a_k)
        allowed = np.broadcast_to(mask[:, i][:, None, :], logits.shape)
        logits = np.where(allowed, logits, -np.inf)
        logits = np.where(allowed.any(-1, keepdims=True), logits, 0.0)
        w = reference.softmax(logits)  # [b, h, t]
        out[:, i] = np.einsum("bhj,bjhd->bhd", w, v) + np.einsum("bhj,jd->bhd", w, a_v)
    return out.reshape(b, t, heads * depth) @ wo


def test_relative_positions_are_clipped_key_minus_query():
    rows = relative_positions(np.arange(4), np.arange(5), 2).numpy()
    want = np.clip(np.arange(5)[None] - np.arange(4)[:, None], -2, 2) + 2
    np.testing.assert_array_equal(rows, want)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_matches_the_numpy_formula(causal):
    k = 3
    x = RNG.normal(size=(2, 9, 8)).astype("float32")
    padding = np.ones((2, 9), bool)
    padding[1, 6:] = False
    layer = RelativeMultiHeadAttention(num_heads=2, max_relative_position=k)
    got = _np(layer(x, x, query_mask=padding, value_mask=padding, use_causal_mask=causal))
    mask = padding[:, None, :] & padding[:, :, None]
    if causal:
        mask = mask & np.tril(np.ones((9, 9), bool))[None]
    want = relative_reference(x.astype("float64"), layer, mask, k)
    np.testing.assert_allclose(got[padding], want[padding], atol=1e-5)
    # The tables matter: the same layer without them is plain attention, and differs.
    plain, _ = reference.attention(
        x, x, *(_np(d.kernel) for d in (layer.query_dense, layer.key_dense, layer.value_dense,
                                         layer.output_dense)), 2, mask
    )  # fmt: skip
    assert np.abs(plain[padding] - want[padding]).max() > 1e-3


def test_cached_decoding_equals_the_full_pass():
    x = RNG.normal(size=(2, 7, 8)).astype("float32")
    layer = RelativeMultiHeadAttention(num_heads=2, max_relative_position=2)
    full = _np(layer(x, x, use_causal_mask=True))
    cache = layer.init_cache(batch_size=2, max_length=10)  # longer than the sequence
    steps = []
    for i in range(7):
        out, cache = layer(x[:, i : i + 1], cache=cache, cache_index=i)
        steps.append(_np(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    # Two positions at a time as well.
    cache = layer.init_cache(batch_size=2, max_length=8)
    pieces = []
    for i in range(0, 6, 2):
        out, cache = layer(x[:, i : i + 2], cache=cache, cache_index=i)
        pieces.append(_np(out))
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full[:, :6], atol=1e-5)


def test_padding_does_not_change_the_real_positions():
    x = RNG.normal(size=(1, 5, 8)).astype("float32")
    padded = np.concatenate([x, RNG.normal(size=(1, 3, 8)).astype("float32")], axis=1)
    mask = np.array([[True] * 5 + [False] * 3])
    layer = RelativeMultiHeadAttention(num_heads=2, max_relative_position=4)
    alone = _np(layer(x, x, use_causal_mask=True))
    with_padding = _np(layer(padded, padded, query_mask=mask, value_mask=mask))
    bidirectional = _np(layer(x, x))
    np.testing.assert_allclose(with_padding[:, :5], bidirectional, atol=1e-5)
    causal_padded = _np(layer(padded, padded, value_mask=mask, use_causal_mask=True))
    np.testing.assert_allclose(causal_padded[:, :5], alone, atol=1e-5)


def test_a_precomputed_cache_is_refused():
    x = RNG.normal(size=(1, 4, 8)).astype("float32")
    layer = RelativeMultiHeadAttention(num_heads=2, max_relative_position=2)
    layer(x, x)
    with pytest.raises(ValueError, match="positions"):
        layer(x, cache=layer.compute_cache(x))


def test_layer_harness(tmp_path):
    x = RNG.normal(size=(2, 6, 8)).astype("float32")
    run_layer_test(
        RelativeMultiHeadAttention,
        {"num_heads": 2, "max_relative_position": 3, "dropout": 0.1},
        {"query": x, "value": x},
        expected_output_shape=(2, 6, 8),
        call_kwargs={"use_causal_mask": True},
        positional=["query", "value"],
        tmp_path=tmp_path,
        check_bad_inputs=True,
    )


def test_block_arguments():
    block = TransformerBlock(num_heads=2, filter_size=16, max_relative_position=4, causal=True)
    x = RNG.normal(size=(1, 5, 8)).astype("float32")
    assert block(x).shape == (1, 5, 8)
    assert isinstance(block.self_attention, RelativeMultiHeadAttention)
    assert TransformerBlock.from_config(block.get_config()).max_relative_position == 4
    with pytest.raises(ValueError, match="attention_window=2"):
        TransformerBlock(2, 16, max_relative_position=4, attention_window=2)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=f"max_relative_position={bad}"):
            RelativeMultiHeadAttention(num_heads=2, max_relative_position=bad)
