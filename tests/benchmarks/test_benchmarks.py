"""Smoke runs of the benchmark scripts (`--quick`): they run and print their tables.

Speed is never asserted here (benchmarks/RESULTS.md holds the measured figures); these
tests only keep the scripts working as the package changes.
"""

import re

import pytest

from tests.scripts import run_script


def _run(*args):
    return run_script(*args, timeout=600).stdout


@pytest.mark.parametrize("policy", [None, "mixed_bfloat16"])
def test_train_throughput_quick(policy):
    # One recipe per run (each compiles two models): t2t in float32, layers under bfloat16.
    recipes = ["--recipes", "layers" if policy else "t2t"]
    out = _run(
        "benchmarks/train_throughput.py",
        "--quick",
        *recipes,
        *(["--mixed-precision", policy] if policy else []),
    )
    assert f"{policy or 'float32'}, XLA" in out, out
    tables = out.split("\n[")[1:]
    title = "layers] layers only" if policy else "t2t] full t2t"
    titles = [t for t in tables if t.startswith(title)]
    assert len(titles) == 1, out
    for table in titles:
        # One tfblocks row with a positive ratio and its range, one keras-hub row.
        ratio = re.search(
            r"^quick\s+tfblocks\s.*\s\d\.\d{3}–\d+\.\d{3}\s+(\d+\.\d+)×$", table, re.M
        )
        assert ratio and float(ratio.group(1)) > 0, out
        assert re.search(r"^quick\s+keras-hub\s", table, re.M), out
    assert re.search(r"^end \S+Z, load average \d", out, re.M), out


def test_fused_projection_quick_prints_the_ratio():
    out = _run("benchmarks/fused_projection.py", "--quick")
    assert re.search(r"^shape quick: unfused \d+\.\d ms/step, fused \d+\.\d ms/step", out, re.M)
    assert re.search(r"unfused/fused \d+\.\d{3}× \(range \d+\.\d{3}–\d+\.\d{3}", out), out


def test_profile_step_quick_lists_components():
    out = _run("benchmarks/profile_step.py", "--quick", "--detail", "dropout")
    for label in ("tfblocks", "keras-hub"):
        assert re.search(rf"^{label}: \d+ ms/step in XLA instructions", out, re.M), out
    assert "  dropout " in out and "largest ops of 'dropout':" in out, out


def test_dropout_quick_prints_both_modes():
    out = _run("benchmarks/dropout.py", "--quick")
    for label in ("XLA", "no XLA"):
        assert re.search(rf"^{label}\s+\d+\.\d+ ms .*\d+\.\d+×$", out, re.M), out


def test_attention_fused_quick_prints_both_modes():
    out = _run("benchmarks/attention_fused.py", "--quick")
    for label in ("XLA", "no XLA"):
        assert re.search(rf"^\S+\s+{label}\s+\d+\.\d+ ms\s+\d+\.\d+ ms\s+\d+\.\d+×$", out, re.M), (
            out
        )


def test_scaling_quick_prints_both_worker_counts_and_ratios():
    out = _run("benchmarks/scaling.py", "--quick")
    for workers in (1, 2):
        for mode in ("no XLA", "XLA"):
            assert re.search(rf"^\s+{workers}\s+{mode}\s+\d+\.\d\s+\d+$", out, re.M), out
    assert re.search(r"^XLA / no XLA, 2 workers: \d+\.\d{3}×$", out, re.M), out
    for mode in ("no XLA", "XLA"):
        assert re.search(rf"^scaling efficiency, {mode}: \d+\.\d{{3}}$", out, re.M), out


def test_accelerator_check_on_cpu_runs_tiny_and_says_what_it_skipped():
    result = run_script(
        "benchmarks/accelerator_check.py",
        *("--steps", 2, "--rounds", 2, "--decode-calls", 1),
        timeout=600,
    )
    out = result.stdout
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


def test_input_shapes_quick_prints_every_mode():
    out = _run("benchmarks/input_shapes.py", "--quick")
    for mode in ("dynamic", "buckets"):
        assert re.search(rf"^\s+{mode}\s+\d+\.\d\s+\d+\s+\d+\.\d\d×\s", out, re.M), out
    # buckets (max_length 16 in --quick): lengths 8 and 16, so at most 2 shapes, no XLA.
    assert re.search(r"^\s+buckets\s.*\s[12]\s+0\s+\d+\s+\d\.\d{4}\s+\d+\.\d{4}$", out, re.M), out
    assert re.search(r"^\s+buckets dev BLEU \(greedy, 10 sentences\) \d+\.\d\d$", out, re.M), out
    assert "load at the end:" in out, out


def test_serve_quick_prints_every_engine():
    pytest.importorskip("ctranslate2")
    out = _run("benchmarks/serve.py", "--quick")
    for engine in ("Translator", "SavedModel", "SavedModel no-XLA", "SavedModel padded",
                   "CT2 float32", "CT2 int8"):  # fmt: skip
        row = rf"^beam 4\s+32\s+{re.escape(engine)}\s+\d+\s+\S*\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\d\s"
        assert re.search(row, out, re.M), out
    assert re.search(r"^greedy\s+1\s+CT2 float32\s+\d+\s", out, re.M), out
