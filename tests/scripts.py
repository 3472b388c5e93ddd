"""Runs the project's scripts (examples/, benchmarks/) in a fresh Python for the tests."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def console_scripts():
    """`{name: (module, function)}` of the console scripts that setup.py installs."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    entries = [entry.split("=") for entry in ast.literal_eval(value)]
                    return {name: tuple(target.split(":")) for name, target in entries}
    raise AssertionError("setup.py has no console_scripts")


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


# What TensorFlow's C++ logging prints (tfblocks/_quiet.py keeps it off standard error).
CPP_LOG = re.compile(r"^[IWEF]\d{4} |cuInit|oneDNN custom operations|absl::InitializeLog", re.M)


def run_quietly(args, returncode=0, **env):
    """`python args...` from the repository root, as a user runs it: TF_CPP_MIN_LOG_LEVEL
    unset (tests/conftest.py sets it for the tests; `env` adds variables). Its exit
    status must be `returncode`.
    """
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environ.update(env)
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == returncode, result.stderr[-4000:]
    return result


def assert_no_log_lines(stderr):
    """What an example prints on standard error holds none of TensorFlow's C++ log lines.

    tests/examples/test_quickstart.py checks its run with this; tests/test_quiet.py
    tests the filter itself.
    """
    assert not CPP_LOG.search(stderr), stderr[-3000:]
