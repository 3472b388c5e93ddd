"""Data-parallel scaling on CPU: 1 worker vs 2 `MultiWorkerMirroredStrategy` workers.

Measures target tokens per second of `model.fit` on shape (a) (`transformer_small` with
vocab 8000, hidden 256, 4 heads, filter 1024, 3+3 layers; batch 32 *per worker* ×
length 64, no padding) with and without XLA:

- 1 worker: one process, no strategy, `compile_transformer(jit_compile=...)` (with XLA
  that is Keras' whole-step XLA, optimizer update included);
- 2 workers: two processes on 127.0.0.1 under `MultiWorkerMirroredStrategy`
  (`get_strategy("multi_worker")`), global batch 64; with XLA that is tfblocks'
  per-replica XLA step (`tfblocks.training.xla_step`).

Every process gets one CPU: `taskset -c <core>` where available (workers on different
cores) and one intra-op and one inter-op thread. Each process builds both models, trains
each for `--warmup` untimed steps (tracing, XLA compilation), then alternates the modes
`--chunks` times, `--steps` steps each, so that both see the same machine load; the
step time is the median of the per-step times (the slower worker's, for 2 workers),
leaving out the first step of each `fit` call (it also starts the input iterator).
Each round runs the 1-worker process, then the 2-worker pair; figures are medians over
rounds. The machine should be otherwise idle: two workers take both cores of a 2-core
machine, and any other job slows them.

Printed: ms/step and tokens/s per configuration, XLA / no-XLA at 2 workers, and the
scaling efficiency = tokens/s of 2 workers / (2 × tokens/s of 1 worker), per mode.

Run:  python benchmarks/scaling.py                # shape (a), about 5 minutes on 2 cores
      python benchmarks/scaling.py --rounds 3
      python benchmarks/scaling.py --quick        # tiny model, no-XLA mode only: smoke run

Figures: benchmarks/README.md.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from shapes import SHAPES

ROOT = Path(__file__).resolve().parents[1]

MODES = {"no XLA": False, "XLA": True}
# --quick: the no-XLA mode alone (it compiles nothing); both modes run the same lines of
# the worker and the driver (two workers training with XLA: tests/training/test_multi_worker.py).
QUICK_MODES = {"no XLA": False}


# --- One worker process --------------------------------------------------------------


def worker(args):
    """Trains in both modes; prints one JSON line {mode: [seconds per timed step]}."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    from tfblocks import build_transformer, compile_transformer, hparams
    from tfblocks.training.distribute import get_strategy

    preset, overrides, batch, length = SHAPES[args.shape]
    hp = hparams(preset, **overrides)
    strategy = get_strategy("multi_worker") if args.workers > 1 else None
    global_batch = batch * args.workers
    rng = np.random.default_rng(0)
    ids = rng.integers(4, hp.vocab_size, (2, global_batch, length)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices(({"inputs": ids[0], "targets": ids[1]}, ids[1]))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.batch(global_batch, drop_remainder=True).repeat().with_options(options)

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.start)

    models, result = {}, {}
    for mode, jit_compile in args.modes.items():
        keras.utils.set_random_seed(0)
        with strategy.scope() if strategy else tf.distribute.get_strategy().scope():
            model = build_transformer(hp)
            compile_transformer(model, hp, jit_compile=jit_compile, learning_rate=1e-4)
        model.fit(dataset, epochs=1, steps_per_epoch=args.warmup, verbose=0)  # trace, compile
        models[mode] = model
        result[mode] = {"step_s": [], "jit_compile": bool(model.jit_compile)}
    for _ in range(args.chunks):  # A B A B …: both modes see the same machine load
        for mode, model in models.items():
            timer = Timer()
            model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
            result[mode]["step_s"] += timer.times[1:]  # not the step that starts a fit
    print(json.dumps(result), flush=True)


# --- The driver ----------------------------------------------------------------------


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_group(args, workers):
    """Starts `workers` processes (one core each); returns their parsed JSON results."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(workers)]}
    procs = []
    for index in range(workers):
        env = {
            **os.environ,
            "KERAS_BACKEND": "tensorflow",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        if workers > 1:
            task = {"type": "worker", "index": index}
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
        else:
            env.pop("TF_CONFIG", None)
        command = [sys.executable, __file__, "--worker", "--workers", str(workers)]
        command += ["--shape", args.shape, "--warmup", str(args.warmup), "--steps", str(args.steps)]
        command += ["--chunks", str(args.chunks)] + (["--quick"] if args.quick else [])
        if shutil.which("taskset") and len(cores) >= workers:
            command = ["taskset", "-c", str(cores[index]), *command]
        procs.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    deadline = time.monotonic() + args.timeout
    results = []
    try:
        for proc in procs:
            try:
                stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise SystemExit(
                    f"a worker did not finish within --timeout {args.timeout} s"
                ) from None
            if proc.returncode != 0:
                raise SystemExit(f"worker failed (exit {proc.returncode}):\n{stderr[-3000:]}")
            results.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:  # never leave a worker behind (one waiting for its peer would never end)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="a")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per mode")
    parser.add_argument(
        "--steps", type=int, default=5, help="steps per mode and chunk (all but the first timed)"
    )
    parser.add_argument("--chunks", type=int, default=3, help="alternations of the two modes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process group")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: shape quick, the no-XLA mode only, 1 warm-up step and 1 chunk of 2 steps",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.modes = MODES
    if args.quick:
        args.shape, args.rounds, args.warmup, args.steps, args.chunks = "quick", 1, 1, 2, 1
        args.modes = QUICK_MODES
    if min(args.rounds, args.warmup, args.steps - 1, args.chunks) < 1:
        parser.error(
            "--rounds, --warmup and --chunks must be >= 1 and --steps >= 2, got "
            f"--rounds {args.rounds} --warmup {args.warmup} --steps {args.steps} "
            f"--chunks {args.chunks}"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    preset, overrides, batch, length = SHAPES[args.shape]
    print(f"# start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load {os.getloadavg()}")
    print(
        f"shape {args.shape}: {preset} {overrides}, batch {batch} per worker × length {length}; "
        f"{args.warmup} warm-up steps, then {args.chunks} × {args.steps} steps per mode "
        f"(modes alternating: {' / '.join(args.modes)}; the first of each {args.steps} untimed), "
        f"{args.rounds} round(s); "
        f"one CPU per process ({'taskset' if shutil.which('taskset') else 'threads only'})"
    )
    step = {(workers, mode): [] for workers in (1, 2) for mode in args.modes}
    for r in range(args.rounds):
        for workers in (1, 2):
            results = run_group(args, workers)
            for mode in args.modes:
                assert all(res[mode]["jit_compile"] == MODES[mode] for res in results), results
                # Workers step in lockstep; the slower one sets the pace.
                seconds = max(statistics.median(res[mode]["step_s"]) for res in results)
                step[workers, mode].append(seconds)
                print(f"  round {r + 1}: {workers} worker(s), {mode}: {seconds * 1e3:.1f} ms/step")
    tokens = {}
    print(f"{'workers':>7} {'mode':>7} {'ms/step':>9} {'tokens/s':>9}")
    for (workers, mode), values in step.items():
        seconds = statistics.median(values)
        tokens[workers, mode] = workers * batch * length / seconds
        print(f"{workers:>7} {mode:>7} {seconds * 1e3:>9.1f} {tokens[workers, mode]:>9.0f}")
    if args.modes == MODES:
        print(f"XLA / no XLA, 2 workers: {tokens[2, 'XLA'] / tokens[2, 'no XLA']:.3f}×")
        print(f"XLA / no XLA, 1 worker:  {tokens[1, 'XLA'] / tokens[1, 'no XLA']:.3f}×")
    for mode in args.modes:
        efficiency = tokens[2, mode] / (2 * tokens[1, mode])
        print(f"scaling efficiency, {mode}: {efficiency:.3f}")
    print(f"# end {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load {os.getloadavg()}")


if __name__ == "__main__":
    main()
