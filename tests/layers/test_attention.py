"""Tests for tfblocks.MultiHeadAttention."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers import reference
from tests.layers.harness import run_layer_test
from tfblocks import MultiHeadAttention

RNG = np.random.default_rng(7)


def _weights(mha):
    return [
        keras.ops.convert_to_numpy(d.kernel).astype("float64")
        for d in (mha.query_dense, mha.key_dense, mha.value_dense, mha.output_dense)
    ]


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_layer_harness_self_attention(tmp_path):
    x = RNG.normal(size=(2, 5, 16)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 4, "dropout": 0.1},
        {"query": x, "value": x},
        expected_output_shape=(2, 5, 16),
        positional=["query", "value"],
        tmp_path=tmp_path,
        check_bad_inputs=True,
    )


def test_layer_harness_cross_attention_other_dims(tmp_path):
    q = RNG.normal(size=(2, 3, 12)).astype("float32")
    v = RNG.normal(size=(2, 6, 8)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 5, "value_dim": 3, "output_dim": 7, "use_bias": True},
        {"query": q, "value": v},
        expected_output_shape=(2, 3, 7),
        positional=["query", "value"],
        tmp_path=tmp_path,
        zero_gradient_weights=("key_dense/bias",),
        check_bad_inputs=True,
    )


def test_projection_shapes_follow_t2t():
    mha = MultiHeadAttention(num_heads=8)
    x = np.zeros((1, 3, 512), "float32")
    mha(x, x)
    assert isinstance(mha.query_dense, keras.layers.Dense)
    assert tuple(mha.query_dense.kernel.shape) == (512, 512)
    assert tuple(mha.output_dense.kernel.shape) == (512, 512)
    # No biases by default (t2t compute_qkv): 4 · 512² parameters.
    assert mha.count_params() == 4 * 512 * 512


@pytest.mark.parametrize("causal", [False, True])
def test_matches_numpy_reference_with_masks(causal):
    b, t, s, d, h = 3, 4, 6, 12, 3
    q_in = RNG.normal(size=(b, t, d)).astype("float32")
    v_in = RNG.normal(size=(b, s, d)).astype("float32")
    value_mask = np.ones((b, s), bool)
    value_mask[1, 4:] = False
    attention_mask = RNG.random((b, t, s)) > 0.3
    mha = MultiHeadAttention(num_heads=h)
    out, scores = mha(
        q_in,
        v_in,
        value_mask=value_mask,
        attention_mask=attention_mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    mask = value_mask[:, None, :] & attention_mask
    if causal:
        mask = mask & np.tril(np.ones((t, s), bool))[None]
    want, want_scores = reference.attention(q_in, v_in, *_weights(mha), h, mask)
    np.testing.assert_allclose(_np(out), want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(_np(scores), want_scores, atol=1e-5, rtol=1e-5)


def test_distinct_key_input():
    q_in, k_in, v_in = (RNG.normal(size=(2, n, 8)).astype("float32") for n in (3, 5, 5))
    mha = MultiHeadAttention(num_heads=2)
    out = mha(q_in, v_in, key=k_in)
    want, _ = reference.attention(q_in, v_in, *_weights(mha), 2, key=k_in)
    np.testing.assert_allclose(_np(out), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_parity_with_keras_multi_head_attention(causal):
    b, t, d, h = 2, 5, 16, 4
    x = RNG.normal(size=(b, t, d)).astype("float32")
    mask = np.ones((b, t), bool)
    mask[0, 3:] = False
    ours = MultiHeadAttention(num_heads=h)
    ours(x, x)
    theirs = keras.layers.MultiHeadAttention(num_heads=h, key_dim=d // h, use_bias=False)
    theirs(x, x)
    wq, wk, wv, wo = _weights(ours)
    # Dense kernels (in, H·d) map onto EinsumDense kernels (in, H, d) and (H, d, out).
    theirs.query_dense.kernel.assign(wq.reshape(d, h, d // h))
    theirs.key_dense.kernel.assign(wk.reshape(d, h, d // h))
    theirs.value_dense.kernel.assign(wv.reshape(d, h, d // h))
    theirs.output_dense.kernel.assign(wo.reshape(h, d // h, d))
    kwargs = {"query_mask": mask, "value_mask": mask, "use_causal_mask": causal}
    got = _np(ours(x, x, **kwargs))
    want = _np(theirs(x, x, **kwargs))
    np.testing.assert_allclose(got[mask], want[mask], atol=1e-5, rtol=1e-5)


def test_fully_masked_row_is_finite_uniform_average():
    x = RNG.normal(size=(1, 3, 8)).astype("float32")
    attention_mask = np.ones((1, 3, 3), bool)
    attention_mask[0, 1, :] = False  # query 1 may attend nothing
    mha = MultiHeadAttention(num_heads=2)
    out, scores = mha(x, x, attention_mask=attention_mask, return_attention_scores=True)
    assert np.all(np.isfinite(_np(out)))
    np.testing.assert_allclose(_np(scores)[0, :, 1], np.full((2, 3), 1 / 3), atol=1e-6)


def test_fully_masked_row_is_finite_under_float16():
    x = RNG.normal(size=(2, 4, 8)).astype("float32") * 50
    mha = MultiHeadAttention(num_heads=2, dtype="mixed_float16")
    out, scores = mha(x, x, attention_mask=np.zeros((2, 4, 4), bool), return_attention_scores=True)
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    assert np.all(np.isfinite(_np(keras.ops.cast(out, "float32"))))


def test_softmax_in_float32_under_mixed_precision():
    x = RNG.normal(size=(2, 4, 8)).astype("float32")
    for policy in ("mixed_float16", "mixed_bfloat16"):
        mha = MultiHeadAttention(num_heads=2, dtype=policy)
        out, scores = mha(x, x, return_attention_scores=True)
        assert keras.backend.standardize_dtype(scores.dtype) == "float32"
        assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
        np.testing.assert_allclose(_np(scores).sum(-1), 1.0, atol=1e-6)
        ref = MultiHeadAttention(num_heads=2)
        ref(x, x)
        ref.set_weights(mha.get_weights())
        np.testing.assert_allclose(
            _np(keras.ops.cast(out, "float32")), _np(ref(x, x)), atol=0.05, rtol=0.05
        )


def test_padding_keys_do_not_change_output():
    q_in = RNG.normal(size=(2, 3, 8)).astype("float32")
    v_in = RNG.normal(size=(2, 4, 8)).astype("float32")
    mha = MultiHeadAttention(num_heads=2)
    base = _np(mha(q_in, v_in))
    padded = np.concatenate([v_in, RNG.normal(size=(2, 3, 8)).astype("float32")], axis=1)
    mask = np.array([[True] * 4 + [False] * 3] * 2)
    np.testing.assert_allclose(_np(mha(q_in, padded, value_mask=mask)), base, atol=1e-5)


def test_causal_future_tokens_do_not_change_past_outputs():
    x = RNG.normal(size=(1, 6, 8)).astype("float32")
    mha = MultiHeadAttention(num_heads=2)
    base = _np(mha(x, x, use_causal_mask=True))
    changed = x.copy()
    changed[0, 4:] = RNG.normal(size=(2, 8))
    out = _np(mha(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(out[0, :4], base[0, :4], atol=1e-6)
    assert not np.allclose(out[0, 4:], base[0, 4:])


def test_implicit_keras_masks_equal_explicit_masks():
    ids = np.array([[4, 5, 6, 0, 0], [7, 8, 9, 3, 2]])
    emb = keras.layers.Embedding(10, 8, mask_zero=True)
    mha = MultiHeadAttention(num_heads=2)
    inp = keras.Input((None,), dtype="int32")
    h = emb(inp)
    model = keras.Model(inp, mha(h, h))
    got = _np(model(ids))
    x = emb(ids)
    mask = ids != 0
    want = _np(mha(_np(x), _np(x), query_mask=mask, value_mask=mask))
    np.testing.assert_allclose(got[mask], want[mask], atol=1e-6)
    # And the masks matter: without them the real positions change.
    unmasked = _np(mha(_np(x), _np(x)))
    assert not np.allclose(unmasked[0, :3], want[0, :3], atol=1e-4)


def test_dropout_only_in_training():
    x = RNG.normal(size=(2, 4, 8)).astype("float32")
    mha = MultiHeadAttention(num_heads=2, dropout=0.5)
    a, b = _np(mha(x, x)), _np(mha(x, x))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(_np(mha(x, x, training=True)), a)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_heads": 0}, "num_heads=0"),
        ({"num_heads": 2.5}, "num_heads=2.5"),
        ({"num_heads": 2, "dropout": -0.1}, "dropout=-0.1"),
        ({"num_heads": 2, "dropout": 1.0}, "dropout=1.0"),
        ({"num_heads": 2, "key_dim": -3}, "key_dim=-3"),
    ],
)
def test_bad_constructor_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        MultiHeadAttention(**kwargs)


def test_hidden_not_divisible_by_heads():
    x = np.zeros((1, 2, 10), "float32")
    with pytest.raises(ValueError, match=r"\(10\).*num_heads=3"):
        MultiHeadAttention(num_heads=3)(x, x)


@pytest.mark.parametrize(
    ("name", "mask"),
    [
        ("attention_mask", np.ones((2, 3, 4), bool)),
        ("attention_mask", np.ones((2, 5), bool)),
        ("query_mask", np.ones((2, 4), bool)),
        ("value_mask", np.ones((2, 3), bool)),
    ],
)
def test_mask_shape_mismatch(name, mask):
    x = np.zeros((2, 3, 8), "float32")
    v = np.zeros((2, 5, 8), "float32")
    with pytest.raises(ValueError, match=rf"`{name}`.*{name}\.shape="):
        MultiHeadAttention(num_heads=2)(x, v, **{name: mask})


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((np.zeros((3, 8)), np.zeros((2, 3, 8))), {}, r"`query` must have rank 3.*\(3, 8\)"),
        ((np.zeros((2, 3, 8)), np.zeros((2, 1, 3, 8))), {}, r"`value`.*value\.shape=\(2, 1"),
        ((np.zeros((2, 3, 8)), np.zeros((3, 5, 8))), {}, r"batch size.*value\.shape=\(3, 5"),
        (
            (np.zeros((2, 3, 8)), np.zeros((2, 5, 8))),
            {"key": np.zeros((2, 4, 8))},
            r"same length.*key\.shape=\(2, 4, 8\)",
        ),
    ],
)
def test_bad_input_shapes_name_the_argument(args, kwargs, words):
    mha = MultiHeadAttention(num_heads=2)
    mha(np.zeros((2, 3, 8), "float32"), np.zeros((2, 5, 8), "float32"))
    args = [a.astype("float32") for a in args]
    with pytest.raises(ValueError, match=words):
        mha(*args, **kwargs)


def test_bad_cache_shapes_name_the_argument():
    mha = MultiHeadAttention(num_heads=2)
    x = np.zeros((2, 3, 8), "float32")
    mha(x, x)
    with pytest.raises(ValueError, match=r"batch size.*cache\['key'\]\.shape=\(3, 2, 4, 4\)"):
        mha(x[:, :1], cache=mha.init_cache(3, 4), cache_index=0)
    with pytest.raises(ValueError, match=r"`query` must have last dimension 8.*\(2, 1, 6\)"):
        mha(np.zeros((2, 1, 6), "float32"), cache=mha.init_cache(2, 4), cache_index=0)


def _fusions(monkeypatch):
    """Records the sizes of the projection groups that `_project` tried to fuse."""
    calls = []
    original = MultiHeadAttention._can_fuse

    def spy(self, denses):
        calls.append(tuple(d.name for d in denses))
        return original(self, denses)

    monkeypatch.setattr(MultiHeadAttention, "_can_fuse", spy)
    return calls


@pytest.mark.parametrize("use_bias", [False, True])
def test_fused_qkv_projection_equals_three_dense_calls(monkeypatch, use_bias):
    mha = MultiHeadAttention(num_heads=4, use_bias=use_bias)
    x = tf.constant(RNG.normal(size=(2, 5, 16)).astype("float32"))
    mha(x, tf.identity(x))  # builds it (unfused: value is another tensor)
    for dense in (mha.query_dense, mha.key_dense, mha.value_dense):
        if use_bias:
            dense.bias.assign(RNG.normal(size=dense.bias.shape))
    calls = _fusions(monkeypatch)
    with tf.GradientTape() as tape:
        fused = mha(x, x)  # one tensor: q, k and v from one matmul
    assert calls == [("query_dense", "key_dense", "value_dense")]
    grads = tape.gradient(fused, mha.trainable_weights)
    unfused = mha(x, tf.identity(x))
    np.testing.assert_allclose(_np(fused), _np(unfused), atol=1e-5)
    # Same variables as before (checkpoint layout): 3 or 4 Dense kernels (+ biases).
    assert [w.path.split("/")[-2] for w in mha.trainable_weights][:3] == [
        "query_dense",
        "query_dense" if use_bias else "key_dense",
        "key_dense" if use_bias else "value_dense",
    ]
    for weight, grad in zip(mha.trainable_weights, grads, strict=True):
        if weight.path.endswith("key_dense/bias"):
            continue  # a bias on k shifts every logit of a row equally: zero gradient
        assert grad is not None and np.abs(_np(grad)).max() > 0, weight.path


def test_cross_attention_fuses_key_and_value_and_decoding_matches(monkeypatch):
    mha = MultiHeadAttention(num_heads=2)
    q = tf.constant(RNG.normal(size=(2, 3, 8)).astype("float32"))
    ctx = tf.constant(RNG.normal(size=(2, 6, 8)).astype("float32"))
    calls = _fusions(monkeypatch)
    full = mha(q, ctx)
    assert ("key_dense", "value_dense") in calls
    out, _ = mha(q, cache=mha.compute_cache(ctx))
    np.testing.assert_allclose(_np(out), _np(full), atol=1e-5)


def test_fusion_inside_a_compiled_transformer_block(monkeypatch):
    from tfblocks import TransformerBlock

    block = TransformerBlock(2, 32, causal=True, cross_attention=True)
    x = tf.constant(RNG.normal(size=(2, 4, 8)).astype("float32"))
    ctx = tf.constant(RNG.normal(size=(2, 6, 8)).astype("float32"))
    eager = block(x, context=ctx)
    calls = _fusions(monkeypatch)
    compiled = tf.function(lambda a, c: block(a, context=c), jit_compile=True)(x, ctx)
    assert ("query_dense", "key_dense", "value_dense") in calls, calls
    assert ("key_dense", "value_dense") in calls, calls
    np.testing.assert_allclose(_np(compiled), _np(eager), atol=1e-5)
