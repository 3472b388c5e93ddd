"""Tests for tfblocks.models.hyperparameters: t2t preset values, overrides and validation."""

import dataclasses

import pytest

from tfblocks.models.hyperparameters import HPARAMS_SETS, LEGACY_NOAM, RSQRT_DECAY, hparams

# (layers, hidden, filter, heads, norm_first, prepost/attention/relu dropout, beta2, warmup)
T2T = {
    "transformer_tiny": (2, 128, 512, 4, True, 0.1, 0.1, 0.1, 0.997, 8000),
    "transformer_small": (2, 256, 1024, 4, True, 0.1, 0.1, 0.1, 0.997, 8000),
    "transformer_base_v1": (6, 512, 2048, 8, False, 0.1, 0.0, 0.0, 0.98, 4000),
    "transformer_base": (6, 512, 2048, 8, True, 0.1, 0.1, 0.1, 0.997, 8000),
    "transformer_big": (6, 1024, 4096, 16, True, 0.3, 0.1, 0.1, 0.997, 8000),
    "transformer_relative": (6, 512, 2048, 8, True, 0.1, 0.1, 0.1, 0.997, 8000),
    "transformer_relative_tiny": (2, 128, 512, 4, True, 0.1, 0.1, 0.1, 0.997, 8000),
}
# t2t's relative presets: relative self-attention up to distance 20, no timing signal.
RELATIVE = {"transformer_relative", "transformer_relative_tiny"}


@pytest.mark.parametrize("name", sorted(T2T))
def test_presets_match_t2t(name):
    hp = hparams(name)
    got = (
        hp.num_encoder_layers,
        hp.hidden_size,
        hp.filter_size,
        hp.num_heads,
        hp.norm_first,
        hp.layer_prepostprocess_dropout,
        hp.attention_dropout,
        hp.relu_dropout,
        hp.optimizer_adam_beta2,
        hp.learning_rate_warmup_steps,
    )
    assert got == T2T[name]
    assert hp.num_decoder_layers == hp.num_encoder_layers
    assert hp.shared_embedding_and_softmax_weights
    assert (hp.label_smoothing, hp.optimizer_adam_beta1, hp.optimizer_adam_epsilon) == (
        0.1,
        0.9,
        1e-9,
    )
    relative = ("dot_product_relative", 20, "none")
    absolute = ("dot_product", 20, "timing")
    want = relative if name in RELATIVE else absolute
    assert (hp.self_attention_type, hp.max_relative_position, hp.pos) == want
    if name == "transformer_base_v1":
        assert (hp.learning_rate_schedule, hp.learning_rate) == (LEGACY_NOAM, 0.1)
    else:
        assert (hp.learning_rate_schedule, hp.learning_rate_constant) == (RSQRT_DECAY, 2.0)


def test_presets_cover_the_issue():
    assert set(HPARAMS_SETS) == set(T2T)


def test_overrides_and_frozen():
    hp = hparams("transformer_base", hidden_size=256, num_heads=4, vocab_size=100)
    assert (hp.hidden_size, hp.num_heads, hp.vocab_size) == (256, 4, 100)
    assert hparams("transformer_base").hidden_size == 512  # presets are not mutated
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.hidden_size = 1


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match="transformer_tiny") as info:
        hparams("transformer_huge")
    assert "transformer_huge" in str(info.value)
    assert all(name in str(info.value) for name in HPARAMS_SETS)


def test_unknown_field_lists_valid_ones():
    with pytest.raises(ValueError, match="hidden_sise") as info:
        hparams("transformer_tiny", hidden_sise=3)
    assert "hidden_size" in str(info.value) and "filter_size" in str(info.value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 0),
        ("num_heads", 2.5),
        ("attention_dropout", 1.0),
        ("norm_first", 1),
        ("learning_rate_schedule", "cosine"),
        ("optimizer_adam_epsilon", 0.0),
        ("optimizer_adam_epsilon", float("inf")),  # finite numbers only
        ("learning_rate_constant", float("inf")),
        ("learning_rate", float("nan")),
        ("accumulate_steps", 0),
        ("accumulate_steps", 2.0),
        ("ffn_activation", "tanh"),
        ("attention_use_bias", 1),
        ("ffn_use_bias", "yes"),
        ("final_logits_bias", 0),
        ("norm_epsilon", 0.0),
        ("timescale_rule", "marian"),
        ("pos", "learned"),
        ("multiply_embedding_mode", "sqrt"),
        ("decoder_start", "pad"),
        ("source_vocab_size", -1),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`.*{field}={value!r}"):
        hparams("transformer_tiny", **{field: value})


def test_hidden_size_divisible_by_heads():
    with pytest.raises(ValueError, match="num_heads=3"):
        hparams("transformer_tiny", num_heads=3)
