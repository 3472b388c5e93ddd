"""Importing tfblocks asks TensorFlow for its BFC CPU allocator where TensorFlow would use
`malloc` (oneDNN off), never over the user's choice (tfblocks/_allocator.py)."""

import os
import subprocess
import sys

import pytest

from tests.scripts import ROOT
from tfblocks._allocator import (
    LIMIT_MB,
    ONEDNN,
    USE_BFC,
    onednn_enabled,
    physical_memory_mb,
    use_bfc_allocator,
)

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

# After `import tfblocks`: the variable, and whether TensorFlow's CPU allocator keeps
# statistics (the BFC pool does; the malloc allocator of oneDNN-off TensorFlow does not).
PROBE = """
import os
import tfblocks
import tensorflow as tf
x = tf.matmul(tf.ones([64, 64]), tf.ones([64, 64]))
try:
    tf.config.experimental.get_memory_info("CPU:0")
    stats = "stats"
except ValueError:
    stats = "no-stats"
print(os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "unset"), stats, float(x[0, 0]))
"""


def _probe(**env):
    environ = {k: v for k, v in os.environ.items() if k not in (USE_BFC, LIMIT_MB, ONEDNN)}
    environ.update(TF_CPP_MIN_LOG_LEVEL="3", **env)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.split()


def test_sets_bfc_only_where_tensorflow_would_use_malloc_and_the_user_did_not_choose():
    cases = [  # (environment before, oneDNN on, memory MiB) -> (set, environment after)
        ({}, False, 24_000, [USE_BFC], {USE_BFC: "true"}),  # 64 GiB default limit kept
        ({}, False, 512_000, [USE_BFC, LIMIT_MB], {USE_BFC: "true", LIMIT_MB: "512000"}),
        ({}, False, None, [USE_BFC], {USE_BFC: "true"}),  # memory unknown: no limit
        ({LIMIT_MB: "1024"}, False, 512_000, [USE_BFC], {USE_BFC: "true", LIMIT_MB: "1024"}),
        ({USE_BFC: "false"}, False, 512_000, [], {USE_BFC: "false"}),  # the user's choice
        ({USE_BFC: "true"}, False, 512_000, [], {USE_BFC: "true"}),  # ... and their limit
        ({}, True, 512_000, [], {}),  # oneDNN's allocator pools already
        ({}, None, 512_000, [], {}),  # TensorFlow's choice unknown here
    ]
    for before, onednn, memory, want_set, want_env in cases:
        environ = dict(before)
        assert use_bfc_allocator(environ, onednn=onednn, memory_mb=memory) == want_set, before
        assert environ == want_env, (before, onednn, memory)
    memory = physical_memory_mb()
    assert memory is None or memory > 0


def test_onednn_follows_tensorflows_rule():
    bf16, avx2 = frozenset({"avx2", "avx512_bf16"}), frozenset({"avx", "avx2", "fma"})
    assert onednn_enabled({}, bf16, linux_x86=True) is True
    assert onednn_enabled({}, frozenset({"avx_vnni"}), linux_x86=True) is True
    assert onednn_enabled({}, avx2, linux_x86=True) is False
    assert onednn_enabled({}, None, linux_x86=True) is None  # no /proc/cpuinfo flags
    assert onednn_enabled({}, avx2, linux_x86=False) is None  # another platform's rule
    for value, want in (("1", True), ("TRUE", True), ("0", False), (" false ", False)):
        assert onednn_enabled({ONEDNN: value}, bf16 if not want else avx2) is want
    assert onednn_enabled({ONEDNN: "maybe"}, avx2, linux_x86=True) is False  # TF: default


def test_tensorflow_uses_the_allocator_the_environment_asks_for():
    # oneDNN off, as on an AVX2-only CPU: the pool instead of malloc.
    assert _probe(**{ONEDNN: "0"}) == ["true", "stats", "64.0"]
    # The user's choice stands: TensorFlow's malloc allocator, which keeps no statistics.
    assert _probe(**{ONEDNN: "0", USE_BFC: "false"}) == ["false", "no-stats", "64.0"]
    # oneDNN on: nothing set (its own allocator pools large blocks).
    assert _probe(**{ONEDNN: "1"})[0] == "unset"
