"""examples/quickstart.py runs end to end with small settings and learns its task."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_learns_running_maximum():
    result = subprocess.run(
        [sys.executable, "examples/quickstart.py", "--epochs", "3", "--steps-per-epoch", "40"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    before = float(re.search(r"accuracy before training: ([\d.]+)", result.stdout).group(1))
    after = float(re.search(r"accuracy after training:\s+([\d.]+)", result.stdout).group(1))
    assert after >= 0.95 > before, result.stdout
