"""The architecture options of imported models (Marian / OPUS-MT) in `Transformer`.

Each configuration is checked against a NumPy forward pass written from the formulas
(`tests.layers.reference`), with every weight random (LayerNorm, biases, the logits bias,
the position table) so that a mis-wired option cannot hide; then padding invariance,
cached equals uncached decoding, the `.keras` round trip and mixed precision.
"""

import keras
import numpy as np
import pytest

from tests.layers import reference
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID
from tfblocks.models.builders import build_language_model, build_transformer
from tfblocks.models.hyperparameters import hparams, parse_overrides
from tfblocks.models.transformer import Transformer, padding_mask, shift_right

VOCAB, SOURCE_VOCAB, D = 37, 29, 16
BASE = {
    "vocab_size": VOCAB,
    "hidden_size": D,
    "filter_size": 32,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
}
# Hugging Face's OPUS-MT models: Post-LN without final LayerNorms, biases everywhere,
# swish, epsilon 1e-5, a logits bias, the timescales over d/2, one shared matrix.
MARIAN = {
    "norm_first": False,
    "ffn_activation": "swish",
    "attention_use_bias": True,
    "norm_epsilon": 1e-5,
    "timescale_rule": "half_depth",
    "final_logits_bias": True,
}
CONFIGS = {
    "marian": MARIAN,
    "separate_source_tied_target_table": {
        **MARIAN,
        "source_vocab_size": SOURCE_VOCAB,
        "max_positions": 12,
        "scale_embedding": False,
        "decoder_start": "zeros",
    },
    "untied_gelu_pre_ln": {
        "shared_embedding_and_softmax_weights": False,
        "source_vocab_size": SOURCE_VOCAB,
        "ffn_activation": "gelu",
        "ffn_use_bias": False,
        "attention_use_bias": True,
        "final_logits_bias": True,
        "decoder_start": "zeros",
    },
}


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")), "float64")


def _model(options, dtype=None, seed=0):
    """A model of `options` with every weight random (LayerNorm γ/β and biases too)."""
    model = Transformer(**BASE, **options, dtype=dtype)
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if w.path.endswith(("/gamma",)):
            w.assign(rng.normal(1.0, 0.2, w.shape).astype("float32"))
        elif w.path.endswith(("/beta", "/bias")):
            w.assign(rng.normal(0.0, 0.3, w.shape).astype("float32"))
        elif w.path.endswith("/position_embeddings"):
            w.assign(rng.normal(0.0, 0.5, w.shape).astype("float32"))
    return model


def _batch(model, seed=1, s=7, t=6):
    rng = np.random.default_rng(seed)
    src = rng.integers(4, model.source_vocab_size or VOCAB, (2, s)).astype("int32")
    tgt = rng.integers(4, VOCAB, (2, t)).astype("int32")
    src[1, 4:] = PAD_ID
    tgt[1, 3], tgt[1, 4:] = EOS_ID, PAD_ID
    return {"inputs": src, "targets": tgt}


def _embed(layer, ids, zeroed_id=None):
    """Token embedding (× √d when scaled; padding and `zeroed_id` zero) + position signal."""
    d = layer.hidden_size
    x = _np(layer.embeddings)[ids] * (np.sqrt(d) if layer.scale else 1.0)  # [B, L, d]
    keep = (ids != PAD_ID) & (ids != (-1 if zeroed_id is None else zeroed_id))
    x = x * keep[..., None]
    length = ids.shape[1]
    if layer.position_embeddings is not None:
        return x + _np(layer.position_embeddings)[:length][None]
    if layer.timescale_rule == "half_depth":
        return x + reference.half_depth_signal(length, d)
    return x + reference.timing_signal(length, d)


def _norm(ln, x):
    if ln is None:
        return x
    return reference.layer_norm(x, _np(ln.gamma), _np(ln.beta), eps=ln.epsilon)


def reference_logits(model, src, tgt):
    """The encoder–decoder forward pass in NumPy (float64) from the model's weights."""
    x = _embed(model.source_embedding, src)
    for block in model.encoder_blocks:
        x = reference.transformer_block(block, x, mask=src != PAD_ID)
    memory = _norm(model.encoder_norm, x)
    dec_ids = np.asarray(shift_right(tgt))
    zeroed = BOS_ID if model.decoder_start == "zeros" else None
    h = _embed(model.target_embedding, dec_ids, zeroed)
    for block in model.decoder_blocks:
        h = reference.transformer_block(
            block, h, memory, mask=dec_ids != PAD_ID, ctx_mask=src != PAD_ID
        )
    h = _norm(model.decoder_norm, h)
    if model.softmax is None:
        logits = h @ _np(model.target_embedding.embeddings).T  # tied: h · Eᵀ
    else:
        logits = h @ _np(model.softmax.kernel)
    if model.logits_bias is not None:
        logits = logits + _np(model.logits_bias.bias)
    return logits


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_match_numpy_reference(name):
    model = _model(CONFIGS[name])
    x = _batch(model)
    got = _np(model(x))
    want = reference_logits(model, x["inputs"], x["targets"])
    real = x["targets"] != PAD_ID
    np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=1e-4)


def test_structure_of_the_options():
    model = _model(CONFIGS["separate_source_tied_target_table"])
    assert model.source_embedding is not model.target_embedding
    assert model.source_embedding.vocab_size == SOURCE_VOCAB
    assert model.softmax is None and model.logits_bias.bias.trainable
    assert model.encoder_norm is None and model.decoder_norm is None  # Post-LN
    block = model.decoder_blocks[0]
    assert block.self_attention.query_dense.bias is not None and block.ffn.activation == "swish"
    assert block.ffn_norm.epsilon == 1e-5
    assert tuple(model.target_embedding.position_embeddings.shape) == (12, D)
    untied = _model(CONFIGS["untied_gelu_pre_ln"])
    assert untied.softmax is not None and untied.decoder_blocks[0].ffn.filter_dense.bias is None
    # A tied model keeps the one matrix (and layer name) of the t2t default.
    shared = _model(MARIAN)
    assert shared.get_layer("embedding") is shared.source_embedding is shared.target_embedding
    assert sum(w.path.endswith("/embeddings") for w in shared.weights) == 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_padding_does_not_change_real_positions(name):
    model = _model(CONFIGS[name])
    x = _batch(model, seed=2)
    base = _np(model(x))
    padded = {k: np.pad(v, [(0, 0), (0, 3)]) for k, v in x.items()}
    out = _np(model(padded))
    np.testing.assert_allclose(out[0, :6], base[0], atol=1e-4)
    np.testing.assert_allclose(out[1, :4], base[1, :4], atol=1e-4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_cached_decode_equals_full_decode(name, dtype):
    model = _model(CONFIGS[name], dtype=dtype)
    tol = 1e-4 if dtype is None else 1e-1
    x = _batch(model, seed=3)
    memory = model.encode(x["inputs"])
    mask = padding_mask(x["inputs"])
    decoder_ids = shift_right(x["targets"])
    full = _np(model.logits(model.decode(decoder_ids, memory, mask)))
    cache = model.init_cache(2, 6, memory)
    for i in range(6):
        hidden, cache = model.decode(
            decoder_ids[:, i : i + 1], source_mask=mask, cache=cache, index=i
        )
        real = np.asarray(decoder_ids)[:, i] != PAD_ID
        np.testing.assert_allclose(
            _np(model.logits(hidden))[real, 0], full[real, i], atol=tol, rtol=tol
        )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_keras_round_trip(tmp_path, name):
    model = _model(CONFIGS[name])
    x = _batch(model, seed=4)
    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.get_config() == model.get_config()
    np.testing.assert_array_equal(_np(reloaded(x)), _np(model(x)))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_stays_close_to_float32(policy):
    options = CONFIGS["separate_source_tied_target_table"]
    full = _model(options)
    mixed = Transformer(**BASE, **options, dtype=policy)
    mixed.set_weights(full.get_weights())
    x = _batch(full, seed=5)
    want, got = _np(full(x)), mixed(x)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    real = x["targets"] != PAD_ID
    scale = np.abs(want[real]).max()
    assert np.abs(_np(got)[real] - want[real]).max() < 0.05 * scale


def test_zero_vector_start_ignores_the_bos_embedding():
    options = {**MARIAN, "decoder_start": "zeros"}
    model = _model(options)
    x = _batch(model, seed=6)
    base = _np(model(x))
    model.target_embedding.embeddings[BOS_ID].assign(np.full(D, 3.0, "float32"))
    other = np.arange(VOCAB) != BOS_ID  # tied: the BOS row is also the BOS logit's
    np.testing.assert_allclose(_np(model(x))[..., other], base[..., other], atol=1e-5)
    bos = _model(MARIAN)
    before = _np(bos(x))
    bos.target_embedding.embeddings[BOS_ID].assign(np.full(D, 3.0, "float32"))
    assert np.abs(_np(bos(x))[:, 0] - before[:, 0]).max() > 1e-3


def test_logits_bias_is_added_after_the_projection():
    model = _model(MARIAN)
    x = _batch(model, seed=7)
    before = _np(model(x))
    shift = np.zeros(VOCAB, "float32")
    shift[5] = 2.5
    model.logits_bias.bias.assign(model.logits_bias.bias + shift)
    np.testing.assert_allclose(_np(model(x)) - before, np.broadcast_to(shift, before.shape), 1e-5)


def test_source_ids_are_checked_against_the_source_vocabulary():
    model = _model(CONFIGS["separate_source_tied_target_table"])
    with pytest.raises(ValueError, match=rf"vocab_size={SOURCE_VOCAB}"):
        model.encode(np.array([[SOURCE_VOCAB, 1]], "int32"))


def test_count_params_of_the_options():
    d, f, v, s = D, 32, VOCAB, SOURCE_VOCAB
    model = _model(CONFIGS["separate_source_tied_target_table"])
    attention = 4 * d * d + 4 * d  # biases on q, k, v and the output
    ffn = 2 * d * f + f + d
    norms = 2 * d
    layers = 2 * (attention + ffn + 2 * norms) + 2 * (2 * attention + ffn + 3 * norms)
    tables = 2 * 12 * d  # one position table per embedding
    assert model.count_params() == s * d + v * d + tables + layers + v


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"ffn_activation": "tanh"}, "ffn_activation='tanh'"),
        ({"attention_use_bias": 1}, "attention_use_bias=1"),
        ({"norm_epsilon": 0.0}, "norm_epsilon=0.0"),
        ({"timescale_rule": "paper"}, "timescale_rule='paper'"),
        ({"max_positions": 0}, "max_positions=0"),
        ({"decoder_start": "pad"}, "decoder_start='pad'"),
        ({"source_vocab_size": -3}, "source_vocab_size=-3"),
        ({"final_logits_bias": "yes"}, "final_logits_bias='yes'"),
    ],
)
def test_bad_options_name_the_argument(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Transformer(**BASE, **kwargs)


def test_language_model_has_no_source_vocabulary_but_takes_the_other_options():
    with pytest.raises(ValueError, match="source_vocab_size=5"):
        Transformer(**{**BASE, "num_encoder_layers": 0}, source_vocab_size=5)
    options = {k: v for k, v in MARIAN.items() if k not in ("timescale_rule", "final_logits_bias")}
    hp = hparams(
        "transformer_tiny",
        vocab_size=VOCAB,
        hidden_size=D,
        filter_size=32,
        num_encoder_layers=0,
        **options,
    )
    lm = build_language_model(hp)
    assert lm.decoder_blocks[0].ffn.activation == "swish" and lm.norm_epsilon == 1e-5


def test_hparams_build_the_options():
    hp = hparams(
        "transformer_tiny",
        vocab_size=VOCAB,
        hidden_size=D,
        filter_size=32,
        norm_first=False,
        ffn_activation="swish",
        attention_use_bias=True,
        ffn_use_bias=False,
        norm_epsilon=1e-5,
        final_logits_bias=True,
        timescale_rule="half_depth",
        pos="emb",
        max_length=20,
        multiply_embedding_mode="none",
        decoder_start="zeros",
        source_vocab_size=SOURCE_VOCAB,
    )
    model = build_transformer(hp)
    config = model.get_config()
    assert {
        key: config[key]
        for key in (
            "ffn_activation",
            "attention_use_bias",
            "ffn_use_bias",
            "norm_epsilon",
            "final_logits_bias",
            "timescale_rule",
            "max_positions",
            "scale_embedding",
            "decoder_start",
            "source_vocab_size",
        )
    } == {
        "ffn_activation": "swish",
        "attention_use_bias": True,
        "ffn_use_bias": False,
        "norm_epsilon": 1e-5,
        "final_logits_bias": True,
        "timescale_rule": "half_depth",
        "max_positions": 20,
        "scale_embedding": False,
        "decoder_start": "zeros",
        "source_vocab_size": SOURCE_VOCAB,
    }


def test_t2t_defaults_are_unchanged():
    config = build_transformer(hparams("transformer_tiny", vocab_size=VOCAB)).get_config()
    assert (config["ffn_activation"], config["attention_use_bias"], config["ffn_use_bias"]) == (
        "relu",
        False,
        True,
    )
    assert (config["norm_epsilon"], config["timescale_rule"], config["max_positions"]) == (
        1e-6,
        "t2t",
        None,
    )
    assert (config["scale_embedding"], config["decoder_start"], config["final_logits_bias"]) == (
        True,
        "bos",
        False,
    )
    assert config["source_vocab_size"] is None


def test_parse_overrides_reads_the_new_fields():
    got = parse_overrides(
        "ffn_activation=swish,attention_use_bias=true,norm_epsilon=1e-5,pos=emb,"
        "source_vocab_size=30,final_logits_bias=1"
    )
    assert got == {
        "ffn_activation": "swish",
        "attention_use_bias": True,
        "norm_epsilon": 1e-5,
        "pos": "emb",
        "source_vocab_size": 30,
        "final_logits_bias": True,
    }
