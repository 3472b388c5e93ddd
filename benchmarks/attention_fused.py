"""MultiHeadAttention's fused path (`keras.ops.dot_product_attention`) vs its reference path.

Times the forward pass of one causal self-attention layer at inference (a padding mask
on the second half of every other row, no scores requested) with `fused=False` (einsum,
float32 masked softmax, einsum) and `fused=True`, the same weights, inside a
`tf.function` with `jit_compile` on and off. The two layers alternate for `--rounds`
rounds; the table gives the median time per call and the ratio reference / fused
(above 1: the fused path is faster). Default shapes (batch × length × d_model × heads):
32 × 64 × 256 × 4 and 8 × 256 × 512 × 8.

Run:  python benchmarks/attention_fused.py
      python benchmarks/attention_fused.py --quick      # seconds-long smoke run
"""

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf

from tfblocks.layers import MultiHeadAttention

SHAPES = ((32, 64, 256, 4), (8, 256, 512, 8))


def make_call(layer, jit_compile):
    @tf.function(jit_compile=jit_compile)
    def call(x, mask):
        return layer(x, x, query_mask=mask, value_mask=mask, use_causal_mask=True)

    return call


def seconds_per_call(fn, x, mask, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn(x, mask).numpy()
    return (time.perf_counter() - start) / calls


def measure(shape, jit_compile, rounds, calls):
    batch, length, dim, heads = shape
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(batch, length, dim)).astype("float32"))
    mask = np.ones((batch, length), bool)
    mask[::2, length // 2 :] = False
    mask = tf.constant(mask)
    reference = MultiHeadAttention(heads)
    fused = MultiHeadAttention(heads, fused=True)
    reference(x, x)
    fused(x, x)
    fused.set_weights(reference.get_weights())
    fns = {"reference": make_call(reference, jit_compile), "fused": make_call(fused, jit_compile)}
    outputs = {name: fn(x, mask).numpy() for name, fn in fns.items()}  # compile, warm up
    np.testing.assert_allclose(outputs["fused"], outputs["reference"], atol=1e-4)
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(seconds_per_call(fn, x, mask, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per round")
    parser.add_argument("--quick", action="store_true", help="smoke run: one tiny shape, 1 round")
    args = parser.parse_args(argv)
    args.shapes = SHAPES
    if args.quick:
        args.shapes, args.rounds, args.calls = ((2, 8, 16, 2),), 1, 1
    if args.rounds < 1 or args.calls < 1:
        parser.error(f"--rounds and --calls must be >= 1, got {vars(args)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    print(
        "MultiHeadAttention forward, inference, causal + padding masks, float32, CPU; "
        f"median of {args.rounds} rounds × {args.calls} calls"
    )
    print(f"{'B×T×d×H':<14} {'mode':<7} {'reference':>10} {'fused':>10}  reference/fused")
    for shape in args.shapes:
        label = "×".join(map(str, shape))
        for jit_compile in (False, True):
            t = measure(shape, jit_compile, args.rounds, args.calls)
            mode = "XLA" if jit_compile else "no XLA"
            print(
                f"{label:<14} {mode:<7} {t['reference'] * 1e3:>7.2f} ms "
                f"{t['fused'] * 1e3:>7.2f} ms  {t['reference'] / t['fused']:.2f}×"
            )


if __name__ == "__main__":
    main()
