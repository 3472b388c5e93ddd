"""Sequence-length scaling of one TransformerBlock: full vs local (restricted) attention.

Times a forward + backward pass (gradients of the summed output with respect to the
block's weights, one `tf.function(jit_compile=True)`) of one causal Pre-LN
`TransformerBlock` (hidden 256, 4 heads, filter 1024) while the length grows
128 → 4096 and batch × length stays fixed (`--tokens`, 8192 by default), for full
attention and for `attention_window=128` (t2t `masked_local_attention_1d`). With the
token count fixed, full attention's time and memory grow linearly with the length
(O(n²·d) per sequence), local attention's stay flat (O(n·r·d)).

Every (length, attention) configuration runs in a fresh Python subprocess, so that
neither XLA caches nor allocator pools carry over. Memory is measured there, two ways:

- XLA temp: the scratch buffer the compiled step allocates on every call (activations
  kept for the backward pass and transients), read from XLA's own buffer assignment
  (`XLA_FLAGS=--xla_dump_to=…`, file `*buffer-assignment.txt`, the
  `preallocated-temp` allocation). Exact and allocator-independent; the weights, the
  input and the gradients (parameters and outputs of the program) are not in it.
- RSS peak: after the warm-up call (XLA compile + one run) the kernel's peak-RSS
  counter is reset (`echo 5 > /proc/self/clear_refs`), the timed calls run, and the
  figure is VmHWM − VmRSS just before them (/proc/self/status). For this to see
  freed memory, the worker runs with `TF_ENABLE_ONEDNN_OPTS=0` (TF's oneDNN CPU
  allocator keeps freed blocks in a pool, which hides the peak) and glibc serves every
  block ≥ 64 KiB with mmap (`MALLOC_MMAP_THRESHOLD_=65536`), so freed tensors go back
  to the kernel. The step runs entirely inside XLA, which the oneDNN switch (it
  governs TensorFlow's own kernels) does not touch: the optimized HLO of the step is
  the same with and without it.

Time is the median over `--repeats` calls after the warm-up.

Run:  python benchmarks/seq_scaling.py
      python benchmarks/seq_scaling.py --lengths 128 512 2048 --tokens 4096
      python benchmarks/seq_scaling.py --quick      # smoke run: one length, tiny sizes

Figures: benchmarks/README.md.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORKER_ENV = {
    "KERAS_BACKEND": "tensorflow",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "MALLOC_MMAP_THRESHOLD_": "65536",
    "MALLOC_TRIM_THRESHOLD_": "0",
}


def _status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def xla_temp_bytes(dump_dir):
    """The `preallocated-temp` size of the compiled `forward_backward` step, in bytes."""
    names = [
        name
        for name in os.listdir(dump_dir)
        if "forward_backward" in name and name.endswith("buffer-assignment.txt")
    ]
    if len(names) != 1:
        raise RuntimeError(f"expected one forward_backward buffer assignment, got {names}")
    with open(os.path.join(dump_dir, names[0])) as assignment:
        match = re.search(
            r"^allocation \d+: size (\d+), preallocated-temp", assignment.read(), re.M
        )
    return int(match.group(1)) if match else 0


def measure(length, window, tokens, hidden, heads, filter_size, repeats, dump_dir):
    """Runs in the worker subprocess: times and memory of one configuration, as a dict."""
    import statistics
    import time

    import keras
    import tensorflow as tf

    from tfblocks import TransformerBlock
    from tfblocks.models.complexity import block_cost, total

    batch = max(tokens // length, 1)
    keras.utils.set_random_seed(0)
    block = TransformerBlock(
        num_heads=heads,
        filter_size=filter_size,
        causal=True,
        attention_window=window,
    )
    x = tf.random.normal((batch, length, hidden))  # [B, L, d]
    block.build(x.shape)

    @tf.function(jit_compile=True)
    def forward_backward(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x, training=True))
        return loss, tape.gradient(loss, block.trainable_variables)

    start = time.perf_counter()
    forward_backward(x)[0].numpy()
    compile_s = time.perf_counter() - start

    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current RSS
    before_kib = _status_kib("VmRSS")
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward_backward(x)[0].numpy()
        seconds.append(time.perf_counter() - start)
    step_peak_kib = _status_kib("VmHWM") - before_kib
    flops = total(
        block_cost(hidden, filter_size, heads, length, attention_window=window, causal=True)
    ).flops
    return {
        "length": length,
        "batch": batch,
        "window": window,
        "ms": statistics.median(seconds) * 1e3,
        "xla_temp_mib": xla_temp_bytes(dump_dir) / 2**20,
        "rss_peak_mib": step_peak_kib / 1024,
        "compile_s": compile_s,
        "fwd_bwd_gflop": 3 * flops * batch / 1e9,
    }


def run_worker(args, length, kind):
    """Runs `measure` for one configuration in a fresh interpreter; returns its dict."""
    dump_dir = tempfile.mkdtemp(prefix="seq_scaling_xla_")
    command = [
        sys.executable,
        os.path.abspath(__file__),
        f"--worker={kind}",
        f"--lengths={length}",
        f"--window={args.window}",
        f"--tokens={args.tokens}",
        f"--hidden={args.hidden}",
        f"--heads={args.heads}",
        f"--filter={args.filter}",
        f"--repeats={args.repeats}",
        f"--dump-dir={dump_dir}",
    ]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, **WORKER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))
    dump_flags = f"--xla_dump_to={dump_dir} --xla_dump_hlo_module_re=.*forward_backward.*"
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), dump_flags]))
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.exit(f"worker {command[2:]} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def print_table(rows, args):
    print(
        f"\nTransformerBlock d={args.hidden}, {args.heads} heads, filter {args.filter}, causal, "
        f"Pre-LN, float32, XLA; batch × length = {args.tokens}; forward + backward; "
        f"median of {args.repeats}; local = attention_window={args.window}"
    )
    columns = [
        ("length", 7),
        ("batch", 6),
        ("full ms", 9),
        ("local ms", 9),
        ("full/local", 11),
        ("XLA MiB full", 13),
        ("local", 7),
        ("RSS MiB full", 13),
        ("local", 7),
        ("GFLOP full", 11),
        ("local", 7),
    ]
    header = "".join(f"{name:>{width}}" for name, width in columns)
    print(header)
    print("-" * len(header))
    for length in args.lengths:
        full, local = rows[length, "full"], rows[length, "local"]
        values = [
            f"{length}",
            f"{full['batch']}",
            f"{full['ms']:.1f}",
            f"{local['ms']:.1f}",
            f"{full['ms'] / local['ms']:.2f}×",
            f"{full['xla_temp_mib']:.1f}",
            f"{local['xla_temp_mib']:.1f}",
            f"{full['rss_peak_mib']:.1f}",
            f"{local['rss_peak_mib']:.1f}",
            f"{full['fwd_bwd_gflop']:.2f}",
            f"{local['fwd_bwd_gflop']:.2f}",
        ]
        print(
            "".join(f"{value:>{width}}" for value, (_, width) in zip(values, columns, strict=True))
        )
    print(
        "ms: median per forward+backward; XLA temp: the step's preallocated scratch from "
        "XLA's buffer assignment; RSS peak: VmHWM − VmRSS over the timed calls (compile "
        "excluded); GFLOP: 3 × forward matmul FLOPs (complexity.block_cost) × batch."
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--tokens", type=int, default=8192, help="batch × length")
    parser.add_argument("--window", type=int, default=128, help="local attention window r")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--filter", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: length 64 only (2 worker processes, full and local), 256 tokens, "
        "window 16, d 32, 2 heads, filter 64, 2 repeats",
    )
    parser.add_argument("--worker", choices=["full", "local"], help=argparse.SUPPRESS)
    parser.add_argument("--dump-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("tokens", "window", "hidden", "heads", "filter", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.quick:
        # One length: every configuration is a fresh Python, whose start dominates here.
        args.lengths, args.tokens, args.window, args.repeats = [64], 256, 16, 2
        args.hidden, args.heads, args.filter = 32, 2, 64
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        window = args.window if args.worker == "local" else None
        sizes = (args.tokens, args.hidden, args.heads, args.filter, args.repeats)
        result = measure(args.lengths[0], window, *sizes, args.dump_dir)
        print(json.dumps(result))
        return
    rows = {}
    for length in args.lengths:
        for kind in ("full", "local"):
            rows[length, kind] = row = run_worker(args, length, kind)
            print(
                f"length {length:>5} {kind:<5}: {row['ms']:8.1f} ms, XLA temp "
                f"{row['xla_temp_mib']:7.1f} MiB, RSS peak {row['rss_peak_mib']:7.1f} MiB, "
                f"compile {row['compile_s']:.1f} s",
                flush=True,
            )
    print_table(rows, args)


if __name__ == "__main__":
    main()
