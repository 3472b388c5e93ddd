"""Dropout alone: tfblocks' HashDropout vs keras.layers.Dropout, with and without XLA.

Applies ten dropout layers (rate 0.1) in a row to a float32 tensor of `--shape`
(default 32 × 64 × 1024, shape (a)'s FFN activations) inside a `tf.function`, with
`jit_compile` on and off, alternating the layers for `--rounds` rounds, and prints
the median time per dropout call and per element, and the ratio.

HashDropout computes its hash mask inline under XLA and, without XLA, through a small
XLA-compiled call for tensors of `COMPILE_MIN_ELEMENTS` or more (see
`tfblocks/layers/dropout.py`); the row "no XLA, hash" forces the inline hash without XLA
(one TensorFlow kernel per integer op), which the layer uses there only for smaller tensors.

Run:  python benchmarks/dropout.py
      python benchmarks/dropout.py --quick      # seconds-long smoke run

Figures: benchmarks/README.md.
"""

import argparse
import math
import statistics
import time

import keras
import tensorflow as tf

from tfblocks.layers import HashDropout, dropout

CHAIN = 10  # dropout layers applied one after the other per timed call


def make_chain(layer_cls, jit_compile, force_hash=False):
    layers = [layer_cls(0.1, seed=i) for i in range(CHAIN)]

    @tf.function(jit_compile=jit_compile)
    def chain(x):
        saved = dropout.in_xla_context
        if force_hash:  # while tracing: take the hash path outside XLA too
            dropout.in_xla_context = lambda: True
        try:
            for layer in layers:
                x = layer(x, training=True)
        finally:
            dropout.in_xla_context = saved
        return x

    return chain


def seconds_per_call(fn, x, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn(x).numpy()
    return (time.perf_counter() - start) / calls / CHAIN


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs="+", default=[32, 64, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="timed calls per round")
    parser.add_argument("--quick", action="store_true", help="smoke run: a 2 × 16 tensor, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.shape, args.rounds, args.calls = [2, 16], 1, 1
    if args.rounds < 1 or args.calls < 1 or min(args.shape) < 1:
        parser.error(f"--rounds, --calls and --shape must be >= 1, got {vars(args)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    x = tf.random.normal(args.shape)
    size = math.prod(args.shape)
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}; tensor {args.shape} float32")
    print(f"{'':<14}{'Keras Dropout':>20}{'HashDropout':>20}{'Keras / Hash':>14}")
    for label, jit_compile, force_hash in (
        ("XLA", True, False),
        ("no XLA", False, False),
        ("no XLA, hash", False, True),
    ):
        fns = {
            "keras": make_chain(keras.layers.Dropout, jit_compile),
            "hash": make_chain(HashDropout, jit_compile, force_hash),
        }
        times = {name: [] for name in fns}
        for fn in fns.values():
            fn(x).numpy()  # trace and compile
        for _ in range(args.rounds):
            for name, fn in fns.items():  # A B A B …
                times[name].append(seconds_per_call(fn, x, args.calls))
        keras_s, hash_s = (statistics.median(times[name]) for name in ("keras", "hash"))
        print(
            f"{label:<14}{keras_s * 1e3:>9.3f} ms {keras_s / size * 1e9:>5.2f} ns/el"
            f"{hash_s * 1e3:>9.3f} ms {hash_s / size * 1e9:>5.2f} ns/el{keras_s / hash_s:>13.2f}×"
        )
    print(f"per dropout call (median over {args.rounds} rounds of {args.calls} x {CHAIN} calls)")


if __name__ == "__main__":
    main()
