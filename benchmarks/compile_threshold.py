"""Small tensors outside XLA: compiled call vs TensorFlow ops, and what a compilation costs.

Outside an XLA-compiled step (the translation job's default step), `HashDropout` and
the label-smoothed loss can run their work as one small XLA-compiled function, compiled
once per shape, or as ordinary TensorFlow ops. Both give the same values (the loss up
to rounding). This script measures, per size: the time of one call either way (forward
and gradient for the loss; the median of `--rounds` rounds of `--calls` calls,
alternated), their ratio TF ops / compiled, the first compiled call (compilation
included) and the break-even count = compilation / time saved per call,
i.e. how often a shape must recur before compiling it pays. The layers compile only at
and above `COMPILE_MIN_ELEMENTS` (dropout) and `COMPILE_MIN_LOGITS` (loss).

Run:  python benchmarks/compile_threshold.py
      python benchmarks/compile_threshold.py --quick      # smoke run: two sizes each

Figures: benchmarks/README.md.
"""

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf

from tfblocks.layers import dropout
from tfblocks.training import losses

DROPOUT_SHAPES = [(16, 16, 32), (32, 24, 128), (64, 24, 256), (128, 32, 512), (256, 32, 1024)]
LOSS_SHAPES = [(256, 250), (1024, 250), (1024, 1000), (4096, 1000), (4096, 8000)]  # [B·T, V]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per round")
    parser.add_argument("--quick", action="store_true", help="smoke run: two sizes each")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = 1, 2
    if min(args.rounds, args.calls) < 1:
        parser.error(f"--rounds and --calls must be >= 1, got {args.rounds} and {args.calls}")
    return args


def milliseconds(fn, arg, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn(arg).numpy()
    return (time.perf_counter() - start) / calls * 1e3


def compare(plain, compiled, arg, args):
    """(plain ms, compiled ms, first compiled call ms) for one size."""
    plain(arg).numpy()  # traces (no compilation)
    start = time.perf_counter()
    compiled(arg).numpy()
    first = (time.perf_counter() - start) * 1e3
    times = {"plain": [], "compiled": []}
    for _ in range(args.rounds):
        times["plain"].append(milliseconds(plain, arg, args.calls))
        times["compiled"].append(milliseconds(compiled, arg, args.calls))
    return statistics.median(times["plain"]), statistics.median(times["compiled"]), first


def dropout_pair(seed):
    def make(fn):
        return tf.function(lambda x: fn(x, seed, 0.1), autograph=False)

    return make(dropout.apply_hash_dropout), make(dropout._compiled_hash_dropout)


def loss_pair(ids, vocab):
    def make(fn):
        @tf.function(autograph=False)
        def forward_and_gradient(logits):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                total = tf.reduce_sum(fn(ids, logits, 0.9, 0.1 / (vocab - 1)))
            return tape.gradient(total, logits)

        return forward_and_gradient

    return make(losses._cross_entropy), make(losses._compiled_cross_entropy)


def row(label, size, threshold, plain, compiled, first):
    saved = plain - compiled
    even = f"{first / saved:9.0f}" if saved > 0 else f"{'never':>9}"
    side = "compiled" if size >= threshold else "TF ops"
    print(
        f"{label:<22} {size:>11,} {plain:>9.3f} {compiled:>9.3f} {plain / compiled:>8.2f}× "
        f"{first:>9.0f} {even}  {side}"
    )


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(0)
    header = (
        f"{'':<22} {'elements':>11} {'TF ops':>9} {'compiled':>9} {'TF/comp':>9} "
        f"{'compile':>9} {'break-even':>9}  the layers use"
    )
    print(f"TensorFlow {tf.__version__}; ms per call (median of {args.rounds} × {args.calls})")
    print(f"dropout (rate 0.1, float32), COMPILE_MIN_ELEMENTS = {dropout.COMPILE_MIN_ELEMENTS:,}")
    print(header)
    seed = tf.constant([1, 2])
    for shape in DROPOUT_SHAPES[:2] if args.quick else DROPOUT_SHAPES:
        x = tf.constant(rng.normal(size=shape).astype("float32"))
        size = int(np.prod(shape))
        times = compare(*dropout_pair(seed), x, args)
        row("x".join(map(str, shape)), size, dropout.COMPILE_MIN_ELEMENTS, *times)
    print(f"loss + gradient, COMPILE_MIN_LOGITS = {losses.COMPILE_MIN_LOGITS:,}")
    print(header)
    for tokens, vocab in LOSS_SHAPES[:2] if args.quick else LOSS_SHAPES:
        ids = tf.constant(rng.integers(1, vocab, (tokens // 16, 16)).astype("int32"))
        logits = tf.constant(rng.normal(size=(tokens // 16, 16, vocab)).astype("float32"))
        times = compare(*loss_pair(ids, vocab), logits, args)
        row(f"[{tokens}, {vocab}] logits", tokens * vocab, losses.COMPILE_MIN_LOGITS, *times)


if __name__ == "__main__":
    main()
