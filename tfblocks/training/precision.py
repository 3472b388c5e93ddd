"""How the translation job runs its training step: the dtype policy, and whether XLA
compiles the step; `"auto"` picks the faster execution for the batches' shapes.

On a CPU with bfloat16 dot-product instructions (`avx512_bf16` or AMX), TensorFlow's
oneDNN matmul kernels run bfloat16 faster than float32, while XLA's CPU backend runs it
slower (figures: docs/performance.md, "Measured design choices"). Variable-length batches
(`shapes="dynamic"`, the job's default) train without XLA, which would compile once per
shape, and so under `mixed_bfloat16` there (float32 variables, bfloat16 compute, float32
logits and loss). `"buckets"` and `"max_length"` compile with XLA and stay float32.
Packed rows have one static shape and need no XLA to avoid retracing: on such a CPU they
train without XLA in `mixed_bfloat16`, elsewhere with XLA in float32 (where XLA's compiled
float32 step is the faster one once compiled). GPUs and TPUs keep float32 unless asked
(`mixed_float16` / `mixed_bfloat16`): this project has no figures for them.
"""

from tfblocks import _checks
from tfblocks._cpu import cpu_flags
from tfblocks.text.shapes import SHAPES

POLICIES = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
# /proc/cpuinfo flags of x86 CPUs whose bfloat16 matmul oneDNN runs natively.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16():
    """True when /proc/cpuinfo lists `avx512_bf16` or `amx_bf16` (False elsewhere).

    Example:
    >>> isinstance(cpu_has_bf16(), bool)
    True
    """
    return any(flag in (cpu_flags() or ()) for flag in BF16_CPU_FLAGS)


def training_execution(shapes="dynamic", policy="auto"):
    """The Keras dtype policy and the XLA choice of a training step on `shapes` batches.

    The one rule (the module docstring gives the measured reasons): a step compiles with
    XLA when its batches have few shapes (`"buckets"`, `"max_length"`, `"packed"`), not on
    `"dynamic"` ones. `"auto"` stands for `"mixed_bfloat16"` on a machine with no GPU or
    TPU whose CPU has bfloat16 instructions (`cpu_has_bf16`) when the step runs without
    XLA, and there packed rows give up XLA for it: TensorFlow's bfloat16 kernels train
    them faster than XLA's float32 step does. Everywhere else `"auto"` is `"float32"`. An
    explicit `policy` is used as given and changes nothing of the XLA choice.

    Args:
        shapes: the training batches, one of `tfblocks.text.shapes.SHAPES`.
        policy: one of `POLICIES`.

    Returns:
        `(policy_name, jit_compile)`: `"float32"`, `"mixed_bfloat16"` or
        `"mixed_float16"`, and whether the step is compiled with XLA.

    Example:
    >>> training_execution("max_length", "auto"), training_execution("dynamic", "float32")
    (('float32', True), ('float32', False))
    """
    _checks.check_choice("shapes", shapes, SHAPES)
    _checks.check_choice("policy", policy, POLICIES)
    xla = shapes != "dynamic"  # fixed shapes: one XLA program per shape
    if policy != "auto":
        return policy, xla
    if (not xla or shapes == "packed") and _bf16_cpu_only():
        return "mixed_bfloat16", False  # packed rows: one static shape, no retracing
    return "float32", xla


def _bf16_cpu_only():
    """True on a machine without GPU or TPU whose CPU has bfloat16 instructions."""
    import tensorflow as tf  # not at the top: tfblocks-train lists POLICIES without it

    accelerators = tf.config.list_physical_devices("GPU") + tf.config.list_physical_devices("TPU")
    return not accelerators and cpu_has_bf16()
