"""examples/quickstart.py runs end to end with small settings, learns its task, and
prints none of TensorFlow's C++ log lines (tfblocks/_quiet.py; tests/test_quiet.py)."""

import re

import pytest

from tests.scripts import assert_no_log_lines, run_quietly

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


def test_quickstart_learns_running_maximum_and_prints_no_log_lines():
    # As a user runs it (no TF_CPP_MIN_LOG_LEVEL in the environment): tfblocks/_quiet.py
    # keeps TensorFlow's C++ log lines off standard error.
    result = run_quietly(["examples/quickstart.py", "--epochs", "3", "--steps-per-epoch", "40"])
    assert_no_log_lines(result.stderr)
    before = float(re.search(r"accuracy before training: ([\d.]+)", result.stdout).group(1))
    after = float(re.search(r"accuracy after training:\s+([\d.]+)", result.stdout).group(1))
    assert after >= 0.95 > before, result.stdout
