"""Hparams sets (t2t's registered, named hyper-parameters) mirroring t2t
`models/transformer.py`.

`hparams(name, **overrides)` returns a frozen :class:`HParams` whose field names are
t2t's. The sets and what they set:

====================  ======  =====  ======  =====  =======  ========================
hparams set           layers  d      filter  heads  LN       dropout (prepost/att/relu)
====================  ======  =====  ======  =====  =======  ========================
transformer_tiny      2       128    512     4      pre      0.1 / 0.1 / 0.1
transformer_small     2       256    1024    4      pre      0.1 / 0.1 / 0.1
transformer_base_v1   6       512    2048    8      post     0.1 / 0.0 / 0.0
transformer_base      6       512    2048    8      pre      0.1 / 0.1 / 0.1
transformer_big       6       1024   4096    16     pre      0.3 / 0.1 / 0.1
====================  ======  =====  ======  =====  =======  ========================

`transformer_relative` and `transformer_relative_tiny` are `transformer_base` and
`transformer_tiny` with relative position self-attention (`max_relative_position` 20) and
no sinusoidal timing signal, as t2t's hparams sets of these names.

The architecture options of imported models (Marian / OPUS-MT: `ffn_activation`,
`attention_use_bias`, `ffn_use_bias`, `norm_epsilon`, `final_logits_bias`,
`timescale_rule`, `pos="emb"`, `multiply_embedding_mode`, `decoder_start`,
`source_vocab_size`; M2M-100 / NLLB: `position_offset`) default to t2t's values in every
set.

`transformer_base` is t2t's v3: Adam β₂ = 0.997 and the learning rate
`constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size` with constant 2 and 8000 warmup
steps. `transformer_base_v1` is the paper's recipe: Post-LN, β₂ = 0.98 and the legacy
"noam" schedule (`learning_rate` 0.1, 4000 warmup steps). `hparams(name,
regime="small_data")` replaces the schedule's warm-up and constant with `REGIMES`'
short ones (200 steps, 0.35), for a short run on a small corpus. Departures from t2t: the
layer counts are explicit (`num_encoder_layers`/`num_decoder_layers` instead of
`num_hidden_layers` with 0 = fall back), `norm_first` replaces
`layer_preprocess_sequence`/`layer_postprocess_sequence`, and `vocab_size`
(in t2t a property of the problem) lives here because the builder needs it.
"""

import dataclasses
import warnings

from tfblocks import _checks
from tfblocks._regimes import REGIMES, format_overrides  # noqa: F401 (public here)
from tfblocks.layers.embedding import TIMESCALE_RULES
from tfblocks.layers.feed_forward import ACTIVATIONS
from tfblocks.models.options import DECODER_STARTS, LAYER_NORM_EPSILON

RSQRT_DECAY = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
LEGACY_NOAM = "legacy"
_LEARNING_RATE_SCHEDULES = (RSQRT_DECAY, LEGACY_NOAM)
SELF_ATTENTION_TYPES = ("dot_product", "dot_product_relative")
POSITION_SIGNALS = ("timing", "emb", "none")
EMBEDDING_MODES = ("sqrt_depth", "none")
# The fields of the training recipe: changing them changes no weight's shape or meaning, so
# a fine-tuning run (`tfblocks-train --init-from`) may set them; every other field is the
# model's architecture, which it keeps. `max_length` is the size of the position table
# with `pos="emb"`, and then the architecture's too.
TRAINING_FIELDS = (
    "layer_prepostprocess_dropout",
    "attention_dropout",
    "relu_dropout",
    "label_smoothing",
    "learning_rate_schedule",
    "learning_rate",
    "learning_rate_constant",
    "learning_rate_warmup_steps",
    "optimizer_adam_beta1",
    "optimizer_adam_beta2",
    "optimizer_adam_epsilon",
    "batch_size",
    "max_length",
    "accumulate_steps",
)


@dataclasses.dataclass(frozen=True)
class HParams:
    """The Transformer's hyper-parameters, with t2t names. Build one with `hparams()`.

    Attributes:
        vocab_size: size of the (shared) source/target vocabulary.
        hidden_size: d_model.
        filter_size: inner size of the feed-forward network.
        num_heads: attention heads.
        num_encoder_layers: blocks in the encoder stack; 0 for a decoder-only
            language model (t2t `has_input=False`, see `build_language_model`).
        num_decoder_layers: blocks in the decoder stack.
        layer_prepostprocess_dropout: residual and embedding dropout.
        attention_dropout: dropout on attention weights.
        relu_dropout: dropout inside the FFN.
        norm_first: Pre-LN (t2t v2+) when True, Post-LN (the paper, v1) when False.
        label_smoothing: ε of `SmoothedCrossEntropy`.
        learning_rate_schedule: `RSQRT_DECAY` (t2t's factor string) or `"legacy"`
            (t2t's legacy schedule with `learning_rate_decay_scheme="noam"`).
        learning_rate: multiplier of the legacy schedule.
        learning_rate_constant: the `constant` factor of `RSQRT_DECAY`.
        learning_rate_warmup_steps: warm-up steps of either schedule.
        optimizer_adam_beta1: Adam β₁.
        optimizer_adam_beta2: Adam β₂.
        optimizer_adam_epsilon: Adam ε.
        shared_embedding_and_softmax_weights: one embedding matrix for source,
            target and the softmax.
        batch_size: tokens per batch (t2t's meaning; used by data pipelines).
        max_length: longest sequence in tokens (used by data pipelines).
        self_attention_type: `"dot_product"` or `"dot_product_relative"` (Shaw et al.
            2018: learned relative position embeddings in every self-attention,
            `RelativeMultiHeadAttention`; cross-attention stays `"dot_product"`).
        max_relative_position: the largest distance relative attention tells apart.
        pos: `"timing"` (the sinusoidal timing signal added to the embeddings), `"emb"`
            (a trainable table of `max_length` positions, initialised with that signal;
            t2t's starts random; an imported model's stored table) or `"none"` (t2t's
            `pos=None`, as `transformer_relative` sets).
        accumulate_steps: micro-batches per optimizer update (t2t's
            `optimizer_multistep_accumulate_steps`; 1 = none): the update uses the mean
            of their gradients, each micro-batch's token mean weighing equally, and the
            learning-rate schedule counts updates (`compile_transformer`).
        ffn_activation: `"relu"` (t2t), `"gelu"` or `"swish"` / `"silu"` (Marian).
        attention_use_bias: biases on the attention's q, k, v and output projections.
        ffn_use_bias: biases on the FFN's two layers.
        norm_epsilon: LayerNorm epsilon (t2t's name; 1e-6, Marian 1e-5).
        final_logits_bias: a trainable bias added to the logits (Marian).
        timescale_rule: `"t2t"` or `"half_depth"` (Hugging Face's Marian models): the
            timing signal's timescales spaced over d/2 − 1 or d/2 steps.
        multiply_embedding_mode: `"sqrt_depth"` (embeddings × √d) or `"none"`.
        decoder_start: the decoder's first input, `"bos"` (`BOS_ID`'s embedding) or
            `"zeros"` (t2t's zero vector).
        position_offset: the timing signal's position of a sequence's first token (0, t2t;
            2 in M2M-100 / NLLB).
        source_vocab_size: 0: the source shares the target vocabulary (`vocab_size`);
            else the size of a separate source vocabulary with its own embedding
            (`shared_embedding_and_softmax_weights` then ties the target's only).

    Example:

    >>> hp = hparams("transformer_tiny", vocab_size=1000)
    >>> hp.hidden_size, hp.norm_first, hp.vocab_size
    (128, True, 1000)
    """

    vocab_size: int = 32000
    hidden_size: int = 512
    filter_size: int = 2048
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    layer_prepostprocess_dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    norm_first: bool = False
    label_smoothing: float = 0.1
    learning_rate_schedule: str = LEGACY_NOAM
    learning_rate: float = 0.1
    learning_rate_constant: float = 1.0
    learning_rate_warmup_steps: int = 4000
    optimizer_adam_beta1: float = 0.9
    optimizer_adam_beta2: float = 0.98
    optimizer_adam_epsilon: float = 1e-9
    shared_embedding_and_softmax_weights: bool = True
    batch_size: int = 4096
    max_length: int = 256
    self_attention_type: str = "dot_product"
    max_relative_position: int = 20
    pos: str = "timing"
    accumulate_steps: int = 1
    ffn_activation: str = "relu"
    attention_use_bias: bool = False
    ffn_use_bias: bool = True
    norm_epsilon: float = LAYER_NORM_EPSILON
    final_logits_bias: bool = False
    timescale_rule: str = "t2t"
    multiply_embedding_mode: str = "sqrt_depth"
    decoder_start: str = "bos"
    source_vocab_size: int = 0
    position_offset: int = 0

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "filter_size",
            "num_heads",
            "num_decoder_layers",
            "learning_rate_warmup_steps",
            "batch_size",
            "max_length",
            "max_relative_position",
            "accumulate_steps",
        ):
            _checks.check_positive_int(name, getattr(self, name))
        _checks.check_non_negative_int("num_encoder_layers", self.num_encoder_layers)
        for name in (
            "layer_prepostprocess_dropout",
            "attention_dropout",
            "relu_dropout",
            "label_smoothing",
            "optimizer_adam_beta1",
            "optimizer_adam_beta2",
        ):
            _checks.check_rate(name, getattr(self, name))
        _checks.check_non_negative_int("source_vocab_size", self.source_vocab_size)
        _checks.check_non_negative_int("position_offset", self.position_offset)
        for name in (
            "learning_rate",
            "learning_rate_constant",
            "optimizer_adam_epsilon",
            "norm_epsilon",
        ):
            _checks.check_positive_float(name, getattr(self, name))
        for name in (
            "norm_first",
            "shared_embedding_and_softmax_weights",
            "attention_use_bias",
            "ffn_use_bias",
            "final_logits_bias",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a bool, got {name}={getattr(self, name)!r}.")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                "`hidden_size` must be divisible by `num_heads`, got "
                f"hidden_size={self.hidden_size}, num_heads={self.num_heads}."
            )
        _checks.check_choice("self_attention_type", self.self_attention_type, SELF_ATTENTION_TYPES)
        _checks.check_choice("pos", self.pos, POSITION_SIGNALS)
        _checks.check_choice("ffn_activation", self.ffn_activation, ACTIVATIONS)
        _checks.check_choice("timescale_rule", self.timescale_rule, TIMESCALE_RULES)
        _checks.check_choice(
            "multiply_embedding_mode", self.multiply_embedding_mode, EMBEDDING_MODES
        )
        _checks.check_choice("decoder_start", self.decoder_start, DECODER_STARTS)
        if self.learning_rate_schedule not in _LEARNING_RATE_SCHEDULES:
            raise ValueError(
                f"`learning_rate_schedule` must be one of {_LEARNING_RATE_SCHEDULES}, got "
                f"learning_rate_schedule={self.learning_rate_schedule!r}."
            )


_BASE_V1 = {}
_BASE = {
    "norm_first": True,
    "attention_dropout": 0.1,
    "relu_dropout": 0.1,
    "learning_rate_warmup_steps": 8000,
    "learning_rate": 0.2,
    "optimizer_adam_beta2": 0.997,
    "learning_rate_schedule": RSQRT_DECAY,
    "learning_rate_constant": 2.0,
}
_TWO_LAYERS = {"num_encoder_layers": 2, "num_decoder_layers": 2, "num_heads": 4}
# t2t `transformer_relative`: transformer_base with relative self-attention, no timing signal.
_RELATIVE = {
    "self_attention_type": "dot_product_relative",
    "max_relative_position": 20,
    "pos": "none",
}

HPARAMS_SETS = {
    "transformer_tiny": {**_BASE, **_TWO_LAYERS, "hidden_size": 128, "filter_size": 512},
    "transformer_small": {**_BASE, **_TWO_LAYERS, "hidden_size": 256, "filter_size": 1024},
    "transformer_base_v1": _BASE_V1,
    "transformer_base": _BASE,
    "transformer_big": {
        **_BASE,
        "hidden_size": 1024,
        "filter_size": 4096,
        "num_heads": 16,
        "layer_prepostprocess_dropout": 0.3,
        "batch_size": 2048,
    },
    "transformer_relative": {**_BASE, **_RELATIVE},
    "transformer_relative_tiny": {
        **_BASE,
        **_RELATIVE,
        **_TWO_LAYERS,
        "hidden_size": 128,
        "filter_size": 512,
    },
}


def hparams(name, *, regime=None, schedule=None, **overrides):
    """Returns the hparams set `name` (t2t's name for a registered set of
    hyper-parameters) with `regime`'s settings and `overrides` applied, as a frozen
    `HParams`.

    Args:
        name: one of `HPARAMS_SETS` (`transformer_tiny`, `transformer_small`,
            `transformer_base_v1`, `transformer_base`, `transformer_big`,
            `transformer_relative`, `transformer_relative_tiny`).
        regime: None (the set's learning-rate settings) or a name in `REGIMES`:
            `"small_data"` (warm-up 200 steps, constant 0.35: `tfblocks-train`'s
            default, for a short run on a small corpus). A field named in `overrides`
            wins over it.
        schedule: the name `regime` had before 0.1.0, kept for one release
            (a `DeprecationWarning`).
        **overrides: `HParams` fields to change.

    Returns:
        A frozen `HParams`.

    Raises:
        ValueError: an unknown set, regime or field name (the message lists the
            valid ones), or an invalid value.

    Example:

    >>> hparams("transformer_base").optimizer_adam_beta2
    0.997
    >>> hparams("transformer_base", hidden_size=256).hidden_size
    256
    >>> hp = hparams("transformer_tiny", regime="small_data")
    >>> hp.learning_rate_warmup_steps, hp.learning_rate_constant
    (200, 0.35)
    """
    if schedule is not None:
        warnings.warn(
            "hparams(schedule=...) is deprecated and will be removed in the next release; "
            "use hparams(regime=...)",
            DeprecationWarning,
            stacklevel=2,
        )
        regime = schedule if regime is None else regime
    if name not in HPARAMS_SETS:
        raise ValueError(
            f"Unknown hparams set name={name!r}; valid sets: {', '.join(sorted(HPARAMS_SETS))}."
        )
    if regime is not None:
        _checks.check_choice("regime", regime, tuple(REGIMES))
    fields = [f.name for f in dataclasses.fields(HParams)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(
            f"Unknown HParams field(s) {unknown} for hparams set {name!r}; valid fields: "
            f"{', '.join(fields)}."
        )
    settings = REGIMES[regime] if regime is not None else {}
    return HParams(**{**HPARAMS_SETS[name], **settings, **overrides})


def parse_overrides(text):
    """Parses `"key=value,key=value"` into typed `HParams` overrides (`--hparams-override`).

    Values are converted to the type of the field's default (bool accepts
    true/false/1/0). Unknown keys raise `ValueError` listing the valid ones.

    Example:

    >>> parse_overrides("hidden_size=64, norm_first=false")
    {'hidden_size': 64, 'norm_first': False}
    """
    if not text:
        return {}
    fields = {f.name: f for f in dataclasses.fields(HParams)}
    defaults = dataclasses.asdict(hparams("transformer_tiny"))
    overrides = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"`--hparams-override` items must be key=value, got {item!r}.")
        if key not in fields:
            raise ValueError(
                f"Unknown hparams field {key!r} in --hparams-override; valid: {sorted(fields)}."
            )
        kind = type(defaults[key])
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"`{key}` must be true or false, got {key}={value!r}.")
            overrides[key] = value.lower() in ("true", "1")
        else:
            try:
                overrides[key] = kind(value)
            except ValueError as error:
                raise ValueError(
                    f"`{key}` must be a {kind.__name__}, got {key}={value!r}."
                ) from error
    return overrides
