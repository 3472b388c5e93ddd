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
    out = _run(
        "benchmarks/train_throughput.py",
        "--quick",
        *(["--mixed-precision", policy] if policy else []),
    )
    assert f"{policy or 'float32'}, XLA" in out, out
    # One tfblocks row with a positive ratio, one keras-hub row.
    ratio = re.search(r"^quick\s+tfblocks\s.*\s(\d+\.\d+)×$", out, re.M)
    assert ratio and float(ratio.group(1)) > 0, out
    assert re.search(r"^quick\s+keras-hub\s", out, re.M), out


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
