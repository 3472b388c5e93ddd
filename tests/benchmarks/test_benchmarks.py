"""Smoke runs of the benchmark scripts (`--quick`): they run and print their tables.

Speed is never asserted here (benchmarks/README.md holds the measured figures); these
tests only keep the scripts working as the package changes. Every Python script in
benchmarks/ has a test here (`accelerator_check.py` with small sizes instead of `--quick`);
`enja.sh` trains for 45 minutes and has none.

Their cost is start-up and tracing / XLA compilation, which keep one core busy, so the
`outputs` fixture runs the scripts of the selected tests one after the other in the
background as soon as the first of them starts; each test waits for its own script. One
at a time: `make test` already runs two test processes on the 2-core machine, and a
second script beside them only made every process slower. The scripts in `ALONE`
start processes of their own, and each runs in its own Python; the others run one after
another in two more Pythons (`run_together.py`: TensorFlow and keras-hub start once a
group, not once a script), serve and litert, which set TensorFlow's threads before it
starts, in the second.
"""

import importlib.util
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.scripts import console_scripts, run_script

# test-name prefix -> command line; the tests below keep this order.
SCRIPTS = {
    "scaling": ("benchmarks/scaling.py", "--quick"),
    "accelerator_check": (
        "benchmarks/accelerator_check.py",
        *("--steps", 2, "--rounds", 2, "--decode-calls", 1),
    ),
    "input_shapes": ("benchmarks/input_shapes.py", "--quick"),
    "train_throughput": ("benchmarks/train_throughput.py", "--quick"),
    # one TensorFlow / CTranslate2 thread (not 2): the test processes keep the other cores busy
    "serve": ("benchmarks/serve.py", "--quick", "--threads", 1),
    "seq_scaling": ("benchmarks/seq_scaling.py", "--quick"),
    "corpus_scale": ("benchmarks/corpus_scale.py", "--quick"),
    "backends": ("benchmarks/backends.py", "--quick"),
    "cli_startup": ("benchmarks/cli_startup.py", "--quick"),
    "litert": ("benchmarks/litert.py", "--quick", "--threads", 1),
}  # fmt: skip


# Each in a Python of its own: scaling, seq_scaling, corpus_scale, cli_startup and backends
# start processes of their own.
ALONE = ("scaling", "seq_scaling", "corpus_scale", "cli_startup", "backends")
# The others share a Python in groups (`run_together.py`). serve and litert set the same
# thread counts before TensorFlow starts (serve first; TensorFlow takes a repeated setting
# of the same counts), so not in one with scripts that start TensorFlow first.
GROUPS = (("accelerator_check", "input_shapes", "train_throughput"), ("serve", "litert"))

# A test waits for the scripts queued before its own, shared ones for the whole group:
# more than pyproject.toml's 600 s a test on a slow machine.
pytestmark = [pytest.mark.timeout(1500), pytest.mark.heavy]


def _run_together(names):
    """`{name: {"status", "stdout", "stderr"}}` of the scripts `names`, run one after
    another in one Python."""
    jobs = [[name, *map(str, SCRIPTS[name])] for name in names]
    result = run_script("tests/benchmarks/run_together.py", json.dumps(jobs), timeout=1200)
    runs = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"name"')]
    return {run["name"]: run for run in runs}


@pytest.fixture(scope="module")
def outputs(request):
    """`{name: Future}` for the selected tests' scripts (see `_out`)."""
    selected = {item.name for item in request.session.items}
    names = [n for n in SCRIPTS if any(t.startswith(f"test_{n}_") for t in selected)]
    if importlib.util.find_spec("ctranslate2") is None and "serve" in names:
        names.remove("serve")  # its test skips
    groups = [[n for n in group if n in names] for group in GROUPS]
    pool = ThreadPoolExecutor(max_workers=1)
    try:  # in the order the tests wait: scaling, then the first group, then the others
        futures = {}
        for name in names:
            if name in ALONE:
                futures[name] = pool.submit(run_script, *SCRIPTS[name], timeout=600)
            for group in groups:
                if group and name == group[0]:
                    futures.update(dict.fromkeys(group, pool.submit(_run_together, group)))
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _out(outputs, name):
    """The script's standard output; a script that failed fails the test with its stderr."""
    if name in ALONE:
        return outputs[name].result().stdout
    run = outputs[name].result()[name]
    script, status = SCRIPTS[name][0], run["status"]
    assert status == 0, f"{script} exited {status}:\n{run['stderr'][-4000:]}"
    return run["stdout"]


def test_scaling_quick_prints_both_worker_counts_and_ratios(outputs):
    # --quick runs the no-XLA mode only (two workers training with XLA:
    # tests/training/test_multi_worker.py).
    out = _out(outputs, "scaling")
    for workers in (1, 2):
        assert re.search(rf"^\s+{workers}\s+no XLA\s+\d+\.\d\s+\d+$", out, re.M), out
    assert not re.search(r"^\s+\d\s+XLA\s", out, re.M), out  # no XLA row, no XLA ratio
    assert "XLA / no XLA" not in out, out
    assert re.search(r"^scaling efficiency, no XLA: \d+\.\d{3}$", out, re.M), out


def test_accelerator_check_on_cpu_runs_tiny_and_says_what_it_skipped(outputs):
    out = _out(outputs, "accelerator_check")
    assert "accelerator: none" in out, out
    assert re.search(
        r"^SKIPPED: training throughput at shape \(a\) and transformer_base", out, re.M
    )
    assert re.search(r"^SKIPPED: MirroredStrategy over several GPUs", out, re.M), out
    assert re.search(r"^PASS: shape tiny: tfblocks loss decreases under mixed_float16", out, re.M)
    assert re.search(r"^PASS: shape tiny: after training under mixed_float16", out, re.M), out
    assert re.search(r"^tiny\s+tfblocks\s+on\s+\d+\.\d\s+\d+\s+\d+\.\d{3}×$", out, re.M), out
    assert re.search(r"^tiny\s+keras-hub\s+on\s+\d+\.\d\s+\d+$", out, re.M), out
    for search in ("greedy", "beam 4"):
        assert re.search(rf"^{search}\s+\d+\.\d ms\s+\d+ positions/s$", out, re.M), out
    assert re.search(r"^2 passed, 0 failed, 2 skipped", out, re.M), out


def test_input_shapes_quick_prints_every_mode(outputs):
    out = _out(outputs, "input_shapes")
    for mode in ("dynamic", "buckets"):
        assert re.search(rf"^\s+{mode}\s+\d+\.\d\s+\d+\s+\d+\.\d\d×\s", out, re.M), out
    # buckets (max_length 16 in --quick): lengths 8 and 16, so at most 2 shapes, no XLA.
    assert re.search(r"^\s+buckets\s.*\s[12]\s+0\s+\d+\s+\d\.\d{4}\s+\d+\.\d{4}$", out, re.M), out
    assert re.search(r"^\s+buckets dev BLEU \(greedy, 4 sentences\) \d+\.\d\d$", out, re.M), out
    assert "load at the end:" in out, out


def test_train_throughput_quick_prints_both_recipes(outputs):
    # float32 only: mixed precision training is tests/training/test_mixed_precision.py's.
    out = _out(outputs, "train_throughput")
    assert "float32, no XLA (--quick)" in out, out
    tables = out.split("\n[")[1:]
    for title in ("layers] layers only", "t2t] full t2t recipe"):
        table = [t for t in tables if t.startswith(title)]
        assert len(table) == 1, out
        # One tfblocks row with a positive ratio and its range, one keras-hub row.
        ratio = re.search(
            r"^quick\s+tfblocks\s.*\s\d+\.\d{3}–\d+\.\d{3}\s+(\d+\.\d+)×$", table[0], re.M
        )
        assert ratio and float(ratio.group(1)) > 0, out
        assert re.search(r"^quick\s+keras-hub\s+\d+\.\d\s+\d+\s", table[0], re.M), out
    assert re.search(r"^end \S+Z, load average \d", out, re.M), out


def test_serve_quick_prints_every_engine(outputs):
    pytest.importorskip("ctranslate2")
    out = _out(outputs, "serve")
    assert re.search(
        r"^trained transformer_tiny for \d+ s \(1 epochs\), loss \d+\.\d{3}$", out, re.M
    )
    assert "4 sentences" in out, out
    for engine in ("Translator", "SavedModel", "CT2 float32", "CT2 int8"):  # --quick's engines
        # beam 4, batch 32 (the only --quick config): tok/s, ratio, p50, p95, BLEU, same.
        row = rf"^beam 4\s+32\s+{re.escape(engine)}\s+\d+\s+\S*\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\d\s"
        assert re.search(row, out, re.M), out


def test_seq_scaling_quick_prints_full_and_local_at_every_length(outputs):
    out = _out(outputs, "seq_scaling")
    # --quick: length 64 only, 256 tokens a step (batch 4)
    number = r"\s+\d+\.\d+"
    row = rf"^\s+64\s+4{number}{number}\s+\d+\.\d\d×{number * 6}$"
    assert re.search(row, out, re.M), out


def test_corpus_scale_quick_reaches_the_first_step(outputs):
    out = _out(outputs, "corpus_scale")
    assert re.search(r"^\s+2000\s+\d+\s+\d+\.\d\s+\d+$", out, re.M), out  # not "> timeout"
    assert re.search(r"^load average \d+\.\d\d", out, re.M), out


def test_backends_quick_prints_both_backends_and_their_ratio(outputs):
    out = _out(outputs, "backends")
    assert re.search(r"^round 1: tensorflow \d+\.\d ms, jax \d+\.\d ms$", out, re.M), out
    for backend in ("tensorflow", "jax"):
        assert re.search(rf"^\| {backend} \| \d+\.\d \| \d+ \|$", out, re.M), out
    assert re.search(r"^TensorFlow time / JAX time: \d+\.\d{3} ", out, re.M), out


def test_cli_startup_quick_times_every_console_script(outputs):
    # One row per console script of setup.py and case, each run as expected (the script
    # exits 1 otherwise); --quick runs no `import tfblocks`, so there is no ratio.
    out = _out(outputs, "cli_startup")
    seconds = r"\s+\d+\.\d{3}" * 3  # median, max, CPU
    for name in console_scripts():
        for case, status in (("--help", 0), ("error", 2)):
            row = rf"^{name}\s+{re.escape(case)}\s+{status}\s+yes{seconds}\s+-$"
            assert len(re.findall(row, out, re.M)) == 1, out
    assert re.search(rf"^python -c pass\s+-\s+0\s+yes{seconds}\s+-$", out, re.M), out
    rows = [line for line in out.splitlines() if re.search(rf"\s(yes|no){seconds}\s", line)]
    assert len(rows) == 2 * len(console_scripts()) + 1, out
    assert re.search(r"^slowest command: tfblocks-\S+ (--help|error), median", out, re.M), out


def test_litert_quick_prints_each_engine(outputs):
    out = _out(outputs, "litert")
    for engine in ("LiteRT float32", "LiteRT int8"):
        cells = r"\d+\.\d \| \d+\.\d \| \d+\.\d\d \| (\d\.\d\d|–) \| \d+\.\d\d \| \d+%"
        row = rf"^\| {engine} \| {cells} \|$"
        assert re.search(row, out, re.M), out
