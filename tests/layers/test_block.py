"""Tests for tfblocks.TransformerBlock."""

import keras
import numpy as np
import pytest

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import TransformerBlock

RNG = np.random.default_rng(11)
B, T, S, D, H, F = 2, 5, 6, 16, 4, 32


def _np(x):
    return keras.ops.convert_to_numpy(x).astype("float64")


def _randomize_norms(block):
    """Random LayerNorm scales and offsets, and random biases where the block has them."""
    for ln in (block.self_attention_norm, block.cross_attention_norm, block.ffn_norm):
        if ln is not None:
            ln.gamma.assign(RNG.normal(1.0, 0.2, size=ln.gamma.shape).astype("float32"))
            ln.beta.assign(RNG.normal(0.0, 0.2, size=ln.beta.shape).astype("float32"))
    for weight in block.weights:
        if weight.path.endswith("/bias"):
            weight.assign(RNG.normal(0.0, 0.5, size=weight.shape).astype("float32"))


@pytest.mark.parametrize("norm_first", [True, False])
def test_layer_harness_encoder(tmp_path, norm_first):
    run_layer_test(
        TransformerBlock,
        {"num_heads": H, "filter_size": F, "norm_first": norm_first, "dropout": 0.1},
        RNG.normal(size=(B, T, D)).astype("float32"),
        expected_output_shape=(B, T, D),
        tmp_path=tmp_path,
        check_bad_inputs=True,
    )


@pytest.mark.parametrize("norm_first", [True, False])
def test_layer_harness_decoder(tmp_path, norm_first):
    run_layer_test(
        TransformerBlock,
        {
            "num_heads": H,
            "filter_size": F,
            "norm_first": norm_first,
            "causal": True,
            "cross_attention": True,
            "activation": "gelu",
            "attention_dropout": 0.1,
            "relu_dropout": 0.1,
        },
        {
            "x": RNG.normal(size=(B, T, D)).astype("float32"),
            "context": RNG.normal(size=(B, S, D)).astype("float32"),
        },
        expected_output_shape=(B, T, D),
        tmp_path=tmp_path,
        check_bad_inputs=True,
    )


def test_sublayer_names_and_types():
    dec = TransformerBlock(H, F, cross_attention=True)
    enc = TransformerBlock(H, F)
    dec(np.zeros((1, 2, D), "float32"), context=np.zeros((1, 3, D), "float32"))
    names = {layer.name for layer in dec._layers}
    assert {
        "self_attention",
        "self_attention_norm",
        "cross_attention",
        "cross_attention_norm",
        "ffn",
        "ffn_norm",
    } <= names
    assert enc.cross_attention is None and enc.cross_attention_norm is None
    assert dec.get_config()["cross_attention"] is True
    assert enc.get_config()["cross_attention"] is False
    assert dec.self_attention_norm.epsilon == 1e-6


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("decoder", [False, True])
def test_matches_numpy_reference(norm_first, decoder):
    block = TransformerBlock(H, F, norm_first=norm_first, causal=decoder, cross_attention=decoder)
    x = RNG.normal(size=(B, T, D)).astype("float32")
    ctx = RNG.normal(size=(B, S, D)).astype("float32") if decoder else None
    mask = np.ones((B, T), bool)
    mask[1, 3:] = False
    ctx_mask = np.ones((B, S), bool)
    ctx_mask[0, 4:] = False
    kwargs = {"context": ctx, "context_padding_mask": ctx_mask} if decoder else {}
    block(x, padding_mask=mask, **kwargs)
    _randomize_norms(block)
    got = _np(block(x, padding_mask=mask, **kwargs))
    want = reference.transformer_block(
        block, x.astype("float64"), ctx, mask, ctx_mask if decoder else None
    )
    np.testing.assert_allclose(got[mask], want[mask], atol=2e-5, rtol=1e-5)


MARIAN_OPTIONS = {
    "activation": "swish",
    "use_bias": True,
    "ffn_use_bias": True,
    "epsilon": 1e-5,
    "norm_first": False,
}


@pytest.mark.parametrize(
    "options",
    [
        MARIAN_OPTIONS,
        {"activation": "gelu", "use_bias": True, "ffn_use_bias": False, "epsilon": 1e-3},
        {"activation": "silu", "use_bias": False, "ffn_use_bias": False, "norm_first": True},
    ],
)
@pytest.mark.parametrize("decoder", [False, True])
def test_architecture_options_match_numpy_reference(options, decoder):
    block = TransformerBlock(H, F, causal=decoder, cross_attention=decoder, **options)
    x = RNG.normal(size=(B, T, D)).astype("float32")
    ctx = RNG.normal(size=(B, S, D)).astype("float32") if decoder else None
    mask = np.ones((B, T), bool)
    mask[1, 3:] = False
    kwargs = {"context": ctx} if decoder else {}
    block(x, padding_mask=mask, **kwargs)
    _randomize_norms(block)
    has_bias = {w.path.split("/")[-2]: True for w in block.weights if w.path.endswith("/bias")}
    assert ("query_dense" in has_bias) == options["use_bias"]
    assert ("filter_dense" in has_bias) == options["ffn_use_bias"]
    assert block.ffn_norm.epsilon == options.get("epsilon", 1e-6)
    got = _np(block(x, padding_mask=mask, **kwargs))
    want = reference.transformer_block(block, x.astype("float64"), ctx, mask)
    np.testing.assert_allclose(got[mask], want[mask], atol=2e-5, rtol=1e-5)


def test_layer_harness_marian_options(tmp_path):
    run_layer_test(
        TransformerBlock,
        {"num_heads": H, "filter_size": F, "causal": True, "cross_attention": True}
        | MARIAN_OPTIONS,
        {
            "x": RNG.normal(size=(B, T, D)).astype("float32"),
            "context": RNG.normal(size=(B, S, D)).astype("float32"),
        },
        expected_output_shape=(B, T, D),
        tmp_path=tmp_path,
        # Softmax ignores a constant added to every logit of a row: no gradient on b_k.
        zero_gradient_weights=("key_dense/bias",),
    )


@pytest.mark.parametrize("options", [{}, MARIAN_OPTIONS])
@pytest.mark.parametrize("norm_first", [True, False])
def test_appended_padding_leaves_real_outputs_unchanged(norm_first, options):
    block = TransformerBlock(H, F, **{"norm_first": norm_first, **options})
    x = RNG.normal(size=(B, T, D)).astype("float32")
    base = _np(block(x))
    padded = np.concatenate([x, RNG.normal(size=(B, 3, D)).astype("float32")], axis=1)
    mask = np.array([[True] * T + [False] * 3] * B)
    out = _np(block(padded, padding_mask=mask))
    np.testing.assert_allclose(out[:, :T], base, atol=1e-5)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("norm_first", [True, False])
def test_causal_block_ignores_the_future(norm_first):
    block = TransformerBlock(H, F, norm_first=norm_first, causal=True)
    x = RNG.normal(size=(1, T, D)).astype("float32")
    base = _np(block(x))
    for t in range(T - 1):
        changed = x.copy()
        changed[0, t + 1 :] = RNG.normal(size=(T - t - 1, D))
        out = _np(block(changed))
        np.testing.assert_allclose(out[0, : t + 1], base[0, : t + 1], atol=1e-5)
        assert not np.allclose(out[0, t + 1 :], base[0, t + 1 :])


@pytest.mark.parametrize("norm_first", [True, False])
def test_cross_attention_ignores_padded_context(norm_first):
    block = TransformerBlock(H, F, norm_first=norm_first, causal=True, cross_attention=True)
    x = RNG.normal(size=(B, T, D)).astype("float32")
    ctx = RNG.normal(size=(B, S, D)).astype("float32")
    ctx_mask = np.array([[True] * 4 + [False] * 2] * B)
    base = _np(block(x, context=ctx, context_padding_mask=ctx_mask))
    noisy = ctx.copy()
    noisy[:, 4:] = RNG.normal(size=(B, 2, D)) * 10
    out = _np(block(x, context=noisy, context_padding_mask=ctx_mask))
    np.testing.assert_allclose(out, base, atol=1e-5)
    np.testing.assert_allclose(_np(block(x, context=ctx[:, :4])), base, atol=1e-5)


def test_implicit_masks_from_embeddings_flow_through():
    ids = np.array([[4, 5, 6, 0, 0], [7, 8, 9, 3, 2]])
    ctx_ids = np.array([[4, 5, 0], [1, 2, 3]])
    emb = keras.layers.Embedding(10, D, mask_zero=True)
    dec = TransformerBlock(H, F, causal=True, cross_attention=True)
    src, tgt = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    ctx = emb(src)
    out = dec(emb(tgt), context=ctx)
    assert out._keras_mask is not None
    model = keras.Model([src, tgt], out)
    got = _np(model([ctx_ids, ids]))
    want = _np(
        dec(
            _np(emb(ids)).astype("float32"),
            context=_np(emb(ctx_ids)).astype("float32"),
            padding_mask=ids != 0,
            context_padding_mask=ctx_ids != 0,
        )
    )
    np.testing.assert_allclose(got[ids != 0], want[ids != 0], atol=1e-5)


def test_explicit_padding_mask_wins_over_implicit():
    x = keras.ops.convert_to_tensor(RNG.normal(size=(1, 4, D)).astype("float32"))
    x._keras_mask = keras.ops.convert_to_tensor(np.array([[True, True, False, False]]))
    block = TransformerBlock(H, F)
    explicit = np.array([[True, True, True, True]])
    got = _np(block(x, padding_mask=explicit))
    want = _np(block(keras.ops.convert_to_numpy(x)))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_output_carries_the_mask_on():
    inp = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(10, D, mask_zero=True)(inp)
    h = TransformerBlock(H, F)(h)
    h = TransformerBlock(H, F, norm_first=False)(h)
    assert h._keras_mask is not None
    model = keras.Model(inp, h)
    out = model(np.array([[1, 2, 0]]))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(out._keras_mask), [[True, True, False]]
    )


def test_parameter_count_of_base_block():
    block = TransformerBlock(num_heads=8, filter_size=2048)
    block.build((None, None, 512))
    attention = 4 * 512 * 512
    ffn = 2 * 512 * 2048 + 2048 + 512
    norms = 2 * 2 * 512
    assert block.count_params() == attention + ffn + norms


def test_errors():
    x = np.zeros((2, 3, D), "float32")
    ctx = np.zeros((2, 4, D), "float32")
    with pytest.raises(ValueError, match=r"\(16\).*num_heads=3"):
        TransformerBlock(num_heads=3, filter_size=8)(x)
    with pytest.raises(ValueError, match="context=None"):
        TransformerBlock(H, F, cross_attention=True)(x)
    with pytest.raises(ValueError, match=r"cross_attention=False.*context"):
        TransformerBlock(H, F)(x, context=ctx)
    with pytest.raises(ValueError, match=r"`padding_mask`.*padding_mask\.shape=\(2, 5\)"):
        TransformerBlock(H, F)(x, padding_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match=r"context_padding_mask\.shape=\(2, 3\)"):
        TransformerBlock(H, F, cross_attention=True)(
            x, context=ctx, context_padding_mask=np.ones((2, 3), bool)
        )
    for kwargs, words in [
        ({"dropout": -0.5}, "dropout=-0.5"),
        ({"attention_dropout": 1.0}, r"attention_dropout=1\.0"),
        ({"relu_dropout": 3}, "relu_dropout=3"),
        ({"epsilon": 0}, "epsilon=0"),
        ({"activation": "tanh"}, "activation='tanh'"),
        ({"ffn_use_bias": 1}, "ffn_use_bias=1"),
    ]:
        with pytest.raises(ValueError, match=words):
            TransformerBlock(H, F, **kwargs)


def test_bad_input_shapes_name_the_argument():
    x = np.zeros((2, 3, D), "float32")
    ctx = np.zeros((2, 4, D), "float32")
    block = TransformerBlock(H, F, causal=True, cross_attention=True)
    block(x, context=ctx)
    with pytest.raises(ValueError, match=r"`x` must have rank 3.*x\.shape=\(3, 16\)"):
        block(x[0], context=ctx)
    with pytest.raises(ValueError, match=r"`context` must have rank 3.*\(2, 4, 16, 1\)"):
        block(x, context=ctx[..., None])
    with pytest.raises(ValueError, match=r"batch size.*x\.shape=\(2, 3, 16\).*\(3, 4, 16\)"):
        block(x, context=np.zeros((3, 4, D), "float32"))
    with pytest.raises(ValueError, match=r"`x` must have last dimension 16.*\(2, 3, 8\)"):
        block(np.zeros((2, 3, 8), "float32"), context=ctx)
    cache = block.init_cache(2, 4, context=ctx)
    with pytest.raises(ValueError, match=r"`x` must have rank 3.*x\.shape=\(2, 16\)"):
        block(x[:, 0], cache=cache, cache_index=0)
