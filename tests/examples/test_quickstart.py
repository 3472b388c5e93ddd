"""examples/quickstart.py runs end to end with small settings and learns its task."""

import re

from tests.scripts import run_script


def test_quickstart_learns_running_maximum():
    result = run_script("examples/quickstart.py", "--epochs", "3", "--steps-per-epoch", "40")
    before = float(re.search(r"accuracy before training: ([\d.]+)", result.stdout).group(1))
    after = float(re.search(r"accuracy after training:\s+([\d.]+)", result.stdout).group(1))
    assert after >= 0.95 > before, result.stdout
