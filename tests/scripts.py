"""Runs the project's scripts (examples/, benchmarks/) in a fresh Python for the tests."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(script, *args, timeout=300, expect_success=True):
    """`python script args...` from the repository root; the finished process.

    With `expect_success` a non-zero exit fails the test with the end of stderr.
    """
    result = subprocess.run(
        [sys.executable, script, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if expect_success:
        assert result.returncode == 0, result.stderr[-4000:]
    return result
