"""How the translation job runs its training step: the dtype policy, and whether XLA
compiles the step; `"auto"` picks the faster execution for the batches' shapes.

On a CPU with bfloat16 dot-product instructions (`avx512_bf16` or AMX), TensorFlow's
oneDNN matmul kernels run bfloat16 faster than float32, while XLA's CPU backend runs it
slower (figures: docs/performance.md, "Measured design choices"). Variable-length batches
(`shapes="dynamic"`, the job's default) train without XLA, which would compile once per
shape, and so under `mixed_bfloat16` there (float32 variables, bfloat16 compute, float32
logits and loss). `"buckets"` and `"max_length"` compile with XLA and stay float32.
Packed rows have one static shape and need no XLA to avoid retracing, so on such a CPU
they train without XLA in `mixed_bfloat16` too: there, variable-length batches trained
that way beat packed rows in float32 under XLA (packed rows in `mixed_bfloat16` are not
timed there yet). On a CPU without bfloat16 instructions packed rows keep XLA, whose float32
step is the faster one once compiled. GPUs and TPUs keep float32 unless asked
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


def resolve_dtype_policy(policy="auto", jit_compile=False):
    """The Keras dtype policy name `policy` stands for, for a step compiled with XLA or not.

    Args:
        policy: one of `POLICIES`. `"auto"` is `"mixed_bfloat16"` when the step runs
            without XLA on a machine with no GPU or TPU whose CPU has bfloat16
            instructions (`cpu_has_bf16`), else `"float32"`.
        jit_compile: whether the training step is compiled with XLA.

    Returns:
        `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`.

    Example:
    >>> resolve_dtype_policy("float32"), resolve_dtype_policy("auto", jit_compile=True)
    ('float32', 'float32')
    """
    _checks.check_choice("policy", policy, POLICIES)
    _checks.check_bool("jit_compile", jit_compile)
    if policy != "auto":
        return policy
    import tensorflow as tf  # not at the top: tfblocks-train lists POLICIES without it

    accelerators = tf.config.list_physical_devices("GPU") + tf.config.list_physical_devices("TPU")
    if not jit_compile and not accelerators and cpu_has_bf16():
        return "mixed_bfloat16"
    return "float32"


def training_execution(shapes="dynamic", policy="auto"):
    """The dtype policy of a training step on `shapes` batches, and whether XLA compiles it.

    The translation job's one rule (the module docstring gives the measured reasons): a
    step compiles with XLA when its batches have few shapes (`"buckets"`, `"max_length"`,
    `"packed"`), not on `"dynamic"` ones, and `policy` resolves for that step
    (`resolve_dtype_policy`). Except: packed rows under `"auto"`, where a step without
    XLA would train in `"mixed_bfloat16"` (a CPU with bfloat16 instructions, no GPU or
    TPU), train that way, without XLA. An explicit `policy` changes no XLA choice.

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
    xla = shapes != "dynamic"  # fixed shapes: one XLA program per shape
    if shapes == "packed" and policy == "auto":
        # One static shape: no retracing without XLA, so bfloat16 wins where it can.
        xla = resolve_dtype_policy("auto", jit_compile=False) != "mixed_bfloat16"
    return resolve_dtype_policy(policy, xla), xla
