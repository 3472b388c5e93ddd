"""The `Transformer`'s constructor arguments, checked and normalized in one place.

`check_arguments` is the constructor's first step: every argument is validated with an
error that names it and echoes the value, and what it returns (ints as ints, dropout rates
as floats, switches as bools) is what the model keeps as attributes and returns from
`get_config`. `HParams` checks its fields against the same constants.
"""

import inspect

from tfblocks import _checks
from tfblocks.layers.embedding import TIMESCALE_RULES
from tfblocks.layers.feed_forward import ACTIVATIONS

LAYER_NORM_EPSILON = 1e-6
DECODER_STARTS = ("bos", "zeros")


def check_arguments(
    *,
    vocab_size,
    hidden_size,
    filter_size,
    num_heads,
    num_encoder_layers,
    num_decoder_layers,
    dropout,
    attention_dropout,
    relu_dropout,
    norm_first,
    shared_embedding_and_softmax_weights,
    max_relative_position,
    add_timing_signal,
    ffn_activation,
    attention_use_bias,
    ffn_use_bias,
    norm_epsilon,
    scale_embedding,
    timescale_rule,
    max_positions,
    position_offset,
    decoder_start,
    source_vocab_size,
    final_logits_bias,
):
    """Checks the arguments of `Transformer(...)` (documented there) and normalizes them.

    Returns:
        A dict of the arguments by name, in the constructor's order: the model's
        attributes and its `get_config` entries.

    Raises:
        ValueError: naming the first bad argument and echoing its value.
    """
    vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
    hidden_size = _checks.check_positive_int("hidden_size", hidden_size)
    filter_size = _checks.check_positive_int("filter_size", filter_size)
    num_heads = _checks.check_positive_int("num_heads", num_heads)
    num_encoder_layers = _checks.check_non_negative_int("num_encoder_layers", num_encoder_layers)
    num_decoder_layers = _checks.check_positive_int("num_decoder_layers", num_decoder_layers)
    dropout = _checks.check_rate("dropout", dropout)
    attention_dropout = _checks.check_rate("attention_dropout", attention_dropout)
    relu_dropout = _checks.check_rate("relu_dropout", relu_dropout)
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`, got "
            f"hidden_size={hidden_size}, num_heads={num_heads}."
        )
    max_relative_position = _checks.check_optional_positive_int(
        "max_relative_position", max_relative_position
    )
    _checks.check_choice("ffn_activation", ffn_activation, ACTIVATIONS)
    for name, value in (
        ("attention_use_bias", attention_use_bias),
        ("ffn_use_bias", ffn_use_bias),
        ("scale_embedding", scale_embedding),
        ("final_logits_bias", final_logits_bias),
    ):
        _checks.check_bool(name, value)
    norm_epsilon = _checks.check_positive_float("norm_epsilon", norm_epsilon)
    _checks.check_choice("timescale_rule", timescale_rule, TIMESCALE_RULES)
    max_positions = _checks.check_optional_positive_int("max_positions", max_positions)
    position_offset = _checks.check_non_negative_int("position_offset", position_offset)
    _checks.check_choice("decoder_start", decoder_start, DECODER_STARTS)
    source_vocab_size = _checks.check_optional_positive_int("source_vocab_size", source_vocab_size)
    if source_vocab_size is not None and num_encoder_layers == 0:
        raise ValueError(
            "A decoder-only language model (num_encoder_layers=0) has no source "
            f"vocabulary, got source_vocab_size={source_vocab_size}."
        )
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "filter_size": filter_size,
        "num_heads": num_heads,
        "num_encoder_layers": num_encoder_layers,
        "num_decoder_layers": num_decoder_layers,
        "dropout": dropout,
        "attention_dropout": attention_dropout,
        "relu_dropout": relu_dropout,
        "norm_first": bool(norm_first),
        "shared_embedding_and_softmax_weights": bool(shared_embedding_and_softmax_weights),
        "max_relative_position": max_relative_position,
        "add_timing_signal": bool(add_timing_signal),
        "ffn_activation": ffn_activation,
        "attention_use_bias": attention_use_bias,
        "ffn_use_bias": ffn_use_bias,
        "norm_epsilon": norm_epsilon,
        "scale_embedding": scale_embedding,
        "timescale_rule": timescale_rule,
        "max_positions": max_positions,
        "position_offset": position_offset,
        "decoder_start": decoder_start,
        "source_vocab_size": source_vocab_size,
        "final_logits_bias": final_logits_bias,
    }


# The constructor's arguments in order (without `dtype` and the `keras.Model` ones): the
# model's attributes and its `get_config` entries.
ARGUMENTS = tuple(inspect.signature(check_arguments).parameters)
