"""Which dtype policy the translation job trains with: `"auto"` picks the faster one.

On a CPU with bfloat16 dot-product instructions (`avx512_bf16` or AMX), TensorFlow's
oneDNN matmul kernels run bfloat16 faster than float32, while XLA's CPU backend runs it
slower (figures: docs/performance.md, "Measured design choices"). So a step *without*
XLA, the translation job's default on variable-length batches, trains fastest under
`mixed_bfloat16` (float32 variables, bfloat16 compute, float32 logits and loss); with
XLA, or on an older CPU, float32 stays the default. GPUs and TPUs keep float32 unless
asked (`mixed_float16` / `mixed_bfloat16`): this project has no figures for them.
"""

from tfblocks import _checks
from tfblocks._cpu import cpu_flags

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
    """The Keras dtype policy name `policy` stands for.

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
