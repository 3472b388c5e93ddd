"""Where the time of one training step goes: tfblocks vs keras-hub, per component.

Builds the two models of `train_throughput.py` for one shape, warms them up, then
records `--steps` training steps of each (alternating A B) with the TensorFlow
profiler while XLA's CPU runtime emits one trace event per HLO instruction
(`XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true`). XLA also dumps the optimized HLO
of each train step (`--xla_dump_to`), whose `metadata={op_name=...}` names the Keras
layer every instruction comes from. Each instruction's exclusive time (its trace
event minus the events nested in it; an instruction without metadata, such as the
body of a random-number generator, inherits its caller's) is summed into these
components:

  dropout (random bits + mask), attention projections (q/k/v/output), attention
  core (scores, softmax, weighted sum), FFN, LayerNorm, tied softmax matmul,
  embedding lookup, loss, metrics, optimizer (Adam), other (residual adds,
  gradient sums, masks).

It also reports the time spent in matrix products (HLO `dot`s) and their FLOP rate
(FLOPs from the dot shapes), i.e. how much of the step is matmul at all.
Times are ms per step, forward / backward split by the `gradient_tape/` prefix.

Run:  python benchmarks/profile_step.py --shape base               # layers-only recipe
      python benchmarks/profile_step.py --shape a --recipe t2t
      python benchmarks/profile_step.py --shape a --dropout 0
      python benchmarks/profile_step.py --quick     # seconds-long smoke run

Figures: benchmarks/README.md.
"""

import os
import tempfile

# XLA reads its flags once, when TensorFlow loads it: set them before any import of it.
# A new folder (mkdtemp), so that removing it at the end removes only what this run wrote.
os.environ["PROFILE_STEP_DUMP"] = tempfile.mkdtemp(prefix="profile_step_")
os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        "--xla_cpu_enable_xprof_traceme=true",
        f"--xla_dump_to={os.environ['PROFILE_STEP_DUMP']}",
        "--xla_dump_hlo_as_text",
        "--xla_dump_hlo_module_re=.*one_step_on_data.*",
    ]
)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import collections
import glob
import math
import pathlib
import re
import shutil
import time

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2
from train_throughput import RECIPES, SHAPES, build_models, describe, make_batch, shape_hparams

# (component, rule on (op_type, lower-case op_name)); the first match wins.
COMPONENTS = [
    ("dropout", lambda t, n: t.startswith("StatelessRandom") or "dropout" in n),
    ("optimizer", lambda t, n: n.startswith("adam/") or "/adam/" in n),
    ("loss", lambda t, n: "compile_loss" in n),
    ("metrics", lambda t, n: "compile_metrics" in n or t == "ArgMax"),
    ("layer norm", lambda t, n: "norm" in n),
    ("ffn", lambda t, n: re.search(r"/ffn(_\d+)?/|/feedforward_", n) is not None),
    (
        "attention projections",
        lambda t, n: (
            re.search(r"/(query|key|value|output)(_dense)?(_\d+)?/|/attention_output", n)
            is not None
        ),
    ),
    ("attention core", lambda t, n: "attention" in n),
    ("tied softmax matmul", lambda t, n: "embedding" in n and t in ("MatMul", "Transpose")),
    ("embedding lookup", lambda t, n: "embedding" in n),
]
SHAPE_RE = re.compile(r"\w+\[([\d,]*)\]")
# `%name = shape opcode(operands), attributes`; a tuple shape is "(a, b)".
INSTRUCTION_RE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\((.*)$", re.M)


def component(op_type, op_name):
    for name, rule in COMPONENTS:
        if rule(op_type, op_name):
            return name
    return "other"


def parse_hlo(text):
    """Instruction names, their (op_type, op_name) metadata and the FLOPs of the dots."""
    shapes, metadata, dot_flops = {}, {}, {}
    for name, shape, opcode, rest in INSTRUCTION_RE.findall(text):
        shapes[name] = shape
        meta = re.search(r'metadata=\{op_type="([^"]*)" op_name="([^"]*)"', rest)
        if meta:
            metadata[name] = (meta.group(1), meta.group(2).lower())
        if opcode == "dot":
            lhs = re.match(r"%([\w.\-]+)", rest).group(1)
            lhs_dims = [int(d) for d in SHAPE_RE.match(shapes[lhs]).group(1).split(",") if d]
            contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest).group(1)
            out_dims = [int(d) for d in SHAPE_RE.match(shape).group(1).split(",") if d]
            inner = math.prod(lhs_dims[int(i)] for i in contracting.split(",") if i)
            dot_flops[name] = 2 * math.prod(out_dims) * inner
    return set(shapes), metadata, dot_flops


def exclusive_times(xspace_path, instructions, metadata):
    """Yields (instruction, exclusive picoseconds, metadata) per HLO trace event.

    An instruction without metadata inherits the metadata of the event it is nested
    in (e.g. the body of a random-number generator `call`); None if there is none.
    """
    space = xplane_pb2.XSpace()
    with open(xspace_path, "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
            stack, records = [], []  # stack: (end_ps, record) of enclosing events
            for event in events:
                name = names[event.metadata_id].name
                while stack and stack[-1][0] <= event.offset_ps:
                    stack.pop()
                parent = stack[-1][1] if stack else None
                meta = metadata.get(name) or (parent["meta"] if parent else None)
                record = {"name": name, "ps": event.duration_ps, "meta": meta, "known": False}
                record["known"] = name in instructions or (parent is not None and parent["known"])
                if parent is not None:
                    parent["ps"] -= event.duration_ps  # exclusive time of the parent
                records.append(record)
                stack.append((event.offset_ps + event.duration_ps, record))
            for record in records:
                if record["known"]:
                    yield record["name"], record["ps"], record["meta"]


def breakdown(label, marker, logdirs, dump_dir, detail=None):
    """Prints the per-component table of one model from its profiles and HLO dump."""
    paths = glob.glob(f"{dump_dir}/*cpu_after_optimizations.txt")
    texts = [pathlib.Path(path).read_text() for path in paths]
    matching = [t for t in texts if marker in t]
    if len(matching) != 1:
        raise RuntimeError(f"expected one HLO dump of {label} ({marker!r}), got {len(matching)}")
    instructions, metadata, dot_flops = parse_hlo(matching[0])
    times = collections.Counter()  # (component, fwd|bwd|"") -> ps
    by_op = collections.Counter()  # op_name of the `detail` component -> ps
    dot_ps = dot_work = 0
    for logdir in logdirs:
        (path,) = glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")
        for name, ps, meta in exclusive_times(path, instructions, metadata):
            op_type, op_name = meta or ("", "")
            part = component(op_type, op_name)
            phase = "bwd" if op_name.startswith("gradient_tape/") else "fwd"
            times[part, "" if part in ("optimizer", "metrics") else phase] += ps
            if part == detail:
                by_op[op_name or f"(no metadata) HLO {name}"] += ps
            if name in dot_flops:
                dot_ps += ps
                dot_work += dot_flops[name]
    steps = len(logdirs)
    total_ps = sum(times.values())
    print(f"\n{label}: {total_ps / 1e9 / steps:.0f} ms/step in XLA instructions")
    print(f"  {'component':<24}{'ms/step':>9}{'share':>8}{'fwd':>8}{'bwd':>8}")
    per_part = collections.Counter()
    for (part, _), ps in times.items():
        per_part[part] += ps
    for part, ps in per_part.most_common():
        fwd, bwd = times[part, "fwd"] / 1e9 / steps, times[part, "bwd"] / 1e9 / steps
        print(
            f"  {part:<24}{ps / 1e9 / steps:>9.1f}{ps / total_ps:>8.1%}"
            + (f"{fwd:>8.1f}{bwd:>8.1f}" if part not in ("optimizer", "metrics") else "")
        )
    print(
        f"  matmuls (HLO dots): {dot_ps / 1e9 / steps:.0f} ms/step = {dot_ps / total_ps:.0%}, "
        f"{dot_work / steps / 1e9:.1f} GFLOP/step at {dot_work / (dot_ps / 1e12) / 1e9:.1f} GFLOP/s"
    )
    if detail:
        print(f"  largest ops of '{detail}':")
        for op_name, ps in by_op.most_common(12):
            print(f"    {ps / 1e9 / steps:8.1f} ms  {op_name}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="a")
    parser.add_argument(
        "--recipe",
        choices=RECIPES,
        default="layers",
        help="train_throughput.py's recipe: layers (identical work on both sides) or t2t",
    )
    parser.add_argument("--steps", type=int, default=2, help="profiled steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (XLA compile)")
    parser.add_argument("--dropout", type=float, help="every dropout rate (default: preset's)")
    parser.add_argument("--quick", action="store_true", help="smoke run on a tiny shape")
    parser.add_argument(
        "--detail", help="also list the costliest TF op names of this component, e.g. other"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.shape, args.steps, args.warmup = "quick", 1, 1
    return args


def profile(args, dump_dir):
    """Profiles both models' train steps and prints their breakdowns."""
    preset, hp, batch, length = shape_hparams(args.shape, args.recipe, args.dropout)
    x, y = make_batch(hp, batch, length)
    markers = {"tfblocks": 'op_name="transformer', "keras-hub": 'op_name="keras_hub'}
    # label -> (model, a name that only its HLO contains)
    models = {
        label: (model, markers[label])
        for label, model in build_models(hp, length, args.recipe).items()
    }
    print(f"[{args.recipe}] shape {args.shape}: {describe(preset, hp, batch, length)}")
    for model, _ in models.values():
        for _ in range(args.warmup):
            model.train_on_batch(x, y)
    logdirs = {label: [] for label in models}
    with tempfile.TemporaryDirectory(prefix="profile_step_logs_") as logs:
        # The profiler's first session pays its own start-up: run one, unrecorded.
        tf.profiler.experimental.start(os.path.join(logs, "unused"))
        for model, _ in models.values():
            model.train_on_batch(x, y)
        tf.profiler.experimental.stop()
        for step in range(args.steps):
            for label, (model, _) in models.items():
                logdirs[label].append(os.path.join(logs, label, str(step)))
                tf.profiler.experimental.start(logdirs[label][-1])
                start = time.perf_counter()
                model.train_on_batch(x, y)
                seconds = time.perf_counter() - start
                tf.profiler.experimental.stop()
                print(f"  step {step + 1} {label}: {seconds * 1e3:.0f} ms (profiled)")
        for label, (_, marker) in models.items():
            breakdown(label, marker, logdirs[label], dump_dir, args.detail)


def main(argv=None):
    dump_dir = os.environ["PROFILE_STEP_DUMP"]
    try:
        profile(parse_args(argv), dump_dir)
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
