"""Matmul rate of this machine: float32 vs bfloat16, TensorFlow's kernels vs XLA.

Why `dtype_policy="auto"` (tfblocks/training/precision.py) trains in `mixed_bfloat16`
on a CPU with bfloat16 instructions only when the step runs without XLA: TensorFlow's
own MatMul (oneDNN on x86) and XLA's CPU dot may differ in how they run bfloat16.

For each size n, times `tf.matmul` of `[m, n] × [n, n]` (m = `--rows`, default 4096;
n = 2048 uses m = 2048) in a `tf.function` with and without `jit_compile`, in float32 and
bfloat16, and prints GFLOP/s (2·m·n² per product; median over `--rounds` rounds of
`--calls` calls) and the bfloat16 / float32 ratio.

Run:  python benchmarks/matmul_rate.py
      python benchmarks/matmul_rate.py --quick       # seconds-long smoke run

Figures: benchmarks/README.md.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smoke run: n = 64, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.rows, args.rounds, args.calls = [64], 64, 1, 1
    if min([*args.sizes, args.rows, args.rounds, args.calls]) < 1:
        parser.error(f"--sizes, --rows, --rounds and --calls must be >= 1, got {vars(args)}")
    return args


def rate(fn, a, b, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn(a, b).numpy()
    seconds = (time.perf_counter() - start) / calls
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / seconds / 1e9


def main(argv=None):
    args = parse_args(argv)
    print(f"TensorFlow {tf.__version__}; {os.cpu_count()} CPUs; GFLOP/s, median of {args.rounds}")
    print(f"{'n':>6} {'path':>6} {'float32':>9} {'bfloat16':>9} {'bf16/f32':>9}")
    results = {}
    for n in args.sizes:
        m = n if n >= 2048 else args.rows
        for jit in (False, True):
            fn = tf.function(tf.matmul, jit_compile=jit)
            rates = {}
            for dtype in (tf.float32, tf.bfloat16):
                a = tf.cast(tf.random.normal([m, n]), dtype)
                b = tf.cast(tf.random.normal([n, n]), dtype)
                fn(a, b).numpy()  # trace / compile
                rates[dtype.name] = statistics.median(
                    rate(fn, a, b, args.calls) for _ in range(args.rounds)
                )
            label = "XLA" if jit else "TF"
            results[n, label] = rates
            print(
                f"{n:>6} {label:>6} {rates['float32']:>9.1f} {rates['bfloat16']:>9.1f} "
                f"{rates['bfloat16'] / rates['float32']:>8.2f}×"
            )
    return results


if __name__ == "__main__":
    main()
