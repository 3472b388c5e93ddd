"""`resolve_dtype_policy` and `training_execution`: what "auto" picks for a step with or
without XLA, the dtype policy and XLA choice of each shapes and policy, and bad input."""

import pytest
import tensorflow as tf

from tfblocks.text.shapes import SHAPES
from tfblocks.training import precision


@pytest.fixture
def machine(monkeypatch):
    """`machine(bf16_cpu, accelerators)` pretends the CPU has (or lacks) bfloat16
    instructions and the machine has these GPUs."""

    def pretend(bf16_cpu, accelerators=()):
        monkeypatch.setattr(precision, "cpu_has_bf16", lambda: bf16_cpu)
        real = tf.config.list_physical_devices
        monkeypatch.setattr(
            tf.config,
            "list_physical_devices",
            lambda kind=None: list(accelerators) if kind == "GPU" else real(kind),
        )

    return pretend


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_explicit_policies_resolve_to_themselves(policy):
    assert precision.resolve_dtype_policy(policy) == policy
    assert precision.resolve_dtype_policy(policy, jit_compile=True) == policy


@pytest.mark.parametrize(
    "bf16_cpu, jit_compile, accelerators, expected",
    [
        (True, False, [], "mixed_bfloat16"),  # a step without XLA on this CPU
        (True, True, [], "float32"),  # XLA's CPU matmul is no faster in bfloat16
        (False, False, [], "float32"),  # no bfloat16 instructions
        (True, False, ["GPU:0"], "float32"),  # accelerators: the user chooses
    ],
)
def test_auto_resolves_by_machine_and_xla(machine, bf16_cpu, jit_compile, accelerators, expected):
    machine(bf16_cpu, accelerators)
    assert precision.resolve_dtype_policy("auto", jit_compile=jit_compile) == expected


@pytest.mark.parametrize("bf16_cpu", [False, True])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_explicit_policies_pass_through_and_fixed_shapes_compile(machine, bf16_cpu, shapes, policy):
    machine(bf16_cpu)
    assert precision.training_execution(shapes, policy) == (policy, shapes != "dynamic")


@pytest.mark.parametrize(
    "bf16_cpu, shapes, expected",
    [
        (True, "dynamic", ("mixed_bfloat16", False)),  # no XLA: oneDNN's bfloat16 kernels
        (True, "packed", ("mixed_bfloat16", False)),  # one static shape: no XLA needed
        (True, "buckets", ("float32", True)),  # XLA's CPU matmul is no faster in bfloat16
        (True, "max_length", ("float32", True)),
        (False, "dynamic", ("float32", False)),  # no bfloat16 instructions
        (False, "packed", ("float32", True)),  # compiled float32 is the faster there
        (False, "buckets", ("float32", True)),
        (False, "max_length", ("float32", True)),
    ],
)
def test_auto_on_a_cpu(machine, bf16_cpu, shapes, expected):
    machine(bf16_cpu)
    assert precision.training_execution(shapes, "auto") == expected


@pytest.mark.parametrize("shapes", SHAPES)
def test_auto_with_an_accelerator_is_float32(machine, shapes):
    machine(True, accelerators=["GPU:0"])  # accelerators: the user chooses
    assert precision.training_execution(shapes) == ("float32", shapes != "dynamic")


def test_cpu_flags_are_read_from_proc_cpuinfo():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line on this machine")
    assert precision.cpu_has_bf16() == any(f in flags for f in precision.BF16_CPU_FLAGS)


@pytest.mark.parametrize(
    "function, kwargs, match",
    [
        ("training_execution", {"policy": "bfloat16"}, "policy='bfloat16'"),
        ("training_execution", {"shapes": "packed", "policy": None}, "policy=None"),
        ("training_execution", {"shapes": "pack"}, "shapes='pack'"),
        ("resolve_dtype_policy", {"policy": "bfloat16"}, "policy='bfloat16'"),
        ("resolve_dtype_policy", {"policy": "auto", "jit_compile": 1}, "jit_compile=1"),
    ],
)
def test_bad_arguments(function, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(precision, function)(**kwargs)
