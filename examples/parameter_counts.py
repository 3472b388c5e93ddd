"""Parameter counts of the study notes, measured on real tfblocks layers.

The notes' arithmetic: one Transformer block at d = 512, H = 8, filter 2048 holds about
4·512² ≈ 1 M attention parameters and 2·512·2048 ≈ 2 M FFN parameters, while one fully
connected layer from 512 tokens × 512 dims to the same would need (512·512)² = 512⁴
weights; and "the FFN holds 3/4 of all parameters". This script builds the layers and
the whole `transformer_base` / `transformer_big` models, reads `count_params()` of each
part, asserts it equals the formula of `tfblocks.models.complexity`, and prints the
measured FFN share.
With f = 4d the FFN has 8d² weights against 4d² per attention, so it holds 2/3 of an
encoder block and 1/2 of a decoder block (57 % of the blocks): 3/4 is not what it measures.

Run:  python examples/parameter_counts.py
      [--hidden-size 512] [--num-heads 8] [--filter-size 2048]
      [--presets transformer_base transformer_big] [--vocab-size 32000]
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import numpy as np

from tfblocks.models import complexity


def check(name, measured, formula):
    """Asserts that a count_params() equals its formula and returns a table row."""
    assert measured == formula, f"{name}: count_params()={measured:,} but formula={formula:,}"
    return f"| {name} | {formula:,} | {measured:,} |"


def block_parts(block):
    """count_params() of each sub-layer of a built TransformerBlock."""
    norms = [block.self_attention_norm, block.ffn_norm]
    parts = {"self_attention": block.self_attention.count_params()}
    if block.cross_attention is not None:
        parts["cross_attention"] = block.cross_attention.count_params()
        norms.append(block.cross_attention_norm)
    parts["ffn"] = block.ffn.count_params()
    parts["layer_norm"] = sum(norm.count_params() for norm in norms)
    return parts


def formula_parts(costs):
    """Groups `complexity.block_cost` entries like `block_parts`."""
    parts = {}
    for name, value in costs.items():  # e.g. "self_q_projection", "cross_attention_scores"
        key = name.split("_")[0] + "_attention" if name.startswith(("self_", "cross_")) else name
        parts[key] = parts.get(key, 0) + value.params
    return parts


def one_block(d, heads, filter_size, decoder):
    """Builds one encoder (or decoder) block and prints its table; returns the FFN share."""
    block = tfblocks.TransformerBlock(heads, filter_size, causal=decoder, cross_attention=decoder)
    x = np.zeros((1, 4, d), "float32")
    block(x, context=x if decoder else None)
    costs = complexity.block_cost(
        d, filter_size, heads, 4, context_length=4 if decoder else None, cross_attention=decoder
    )
    measured, formula = block_parts(block), formula_parts(costs)
    kind = "decoder (self + cross-attention)" if decoder else "encoder"
    print(f"\nOne {kind} TransformerBlock, d={d}, H={heads} (depth {d // heads}), f={filter_size}")
    print("| part | formula | count_params() |\n|---|---:|---:|")
    for name in measured:
        print(check(name, measured[name], formula[name]))
    print(check("block total", block.count_params(), complexity.total(costs).params))
    share = measured["ffn"] / block.count_params()
    print(f"FFN share of the block: {share:.1%}")
    return block.count_params()


def fully_connected(d, block_params):
    """The notes' 512⁴ comparison, its formula checked on a small Dense layer."""
    small = keras.layers.Dense(8 * 8, use_bias=False)
    small.build((None, 8 * 8))  # 8 tokens × 8 dims, flattened
    dense_params = complexity.dense_over_sequence_cost(8, 8).params
    check("Dense(8·8 → 8·8)", small.count_params(), dense_params)
    params = complexity.dense_over_sequence_cost(d, d).params
    print(f"\nFully connected layer from {d} tokens × {d} dims to the same: ({d}·{d})² = {d}⁴")
    print(f"= {params:,} weights = {params / 1e9:.3g} G (= {params / 2**30:g} Gi)")
    print(f"= {params / block_params:,.0f} × one encoder block ({block_params:,})")
    print("(formula checked with count_params() of Dense(8·8 → 8·8) = 4,096)")


def whole_model(preset, vocab_size):
    """Builds `preset` and prints its parameters by component and the FFN share."""
    hp = tfblocks.hparams(preset, vocab_size=vocab_size)
    model = tfblocks.build_transformer(hp)
    groups = {"embedding (shared, tied softmax)": model.get_layer("embedding").count_params()}
    totals = {"self_attention": 0, "cross_attention": 0, "ffn": 0, "layer_norm": 0}
    for prefix, count in (("encoder", hp.num_encoder_layers), ("decoder", hp.num_decoder_layers)):
        for i in range(count):
            for name, params in block_parts(model.get_layer(f"{prefix}_layer_{i}")).items():
                totals[name] += params
        if hp.norm_first:
            totals["layer_norm"] += model.get_layer(f"{prefix}_norm").count_params()
    groups.update(totals)
    formula = complexity.total(complexity.model_cost(hp, 4, 4)).params
    print(
        f"\n{preset} (vocab {vocab_size:,}): d={hp.hidden_size}, f={hp.filter_size}, "
        f"H={hp.num_heads}, {hp.num_encoder_layers}+{hp.num_decoder_layers} layers"
    )
    print("| part | parameters | share |\n|---|---:|---:|")
    for name, params in groups.items():
        print(f"| {name} | {params:,} | {params / model.count_params():.1%} |")
    assert sum(groups.values()) == model.count_params() == formula, (groups, formula)
    print(f"| total = count_params() = formula | {formula:,} | 100% |")
    without_embedding = model.count_params() - groups["embedding (shared, tied softmax)"]
    print(
        f"FFN share: {totals['ffn'] / model.count_params():.1%} of the whole model, "
        f"{totals['ffn'] / without_embedding:.1%} without the embedding (notes: 75%)"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--filter-size", type=int, default=2048)
    parser.add_argument("--presets", nargs="*", default=["transformer_base", "transformer_big"])
    parser.add_argument("--vocab-size", type=int, default=32000)
    args = parser.parse_args()

    d, heads, f = args.hidden_size, args.num_heads, args.filter_size
    print(f"Q, K, V: each head projects {d} → {d // heads}; {heads} heads × {d}·{d // heads}")
    print(f"= {d * d:,} per projection, × 4 with W_O = {4 * d * d:,} (4·d²)")
    block_params = one_block(d, heads, f, decoder=False)
    one_block(d, heads, f, decoder=True)
    fully_connected(d, block_params)
    for preset in args.presets:
        whole_model(preset, args.vocab_size)
        keras.utils.clear_session()
    print("\nAll counts equal count_params() of the built layers.")


if __name__ == "__main__":
    main()
