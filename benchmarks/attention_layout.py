"""Cached attention with k/v heads first `[B, H, S, d]` against `[B, S, H, d]`, alternated.

`MultiHeadAttention` keeps its decoding caches heads first, the layout its two
products (`q·kᵀ`, `weights·v`, batched over b and h) want. This script times the one
place q, k and v meet (`MultiHeadAttention._compute_attention`) on the same numbers
in both layouts: an XLA-compiled loop of `--steps` decoding steps, each one query per
row (`rows` = batch × beam) against a cache of `length` positions, as a beam search
calls it. Reported per shape: the median time of one step in each layout over
alternated rounds and the median of the per-round ratios `[B, S, H, d]` / heads first
(> 1: heads first is faster).

Run:  python benchmarks/attention_layout.py --rows 128 --lengths 16 32 64
      python benchmarks/attention_layout.py --quick
"""

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf
from train_throughput import load

from tfblocks.layers.attention import MultiHeadAttention


def step_loop(layer, steps, heads_first):
    """An XLA-compiled loop of `steps` attention steps over a fixed cache (k, v)."""

    @tf.function(jit_compile=True, autograph=False)
    def run(q, k, v):
        def body(i, total):
            shifted = q + tf.cast(i, q.dtype) * 1e-3  # a different query each step
            out, _ = layer._compute_attention(shifted, k, v, heads_first=heads_first)
            return i + 1, total + out

        _, total = tf.while_loop(lambda i, _: i < steps, body, (tf.constant(0), tf.zeros_like(q)))
        return total

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=128, help="batch × beam (default 128)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.lengths, args.dim, args.heads = 4, [8], 16, 2
        args.steps, args.rounds = 3, 1
    print(f"start {load()}")
    depth = args.dim // args.heads
    layer = MultiHeadAttention(num_heads=args.heads)
    rng = np.random.default_rng(0)
    print(f"rows {args.rows}, d {args.dim}, {args.heads} heads, {args.steps} steps a call")
    print(f"{'length':>6}  {'[B,S,H,d] ms':>12}  {'heads first ms':>14}  ratio")
    for length in args.lengths:
        q = tf.constant(rng.normal(size=(args.rows, 1, args.heads, depth)), tf.float32)
        k = tf.constant(rng.normal(size=(args.rows, length, args.heads, depth)), tf.float32)
        v = tf.constant(rng.normal(size=(args.rows, length, args.heads, depth)), tf.float32)
        inputs = {
            False: (q, k, v),
            True: (q, tf.transpose(k, (0, 2, 1, 3)), tf.transpose(v, (0, 2, 1, 3))),
        }
        loops = {first: step_loop(layer, args.steps, first) for first in inputs}
        results = {first: loops[first](*inputs[first]).numpy() for first in inputs}  # compiles
        np.testing.assert_allclose(results[True], results[False], rtol=1e-4, atol=1e-4)
        seconds = {first: [] for first in inputs}
        for _ in range(args.rounds):
            for first in inputs:
                start = time.perf_counter()
                loops[first](*inputs[first]).numpy()
                seconds[first].append((time.perf_counter() - start) / args.steps)
        ratios = [s / f for s, f in zip(seconds[False], seconds[True], strict=True)]
        print(
            f"{length:>6}  {statistics.median(seconds[False]) * 1e3:>12.3f}  "
            f"{statistics.median(seconds[True]) * 1e3:>14.3f}  {statistics.median(ratios):.2f}× "
            f"(range {min(ratios):.2f}–{max(ratios):.2f}, {args.rounds} rounds)"
        )
    print(f"end {load()}")


if __name__ == "__main__":
    main()
