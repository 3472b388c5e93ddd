"""Importing tfblocks turns on TensorFlow's BFC CPU allocator unless the user chose
(tfblocks/_allocator.py)."""

import os
import subprocess
import sys

from tests.scripts import ROOT
from tfblocks._allocator import LIMIT_MB, USE_BFC, physical_memory_mb, use_bfc_allocator

# Prints whether TensorFlow's CPU allocator keeps statistics, which only the BFC one does.
PROBE = """
import tfblocks
import tensorflow as tf
x = tf.matmul(tf.ones([64, 64]), tf.ones([64, 64]))
try:
    tf.config.experimental.get_memory_info("CPU:0")
    print("bfc", float(x[0, 0]))
except ValueError as error:
    print("default", float(x[0, 0]), error)
"""


def _probe(**env):
    environ = {k: v for k, v in os.environ.items() if k not in (USE_BFC, LIMIT_MB)}
    environ.update(TF_CPP_MIN_LOG_LEVEL="3", **env)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.split()


def test_import_sets_bfc_unless_the_user_chose():
    environ = {}
    assert use_bfc_allocator(environ, memory_mb=24_000) == [USE_BFC]
    assert environ == {USE_BFC: "true"}  # TensorFlow's 64 GiB limit is above 24 GB: kept
    environ = {}
    assert use_bfc_allocator(environ, memory_mb=512_000) == [USE_BFC, LIMIT_MB]
    assert environ == {USE_BFC: "true", LIMIT_MB: "512000"}  # a large machine's memory
    environ = {USE_BFC: "false", LIMIT_MB: "1024"}
    assert use_bfc_allocator(environ, memory_mb=512_000) == []
    assert environ == {USE_BFC: "false", LIMIT_MB: "1024"}
    assert use_bfc_allocator({}, memory_mb=None) == [USE_BFC]  # memory unknown: no limit set
    memory = physical_memory_mb()
    assert memory is None or memory > 0


def test_tensorflow_uses_the_allocator_the_environment_asks_for():
    assert _probe()[:2] == ["bfc", "64.0"]  # import tfblocks, then the first operation
    assert _probe(**{USE_BFC: "false"})[:2] == ["default", "64.0"]  # the user's choice
