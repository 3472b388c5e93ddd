"""Fused q/k/v projection on and off: the same tfblocks model, alternated in one process.

`MultiHeadAttention` projects q, k and v of self-attention (k and v of
cross-attention) with one matmul over the concatenated `Dense` kernels. This script
builds the model of `train_throughput.py`'s `layers` recipe twice — once traced with
that fusion disabled (three `Dense` calls, the previous code path) and once with it —
and times their training steps in alternated rounds. Reported: median step times and
the median of the per-round ratios unfused / fused (> 1: fusion is faster).

Run:  python benchmarks/fused_projection.py --shapes base big
      python benchmarks/fused_projection.py --quick
"""

import argparse
import statistics
import time

import keras
from train_throughput import SHAPES, compile_layers_only, load, make_batch, shape_hparams

from tfblocks import build_transformer
from tfblocks.layers.attention import MultiHeadAttention


def build(hp, x, y, fused, warmup):
    """A compiled model whose train step was traced with fusion on or off."""
    keras.utils.set_random_seed(0)
    model = compile_layers_only(build_transformer(hp))
    original = MultiHeadAttention._can_fuse
    if not fused:
        MultiHeadAttention._can_fuse = lambda self, denses: False
    try:
        for _ in range(warmup):  # traces (and compiles) the step with the flag in force
            loss = model.train_on_batch(x, y, return_dict=True)["loss"]
    finally:
        MultiHeadAttention._can_fuse = original
    return model, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["base"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: shape quick, 1 round of 1 step"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.shapes, args.rounds, args.steps, args.warmup = ["quick"], 1, 1, 1
    print(f"start {load()}")
    for name in args.shapes:
        _, hp, batch, length = shape_hparams(name, "layers")
        x, y = make_batch(hp, batch, length)
        models = {}
        for label, fused in (("unfused", False), ("fused", True)):
            models[label], loss = build(hp, x, y, fused, args.warmup)
            print(f"shape {name} {label}: loss after warm-up {loss:.4f}")
        seconds = {label: [] for label in models}
        for _ in range(args.rounds):
            for label, model in models.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    model.train_on_batch(x, y)
                seconds[label].append((time.perf_counter() - start) / args.steps)
        ratios = [u / f for u, f in zip(seconds["unfused"], seconds["fused"], strict=True)]
        print(
            f"shape {name}: unfused {statistics.median(seconds['unfused']) * 1e3:.1f} ms/step, "
            f"fused {statistics.median(seconds['fused']) * 1e3:.1f} ms/step, unfused/fused "
            f"{statistics.median(ratios):.3f}× (range {min(ratios):.3f}–{max(ratios):.3f}, "
            f"{args.rounds} rounds)"
        )
    print(f"end {load()}")


if __name__ == "__main__":
    main()
