"""Training-step throughput of tfblocks under Keras' JAX backend against TensorFlow.

The same model and recipe on both: `build_transformer(hp)` + `compile_transformer(hp)`
(t2t's smoothed cross-entropy, metrics, Adam and schedule, the preset's dropouts), the
step compiled (`jax.jit` under JAX, XLA under TensorFlow), one full training step
(`train_on_batch`: forward, loss, backward, Adam) on random full-length batches of a
`benchmarks/shapes.py` shape (default `base`: transformer_base width, vocab 8000,
batch 8 × 64). Each backend runs in a process of its own (the backend is chosen before
Keras loads); a round runs TensorFlow then JAX, each with `--warmup` untimed steps
(compilation) then `--steps` timed ones. Reported: each backend's median step time and
target tokens/s over the rounds, and the median of the per-round ratios TensorFlow time /
JAX time (above 1: JAX is faster). The load average before and after is printed.

Run:  python benchmarks/backends.py                     # base, 3 rounds
      python benchmarks/backends.py --shape a --rounds 5
      python benchmarks/backends.py --quick             # smoke run (tiny shape)

Figures: benchmarks/README.md. The parent process imports neither TensorFlow nor JAX.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from shapes import SHAPES

BACKENDS = ("tensorflow", "jax")


def child(args):
    """In a process whose KERAS_BACKEND is set: times the step, prints one JSON line."""
    import keras
    import numpy as np
    from train_throughput import time_steps

    from tfblocks.models import build_transformer, hparams
    from tfblocks.training import compile_transformer

    preset, overrides, batch, length = SHAPES[args.shape]
    hp = hparams(preset, **overrides)
    rng = np.random.default_rng(0)
    source, target = (rng.integers(4, hp.vocab_size, (batch, length)).astype("int32") for _ in "st")
    model = compile_transformer(build_transformer(hp), hp, jit_compile=True)
    x = {"inputs": source, "targets": target}
    time_steps(model, x, target, args.warmup)
    seconds = time_steps(model, x, target, args.steps)
    print(
        json.dumps(
            {"backend": keras.backend.backend(), "seconds": seconds, "tokens": batch * length}
        )
    )


def run_child(backend, args):
    env = {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, __file__, "--child", "--shape", args.shape]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"the {backend} process failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["backend"] != backend:
        sys.exit(f"asked for backend {backend}, the process ran {result['backend']}")
    return result


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="base")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per backend per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny shape, 1 round")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.shape, args.rounds, args.steps, args.warmup = "quick", 1, 2, 1
    if args.child:
        return child(args)
    print(f"shape {args.shape} {SHAPES[args.shape]}, {args.rounds} rounds × {args.steps} steps")
    print(f"load average before: {load()}")
    times = {backend: [] for backend in BACKENDS}
    ratios = []
    for round_index in range(args.rounds):
        results = {backend: run_child(backend, args) for backend in BACKENDS}
        for backend, result in results.items():
            times[backend].append(result["seconds"])
        ratios.append(results["tensorflow"]["seconds"] / results["jax"]["seconds"])
        print(f"round {round_index + 1}: " + ", ".join(
            f"{b} {r['seconds'] * 1e3:.1f} ms" for b, r in results.items()
        ))  # fmt: skip
    tokens = results["tensorflow"]["tokens"]
    print(f"load average after: {load()}")
    print("\n| backend | step (ms, median) | target tokens/s |")
    print("|---|---:|---:|")
    for backend in BACKENDS:
        step = statistics.median(times[backend])
        print(f"| {backend} | {step * 1e3:.1f} | {tokens / step:.0f} |")
    print(
        f"\nTensorFlow time / JAX time: {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}–{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
