"""Tests for tfblocks.models.options: the Transformer's arguments, checked in one place."""

import inspect

import pytest

from tfblocks.models.options import ARGUMENTS, check_arguments
from tfblocks.models.transformer import Transformer

SMALL = dict(
    vocab_size=20, hidden_size=8, filter_size=16, num_heads=2, num_encoder_layers=1,
    num_decoder_layers=1,
)  # fmt: skip


def arguments(**overrides):
    """Every argument of `check_arguments`: the constructor's defaults, a small model."""
    parameters = inspect.signature(Transformer.__init__).parameters
    defaults = {
        name: parameters[name].default
        for name in ARGUMENTS
        if parameters[name].default is not inspect.Parameter.empty
    }
    return {**defaults, **SMALL, **overrides}


def test_arguments_are_the_constructors_in_order():
    parameters = list(inspect.signature(Transformer.__init__).parameters)
    assert parameters[0] == "self" and parameters[-2:] == ["dtype", "kwargs"]
    assert tuple(parameters[1:-2]) == ARGUMENTS


def test_get_config_holds_the_checked_arguments():
    model = Transformer(**SMALL, dropout=0, shared_embedding_and_softmax_weights=1)
    config = model.get_config()
    assert {name: config[name] for name in ARGUMENTS} == check_arguments(**arguments(dropout=0.0))
    assert isinstance(config["dropout"], float) and config["dropout"] == 0.0
    assert config["shared_embedding_and_softmax_weights"] is True
    assert list(config)[-len(ARGUMENTS) :] == list(ARGUMENTS)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"num_heads": 3}, "hidden_size=8, num_heads=3"),
        ({"norm_epsilon": 0}, "norm_epsilon=0"),
        ({"num_encoder_layers": 0, "source_vocab_size": 9}, "source_vocab_size=9"),
    ],
)
def test_bad_arguments_are_named(overrides, words):
    with pytest.raises(ValueError, match=words):
        check_arguments(**arguments(**overrides))
