"""Tests for tfblocks.models.transformer: structure, parameter counts, masking, ties."""

import keras
import numpy as np
import pytest

from tests.fixtures import FIRST_ID
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.models.builders import build_language_model, build_transformer
from tfblocks.models.hyperparameters import HPARAMS_SETS, hparams
from tfblocks.models.transformer import Transformer, padding_mask, shift_right

VOCAB = 37


def expected_params(hp):
    """What t2t's architecture implies: bias-free attention, FFN with biases, LN γ/β, and
    with relative self-attention a key and a value table of 2k + 1 rows of the head depth."""
    d, f, v = hp.hidden_size, hp.filter_size, hp.vocab_size
    ffn = d * f + f + f * d + d
    layer_norm = 2 * d
    relative = 0
    if hp.self_attention_type == "dot_product_relative":
        relative = 2 * (2 * hp.max_relative_position + 1) * (d // hp.num_heads)
    encoder_layer = 4 * d * d + relative + ffn + 2 * layer_norm
    decoder_layer = 8 * d * d + relative + ffn + 3 * layer_norm
    final_norms = 2 * layer_norm if hp.norm_first else 0
    embeddings = v * d if hp.shared_embedding_and_softmax_weights else 3 * v * d
    return (
        embeddings
        + hp.num_encoder_layers * encoder_layer
        + hp.num_decoder_layers * decoder_layer
        + final_norms
    )


def tiny(**overrides):
    return hparams(
        "transformer_tiny", vocab_size=VOCAB, hidden_size=32, filter_size=64, **overrides
    )


# M2M-100 / NLLB's options: Pre-LN with final norms, biases, positions from 2.
M2M100 = {
    "norm_first": True,
    "attention_use_bias": True,
    "position_offset": 2,
    "norm_epsilon": 1e-5,
}


def batch(rng, b=2, s=7, t=6):
    src = rng.integers(FIRST_ID, VOCAB, (b, s)).astype("int32")
    tgt = rng.integers(FIRST_ID, VOCAB, (b, t)).astype("int32")
    src[1, 4:] = PAD_ID
    tgt[1, 3] = EOS_ID
    tgt[1, 4:] = PAD_ID
    return {"inputs": src, "targets": tgt}


def test_ids():
    assert (PAD_ID, EOS_ID, UNK_ID, BOS_ID) == (0, 1, 2, 3)


@pytest.mark.parametrize("name", sorted(HPARAMS_SETS))
def test_count_params_matches_t2t_formula(name):
    hp = hparams(name)
    assert build_transformer(hp).count_params() == expected_params(hp)


def test_count_params_untied_embeddings():
    hp = tiny(shared_embedding_and_softmax_weights=False)
    model = build_transformer(hp)
    assert model.count_params() == expected_params(hp)
    names = {layer.name for layer in model.layers}
    assert {"source_embedding", "target_embedding", "softmax"} <= names


def test_outputs_float32_logits_without_mask():
    model = build_transformer(tiny())
    assert sorted(model.input) == ["inputs", "targets"]
    assert all(keras.backend.standardize_dtype(t.dtype) == "int32" for t in model.inputs)
    logits = model(batch(np.random.default_rng(0)))
    assert tuple(logits.shape) == (2, 6, VOCAB)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert getattr(logits, "_keras_mask", None) is None


def test_targets_are_shifted_right_with_bos():
    shifted = shift_right(np.array([[5, 6, 1, 0]], "int32"))
    np.testing.assert_array_equal(np.asarray(shifted), [[BOS_ID, 5, 6, 1]])


def test_decoder_is_causal_and_sees_the_previous_target():
    model = build_transformer(tiny())
    x = batch(np.random.default_rng(1))
    base = np.asarray(model(x))
    changed = {k: v.copy() for k, v in x.items()}
    changed["targets"][0, 2] = (changed["targets"][0, 2] + 1 - 4) % (VOCAB - 4) + 4
    out = np.asarray(model(changed))
    # Position t reads targets[:t]: positions 0..2 are unchanged, 3 changes.
    np.testing.assert_allclose(out[0, :3], base[0, :3], atol=1e-5)
    assert np.abs(out[0, 3] - base[0, 3]).max() > 1e-4
    np.testing.assert_allclose(out[1], base[1], atol=1e-5)


@pytest.mark.parametrize("options", [{}, M2M100], ids=["t2t", "m2m100"])
def test_padding_does_not_change_real_positions(options):
    model = build_transformer(tiny(**options))
    x = batch(np.random.default_rng(2))
    base = np.asarray(model(x))
    padded = {k: np.pad(v, [(0, 0), (0, 3)]) for k, v in x.items()}
    out = np.asarray(model(padded))
    np.testing.assert_allclose(out[0, :6], base[0], atol=1e-4)
    np.testing.assert_allclose(out[1, :4], base[1, :4], atol=1e-4)


def test_tied_softmax_is_decoder_output_times_embedding_transpose():
    model = build_transformer(tiny())
    x = batch(np.random.default_rng(3))
    hidden = keras.Model(model.inputs, model.get_layer("decoder_norm").output)
    h = np.asarray(hidden(x), "float64")
    embeddings = np.asarray(model.get_layer("embedding").embeddings, "float64")
    np.testing.assert_allclose(np.asarray(model(x)), h @ embeddings.T, rtol=1e-4, atol=1e-4)
    assert sum("embeddings" in w.path for w in model.weights) == 1


def test_post_ln_has_no_final_norms():
    hp = hparams("transformer_base_v1", vocab_size=VOCAB, hidden_size=32, filter_size=64)
    names = {layer.name for layer in build_transformer(hp).layers}
    assert "encoder_norm" not in names and "decoder_norm" not in names
    names = {layer.name for layer in build_transformer(tiny()).layers}
    assert {"encoder_norm", "decoder_norm"} <= names


def test_methods_reproduce_the_model_after_keras_round_trip(tmp_path):
    model = build_transformer(tiny())
    x = batch(np.random.default_rng(4))
    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert isinstance(reloaded, Transformer)
    assert reloaded.get_config() == model.get_config()
    expected = np.asarray(model(x))
    np.testing.assert_array_equal(np.asarray(reloaded(x)), expected)
    # encode / decode / logits are the very computation the functional graph runs.
    memory = reloaded.encode(x["inputs"])
    hidden = reloaded.decode(shift_right(x["targets"]), memory, padding_mask(x["inputs"]))
    np.testing.assert_allclose(np.asarray(reloaded.logits(hidden)), expected, atol=1e-5)


RELATIVE = {
    "self_attention_type": "dot_product_relative",
    "max_relative_position": 2,
    "pos": "none",
}


@pytest.mark.parametrize(
    "attention", [{}, RELATIVE, M2M100], ids=["absolute", "relative", "m2m100"]
)
def test_cached_decode_equals_full_decode(attention):
    options = {"shared_embedding_and_softmax_weights": False, "norm_first": False, **attention}
    model = build_transformer(tiny(**options))
    x = batch(np.random.default_rng(6))
    memory = model.encode(x["inputs"])
    mask = padding_mask(x["inputs"])
    decoder_ids = shift_right(x["targets"])
    full = np.asarray(model.decode(decoder_ids, memory, mask))
    cache = model.init_cache(2, 6, memory)
    for i in range(6):
        hidden, cache = model.decode(decoder_ids[:, i : i + 1], source_mask=mask, cache=cache,
                                     index=i)  # fmt: skip
        real = np.asarray(decoder_ids)[:, i] != PAD_ID  # padded queries are not compared
        np.testing.assert_allclose(np.asarray(hidden)[real, 0], full[real, i], atol=1e-4)


def test_relative_model_has_no_timing_signal_and_round_trips(tmp_path):
    model = build_transformer(tiny(**RELATIVE))
    assert not model.source_embedding.add_timing_signal
    assert all(b.self_attention.max_relative_position == 2 for b in model.decoder_blocks)
    assert all(b.cross_attention.__class__.__name__ == "MultiHeadAttention"
               for b in model.decoder_blocks)  # fmt: skip
    x = batch(np.random.default_rng(8))
    model.save(tmp_path / "relative.keras")
    again = keras.saving.load_model(tmp_path / "relative.keras")
    np.testing.assert_allclose(again(x), model(x), atol=1e-6)
    # No timing signal and relative attention: the encoding does not depend on where the
    # sentence starts (padding in front is masked), unlike the absolute model's.
    front = np.array([[0, 0, 5, 6, 7, EOS_ID]], "int32")
    back = np.array([[5, 6, 7, EOS_ID, 0, 0]], "int32")
    np.testing.assert_allclose(
        np.asarray(model.encode(front))[:, 2:], np.asarray(model.encode(back))[:, :4], atol=1e-5
    )
    absolute = build_transformer(tiny())
    shifted = np.asarray(absolute.encode(front))[:, 2:] - np.asarray(absolute.encode(back))[:, :4]
    assert np.abs(shifted).max() > 1e-3


def test_builders_check_the_layer_counts():
    with pytest.raises(ValueError, match="num_encoder_layers=0"):
        build_transformer(tiny(num_encoder_layers=0))
    with pytest.raises(ValueError, match="num_encoder_layers=2"):
        build_language_model(tiny())
    with pytest.raises(ValueError, match="num_encoder_layers=-1"):
        tiny(num_encoder_layers=-1)


def test_bad_ids_name_the_argument():
    model = build_transformer(tiny())
    with pytest.raises(ValueError, match="source_ids"):
        model.encode(np.zeros((2, 3, 4), "int32"))
    with pytest.raises(ValueError, match=r"source_ids.*integer"):
        model.encode(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="encoder_output"):
        model.decode(np.zeros((2, 3), "int32"))


def test_language_model_predicts_the_next_token_causally():
    lm = build_language_model(tiny(num_encoder_layers=0))
    assert not lm.has_input and lm.count_params() == (
        VOCAB * 32 + 2 * (4 * 32 * 32 + (32 * 64 + 64 + 64 * 32 + 32) + 2 * 2 * 32) + 2 * 32
    )
    ids = np.array([[5, 6, 7, 8, 1, 0]], "int32")
    base = np.asarray(lm(ids))
    assert base.shape == (1, 6, VOCAB) and base.dtype == np.float32
    changed = ids.copy()
    changed[0, 2] = 9
    out = np.asarray(lm(changed))
    # Position t sees BOS and ids[:t]: positions 0..2 unchanged, 3 changes.
    np.testing.assert_allclose(out[0, :3], base[0, :3], atol=1e-5)
    assert np.abs(out[0, 3] - base[0, 3]).max() > 1e-4
    with pytest.raises(ValueError, match="decoder-only"):
        lm.encode(ids)


def test_language_model_keras_round_trip(tmp_path):
    lm = build_language_model(tiny(num_encoder_layers=0, norm_first=False))
    path = tmp_path / "lm.keras"
    lm.save(path)
    ids = np.array([[5, 6, 7, 1]], "int32")
    np.testing.assert_array_equal(
        np.asarray(keras.saving.load_model(path)(ids)), np.asarray(lm(ids))
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_logits_are_float32(policy):
    keras.config.set_dtype_policy(policy)
    model = build_transformer(tiny())
    logits = model(batch(np.random.default_rng(5)))
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert np.isfinite(np.asarray(logits)).all()
    assert model.get_layer("encoder_layer_0").compute_dtype == policy.split("_")[1]
