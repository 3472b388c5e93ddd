"""Gradient accumulation's cost per token: n micro-batches per update vs one batch n times larger.

Trains `build_transformer` + `compile_transformer` (XLA by default) from the same initial
weights three ways on the same generated rows (random ids, `--length` tokens each, no
padding), the same tokens each:

- `one batch`: batches of `n · rows` rows, one update per batch (`--updates` per round);
- `small batches`: batches of `rows` rows, one update per batch (n times the updates);
- `accumulated`: `accumulate_steps=n`, batches of `rows` rows, one update per n batches.

They alternate for `--rounds` rounds (one `fit` each; the compilation happens before the
first round). The script prints target tokens per second and the process's CPU time per
token (medians over rounds) and the ratios of `accumulated` to the two others: to `one
batch`, the cost per token of accumulating (to stay within 5 %), and to `small batches`,
what the accumulation itself adds to batches of that size. On a shared machine the CPU
time is the steadier figure.

Run:  python benchmarks/accumulation.py                   # transformer_tiny, 4 x 32 rows of 32
      python benchmarks/accumulation.py --hparams transformer_small --steps 8
      python benchmarks/accumulation.py --quick           # seconds-long smoke run

Figures: benchmarks/README.md.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from tfblocks import build_transformer, compile_transformer, hparams


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", default="transformer_tiny", help="the preset")
    parser.add_argument("--steps", type=int, default=4, help="micro-batches per update (n)")
    parser.add_argument("--rows", type=int, default=32, help="rows of a micro-batch")
    parser.add_argument("--length", type=int, default=32, help="tokens per row, both sides")
    parser.add_argument("--updates", type=int, default=8, help="updates per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--no-xla", action="store_true", help="train without XLA")
    parser.add_argument("--quick", action="store_true", help="smoke run: a tiny model, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.length, args.updates, args.rounds, args.vocab_size = 4, 8, 1, 1, 100
    sizes = (args.steps, args.rows, args.length, args.updates, args.rounds)
    if min(sizes) < 1 or args.steps < 2 or args.vocab_size < 8:
        parser.error(f"sizes must be >= 1, --steps >= 2, --vocab-size >= 8, got {vars(args)}")
    return args


def make_model(args, steps, initial):
    quick = {"hidden_size": 32, "filter_size": 64, "num_heads": 2} if args.quick else {}
    hp = hparams(args.hparams, vocab_size=args.vocab_size, accumulate_steps=steps, **quick)
    model = build_transformer(hp)
    if initial is not None:
        model.set_weights(initial)
    return compile_transformer(model, hp, jit_compile=not args.no_xla, learning_rate=1e-4)


def dataset(args, rows):
    """Endless batches of `rows` rows, drawn from one fixed set of generated rows."""
    rng = np.random.default_rng(0)
    ids = rng.integers(4, args.vocab_size, (args.rows * args.steps * 4, args.length))
    ids = ids.astype("int32")
    pairs = tf.data.Dataset.from_tensor_slices(({"inputs": ids, "targets": ids}, ids))
    return pairs.repeat().batch(rows, drop_remainder=True).prefetch(2)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    runs = {}  # name -> (model, data, batches per round)
    initial = None
    for name, steps, rows in (
        ("one batch", 1, args.rows * args.steps),
        ("small batches", 1, args.rows),
        ("accumulated", args.steps, args.rows),
    ):
        model = make_model(args, steps, initial)
        initial = initial or model.get_weights()
        data = dataset(args, rows)
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)  # compile
        runs[name] = (model, data, args.updates * args.steps * args.rows // rows)
    tokens = args.updates * args.steps * args.rows * args.length  # targets per round
    seconds = {name: [] for name in runs}
    cpu = {name: [] for name in runs}  # CPU time of the process: less sensitive to load
    for _ in range(args.rounds):
        for name, (model, data, batches) in runs.items():  # A B C A B C …
            start, start_cpu = time.perf_counter(), time.process_time()
            model.fit(data, steps_per_epoch=batches, epochs=1, verbose=0, shuffle=False)
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    print(
        f"{args.hparams}{' (quick)' if args.quick else ''}, {'no XLA' if args.no_xla else 'XLA'}"
        f", {args.steps} micro-batches of {args.rows} rows x {args.length} tokens per update"
        f", {tokens} target tokens per round, median of {args.rounds} rounds"
    )
    print(f"{'':<15}{'rows/batch':>11}{'batches':>9}{'tokens/s':>10}{'CPU us/token':>14}")
    wall = {name: statistics.median(seconds[name]) / tokens for name in runs}
    cpus = {name: statistics.median(cpu[name]) / tokens for name in runs}
    for name, (_, _, batches) in runs.items():
        rows = args.updates * args.steps * args.rows // batches
        print(f"{name:<15}{rows:>11}{batches:>9}{1 / wall[name]:>10.0f}{cpus[name] * 1e6:>14.1f}")
    for peer in ("one batch", "small batches"):
        for what, per_token in (("time", wall), ("CPU time", cpus)):
            ratio = per_token["accumulated"] / per_token[peer]
            print(
                f"{what} per token, accumulated / {peer}: {ratio:.3f}× ({(ratio - 1) * 100:+.1f}%)"
            )


if __name__ == "__main__":
    main()
