"""tfblocks.models.complexity: parameters equal count_params(), FLOPs equal the traced
graph's matmuls."""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from tfblocks import MultiHeadAttention, TransformerBlock
from tfblocks.models import complexity


def matmul_flops(fn, *specs):
    """2·(multiply-adds) of every matmul/einsum in the traced graph of `fn` (static shapes)."""
    graph = tf.function(fn).get_concrete_function(*specs).graph
    flops = 0
    for op in graph.get_operations():
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a = op.inputs[0].shape.as_list()
            adjoint = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            contracted = a[-2] if adjoint else a[-1]
            flops += 2 * math.prod(op.outputs[0].shape.as_list()) * contracted
        elif op.type == "Einsum":
            inputs, _ = op.get_attr("equation").decode().split("->")
            sizes = {}
            for letters, tensor in zip(inputs.split(","), op.inputs, strict=True):
                sizes.update(zip(letters, tensor.shape.as_list(), strict=True))
            flops += 2 * math.prod(sizes.values())
        elif re.search(r"Conv|MatMul|Einsum", op.type):
            raise AssertionError(f"unexpected op {op.type}")
    return flops


@pytest.mark.parametrize(
    ("kwargs", "cross"),
    [
        ({"num_heads": 8, "filter_size": 2048}, False),
        ({"num_heads": 4, "filter_size": 64, "causal": True, "cross_attention": True}, True),
        ({"num_heads": 2, "filter_size": 48, "causal": True, "attention_window": 8}, False),
        ({"num_heads": 2, "filter_size": 48, "attention_window": 5}, False),
    ],
)
def test_block_cost_matches_count_params_and_graph(kwargs, cross):
    d = 512 if kwargs["num_heads"] == 8 else 32
    n, s = 20, 13
    block = TransformerBlock(**kwargs)
    x_spec = tf.TensorSpec((1, n, d), tf.float32)
    c_spec = tf.TensorSpec((1, s, d), tf.float32)
    if cross:
        block(np.zeros((1, n, d), "float32"), context=np.zeros((1, s, d), "float32"))
        flops = matmul_flops(lambda x, c: block(x, context=c), x_spec, c_spec)
    else:
        block(np.zeros((1, n, d), "float32"))
        flops = matmul_flops(lambda x: block(x), x_spec)
    costs = complexity.block_cost(
        d,
        kwargs["filter_size"],
        kwargs["num_heads"],
        n,
        context_length=s if cross else None,
        cross_attention=cross,
        attention_window=kwargs.get("attention_window"),
        causal=kwargs.get("causal", False),
    )
    assert complexity.total(costs).params == block.count_params()
    assert complexity.total(costs).flops == flops


def test_attention_with_bias_and_key_dim():
    mha = MultiHeadAttention(num_heads=3, key_dim=5, use_bias=True)
    mha(np.zeros((1, 4, 12), "float32"), np.zeros((1, 6, 12), "float32"))
    costs = complexity.attention_cost(12, 3, 4, kv_length=6, key_dim=5, use_bias=True)
    assert complexity.total(costs).params == mha.count_params()


def test_notes_arithmetic():
    # One base block ≈ 3 M parameters; attention ≈ 1 M (4·512²), FFN ≈ 2 M (2·512·2048).
    costs = complexity.block_cost(512, 2048, 8, length=512)
    attention = sum(v.params for k, v in costs.items() if k.startswith("self_"))
    assert attention == 4 * 512**2
    assert costs["ffn"].params == 2 * 512 * 2048 + 2048 + 512
    # A dense layer over 512 tokens × 512 dims needs 512⁴ ≈ 68.7 G weights.
    assert complexity.dense_over_sequence_cost(512, 512).params == 512**4
    # Projections are O(n·d²), scores O(n²·d): doubling n doubles one, quadruples the other.
    long = complexity.block_cost(512, 2048, 8, length=1024)
    assert long["self_q_projection"].flops == 2 * costs["self_q_projection"].flops
    assert long["self_attention_scores"].flops == 4 * costs["self_attention_scores"].flops
    # Restricted attention is O(r·n·d): linear in n.
    local = [
        complexity.block_cost(512, 2048, 8, n, attention_window=64)["self_attention_scores"]
        for n in (1024, 2048)
    ]
    assert local[1].flops == 2 * local[0].flops
    assert complexity.conv1d_cost(512, 100, 3).flops == 2 * 3 * 100 * 512**2


def test_bad_arguments():
    with pytest.raises(ValueError, match="length=0"):
        complexity.attention_cost(512, 8, 0)
    with pytest.raises(ValueError, match="context_length"):
        complexity.block_cost(512, 2048, 8, 10, cross_attention=True)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": False},
        {"shared_embedding_and_softmax_weights": False},
    ],
)
def test_model_cost_params_equal_count_params(overrides):
    from tfblocks import build_transformer, hparams

    hp = hparams("transformer_tiny", vocab_size=500, **overrides)
    costs = complexity.model_cost(hp, source_length=12, target_length=9)
    assert complexity.total(costs).params == build_transformer(hp).count_params()
    assert costs["softmax"].flops == 2 * 9 * hp.hidden_size * 500


def test_model_cost_flops_match_the_traced_model():
    from tfblocks import build_transformer, hparams

    hp = hparams("transformer_tiny", vocab_size=300)
    model = build_transformer(hp)
    flops = matmul_flops(
        lambda src, tgt: model({"inputs": src, "targets": tgt}),
        tf.TensorSpec((1, 12), tf.int32),
        tf.TensorSpec((1, 9), tf.int32),
    )
    assert complexity.total(complexity.model_cost(hp, 12, 9)).flops == flops


@pytest.mark.parametrize("encoders", [2, 0])
def test_model_cost_of_the_model_object_equals_count_params(encoders):
    from tfblocks.models import build_language_model, build_transformer, hparams

    hp = hparams("transformer_tiny", vocab_size=500, num_encoder_layers=encoders,
                 shared_embedding_and_softmax_weights=False)  # fmt: skip
    model = (build_transformer if encoders else build_language_model)(hp)
    assert complexity.total(complexity.model_cost(model, 10, 12)).params == model.count_params()
