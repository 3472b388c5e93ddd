"""Tests for tfblocks.models.stacks: the encoder and decoder blocks and their one loop."""

import numpy as np
import pytest

from tests.models.test_options import arguments
from tfblocks.models.options import check_arguments
from tfblocks.models.stacks import make_stack, run_stack


def test_stacks_are_named_as_the_saved_weights_expect():
    config = check_arguments(**arguments(num_encoder_layers=2, num_decoder_layers=1))
    blocks, norm = make_stack("encoder", config)
    assert [b.name for b in blocks] == ["encoder_layer_0", "encoder_layer_1"]
    assert norm.name == "encoder_norm" and norm.epsilon == config["norm_epsilon"]
    assert not blocks[0].causal and blocks[0].cross_attention is None
    blocks, norm = make_stack("decoder", config)
    assert [b.name for b in blocks] == ["decoder_layer_0"] and norm.name == "decoder_norm"
    assert blocks[0].causal and blocks[0].cross_attention is not None


def test_language_model_and_post_ln_stacks():
    lm = check_arguments(**arguments(num_encoder_layers=0))
    assert make_stack("encoder", lm) == ([], None)
    blocks, _ = make_stack("decoder", lm)
    assert blocks[0].cross_attention is None
    post_ln = check_arguments(**arguments(norm_first=False))
    assert make_stack("decoder", post_ln)[1] is None


def test_run_stack_returns_what_the_blocks_return():
    config = check_arguments(**arguments(num_encoder_layers=2))
    blocks, norm = make_stack("encoder", config)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    out = run_stack(blocks, norm, x, padding_mask=mask)
    out_again, scores = run_stack(blocks, norm, x, return_attention_scores=True, padding_mask=mask)
    np.testing.assert_allclose(out, out_again, atol=1e-6)
    assert len(scores) == 2 and tuple(scores[0]["self_attention"].shape) == (2, 2, 5, 5)
    expected = x
    for block in blocks:
        expected = block(expected, padding_mask=mask)
    np.testing.assert_allclose(out, norm(expected), atol=1e-6)


def test_bad_stack_arguments_are_named():
    config = check_arguments(**arguments())
    with pytest.raises(ValueError, match="side='middle'"):
        make_stack("middle", config)
    blocks, norm = make_stack("decoder", check_arguments(**arguments(num_encoder_layers=0)))
    with pytest.raises(ValueError, match="return_attention_scores"):
        run_stack(
            blocks, norm, np.zeros((1, 1, 8), "float32"), caches=[{}], return_attention_scores=True
        )
