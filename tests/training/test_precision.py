"""`resolve_dtype_policy`: what "auto" picks, and bad input."""

import pytest
import tensorflow as tf

from tfblocks.training import precision


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_explicit_policies_pass_through(policy):
    assert precision.resolve_dtype_policy(policy) == policy
    assert precision.resolve_dtype_policy(policy, jit_compile=True) == policy


@pytest.mark.parametrize(
    "bf16_cpu, jit_compile, accelerators, expected",
    [
        (True, False, [], "mixed_bfloat16"),  # the translation job's default step on this CPU
        (True, True, [], "float32"),  # XLA's CPU matmul is no faster in bfloat16
        (False, False, [], "float32"),  # no bfloat16 instructions
        (True, False, ["GPU:0"], "float32"),  # accelerators: the user chooses
    ],
)
def test_auto(monkeypatch, bf16_cpu, jit_compile, accelerators, expected):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: bf16_cpu)
    real = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: accelerators if kind == "GPU" else real(kind),
    )
    assert precision.resolve_dtype_policy("auto", jit_compile=jit_compile) == expected


def test_cpu_flags_are_read_from_proc_cpuinfo():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line on this machine")
    assert precision.cpu_has_bf16() == any(f in flags for f in precision.BF16_CPU_FLAGS)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"policy": "bfloat16"}, "policy='bfloat16'"),
        ({"policy": None}, "policy=None"),
        ({"policy": "auto", "jit_compile": 1}, "jit_compile=1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        precision.resolve_dtype_policy(**kwargs)
