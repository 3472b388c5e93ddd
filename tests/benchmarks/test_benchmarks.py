"""Smoke runs of the benchmark scripts (`--quick`): they run and print their tables.

Speed is never asserted here (benchmarks/README.md holds the measured figures); these
tests only keep the scripts working as the package changes.

Their cost is start-up and tracing / XLA compilation, which keep one core busy, so the
`outputs` fixture runs the scripts of the selected tests one after the other in the
background as soon as the first of them starts; each test waits for its own script. One
at a time: `make test` already runs two test processes on the 2-core machine, and a
second script beside them only made every process slower (the benchmark scripts took
440 CPU-s two at a time, 385 one at a time). The scripts in `ALONE` configure TensorFlow
before it starts (XLA flags, threads) or start processes of their own, and each runs in
its own Python, longest first; the others run one after another in one more Python
(`run_together.py`: TensorFlow and keras-hub start once, not ten times).
"""

import importlib.util
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.scripts import run_script

# test-name prefix -> command line; the tests below keep this order.
SCRIPTS = {
    "scaling": ("benchmarks/scaling.py", "--quick"),
    "accelerator_check": (
        "benchmarks/accelerator_check.py",
        *("--steps", 2, "--rounds", 2, "--decode-calls", 1),
    ),
    "input_shapes": ("benchmarks/input_shapes.py", "--quick"),
    "serve": ("benchmarks/serve.py", "--quick"),
    # t2t here: train_throughput runs the `layers` recipe (both share `build_models`).
    "profile_step": (
        "benchmarks/profile_step.py",
        *("--quick", "--recipe", "t2t", "--detail", "dropout"),
    ),
    "train_throughput": ("benchmarks/train_throughput.py", "--quick", "--recipes", "layers"),
    "fused_projection": ("benchmarks/fused_projection.py", "--quick"),
    "attention_layout": ("benchmarks/attention_layout.py", "--quick"),
    "step_rate": ("benchmarks/step_rate.py", "--quick"),
    "dropout": ("benchmarks/dropout.py", "--quick"),
    "beam_steps": ("benchmarks/beam_steps.py", "--quick"),
    "compile_threshold": ("benchmarks/compile_threshold.py", "--quick"),
    "matmul_rate": ("benchmarks/matmul_rate.py", "--quick"),
    "accumulation": ("benchmarks/accumulation.py", "--quick", "--no-xla"),
}  # fmt: skip


# Each in a Python of its own: scaling starts its workers, profile_step sets XLA_FLAGS
# and serve the thread counts before TensorFlow starts.
ALONE = ("scaling", "profile_step", "serve")


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
    shared = [n for n in names if n not in ALONE]
    pool = ThreadPoolExecutor(max_workers=1)
    try:  # in the order the tests wait: scaling, then the shared group, then the others
        futures = {}
        for name in names:
            if name in ALONE:
                futures[name] = pool.submit(run_script, *SCRIPTS[name], timeout=600)
            elif shared and name == shared[0]:
                futures.update(dict.fromkeys(shared, pool.submit(_run_together, shared)))
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
    out = _out(outputs, "scaling")
    for workers in (1, 2):
        for mode in ("no XLA", "XLA"):
            assert re.search(rf"^\s+{workers}\s+{mode}\s+\d+\.\d\s+\d+$", out, re.M), out
    assert re.search(r"^XLA / no XLA, 2 workers: \d+\.\d{3}×$", out, re.M), out
    for mode in ("no XLA", "XLA"):
        assert re.search(rf"^scaling efficiency, {mode}: \d+\.\d{{3}}$", out, re.M), out


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


def test_serve_quick_prints_every_engine(outputs):
    pytest.importorskip("ctranslate2")
    out = _out(outputs, "serve")
    assert re.search(
        r"^trained transformer_tiny for \d+ s \(1 epochs\), loss \d+\.\d{3}$", out, re.M
    )
    assert "8 sentences" in out, out
    for engine in ("Translator", "SavedModel", "CT2 float32", "CT2 int8"):  # --quick's engines
        # beam 4, batch 32 (the only --quick config): tok/s, ratio, p50, p95, BLEU, same.
        row = rf"^beam 4\s+32\s+{re.escape(engine)}\s+\d+\s+\S*\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\d\s"
        assert re.search(row, out, re.M), out


def test_profile_step_quick_lists_components(outputs):
    out = _out(outputs, "profile_step")
    assert re.search(r"^\[t2t\] shape quick: ", out, re.M), out
    for label in ("tfblocks", "keras-hub"):
        assert re.search(rf"^{label}: \d+ ms/step in XLA instructions", out, re.M), out
    assert "  dropout " in out and "largest ops of 'dropout':" in out, out
    assert "  loss " in out and "  optimizer " in out, out


def test_train_throughput_quick_prints_the_layers_table(outputs):
    # One recipe (t2t runs in the profile_step test); float32 only: mixed precision
    # training is tests/training/test_mixed_precision.py's.
    out = _out(outputs, "train_throughput")
    assert "float32, XLA" in out, out
    tables = out.split("\n[")[1:]
    titles = [t for t in tables if t.startswith("layers] layers only")]
    assert len(titles) == 1, out
    assert not [t for t in tables if t.startswith("t2t]")], out
    # One tfblocks row with a positive ratio and its range, one keras-hub row.
    ratio = re.search(
        r"^quick\s+tfblocks\s.*\s\d\.\d{3}–\d+\.\d{3}\s+(\d+\.\d+)×$", titles[0], re.M
    )
    assert ratio and float(ratio.group(1)) > 0, out
    assert re.search(r"^quick\s+keras-hub\s+\d+\.\d\s+\d+\s", titles[0], re.M), out
    assert re.search(r"^end \S+Z, load average \d", out, re.M), out


def test_fused_projection_quick_prints_the_ratio(outputs):
    out = _out(outputs, "fused_projection")
    assert re.search(r"^shape quick: unfused \d+\.\d ms/step, fused \d+\.\d ms/step", out, re.M)
    assert re.search(r"unfused/fused \d+\.\d{3}× \(range \d+\.\d{3}–\d+\.\d{3}", out), out


def test_attention_layout_quick_prints_both_layouts_and_the_ratio(outputs):
    # The script itself asserts that both layouts give the same attention outputs.
    out = _out(outputs, "attention_layout")
    assert re.search(r"^\s+8\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d\d× \(range", out, re.M), out


def test_step_rate_quick_prints_the_step_and_the_matmul(outputs):
    out = _out(outputs, "step_rate")
    assert re.search(r"^\s+8\s+\d+\.\d{3}\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\d$", out, re.M), out


def test_dropout_quick_prints_both_modes(outputs):
    out = _out(outputs, "dropout")
    for label in ("XLA", "no XLA"):
        assert re.search(rf"^{label}\s+\d+\.\d+ ms .*\d+\.\d+×$", out, re.M), out


def test_beam_steps_quick_counts_every_mode(outputs):
    out = _out(outputs, "beam_steps")
    assert re.search(r"^8 sentences, beam 4, .* same translations in every mode: True$", out, re.M)
    counts = {}
    for mode, batch in (("dropping", 4), ("whole batch", 4), ("alone", 1)):
        row = re.search(
            rf"^{mode}\s+{batch}\s+(\d+)\s+\d+\.\d\d\s+(\d+)\s+\d\.\d{{3}}×$", out, re.M
        )
        assert row, out
        counts[mode] = int(row.group(1))
    # Nothing beats searching each sentence alone; dropping never computes more than
    # the whole batch does.
    assert counts["alone"] <= counts["dropping"] <= counts["whole batch"], out


def test_compile_threshold_quick_prints_both_tables(outputs):
    out = _out(outputs, "compile_threshold")
    assert re.search(r"^dropout .*COMPILE_MIN_ELEMENTS = [\d,]+$", out, re.M), out
    assert re.search(r"^loss \+ gradient, COMPILE_MIN_LOGITS = [\d,]+$", out, re.M), out
    label, number = r"(\d+x\d+x\d+|\[\d+, \d+\] logits)", r"\s+\d+\.\d{3}"
    ratio, rest = r"\s+\d+\.\d\d×", r"\s+\d+\s+(?:\d+|never)\s+(compiled|TF ops)$"
    pattern = rf"^{label}\s+[\d,]+{number}{number}{ratio}{rest}"
    rows = re.findall(pattern, out, re.M)
    assert len(rows) == 4, out  # --quick: two sizes of each, all below the thresholds
    assert {side for _, side in rows} == {"TF ops"}, out


def test_accumulation_quick_prints_every_way_and_the_ratios(outputs):
    out = _out(outputs, "accumulation")
    for name, rows, batches in (
        ("one batch", 16, 1),
        ("small batches", 4, 4),
        ("accumulated", 4, 4),
    ):
        assert re.search(rf"^{name}\s+{rows}\s+{batches}\s+\d+\s+\d+\.\d$", out, re.M), out
    for peer in ("one batch", "small batches"):
        for what in ("time", "CPU time"):
            ratio = rf"^{what} per token, accumulated / {peer}: \d+\.\d{{3}}× \([+-]\d+\.\d%\)$"
            assert re.search(ratio, out, re.M), out


def test_matmul_rate_quick_prints_both_paths(outputs):
    out = _out(outputs, "matmul_rate")
    for label in ("TF", "XLA"):
        assert re.search(rf"^\s+64\s+{label}\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\d×$", out, re.M), out
