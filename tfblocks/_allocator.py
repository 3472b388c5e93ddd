"""TensorFlow's CPU memory allocator: a pool for the training step's large buffers.

Which allocator TensorFlow uses for CPU tensors depends on oneDNN, which TensorFlow
turns on by default on Linux x86 CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX
(the environment variable `TF_ENABLE_ONEDNN_OPTS` overrides that):

* oneDNN on: its allocator keeps blocks of 4 KiB and more in a pool (BFC, best fit with
  coalescing) and reuses them from step to step.
* oneDNN off (e.g. an AVX2-only CPU): every tensor goes to `malloc`. The training step
  frees and allocates large buffers (the `[batch, length, vocab]` logits and their
  gradient: about 131 MB at 4096 tokens and 8000 ids) on every step; glibc serves
  blocks that large with `mmap` and returns them with `munmap`, so each step faults its
  memory in from the kernel again.

In the second case `use_bfc_allocator()` asks TensorFlow for its BFC pool instead, by
setting `TF_CPU_ALLOCATOR_USE_BFC=true` (read when TensorFlow creates its CPU device:
at the first operation or device query, not at `import tensorflow`) and, on machines
with more physical memory than TensorFlow's 64 GiB default limit for that pool,
`TF_CPU_BFC_MEM_LIMIT_IN_MB` to the physical memory. It runs when tfblocks is imported
(`tfblocks/__init__.py`, before anything of tfblocks touches TensorFlow) and changes
nothing when the user set `TF_CPU_ALLOCATOR_USE_BFC` (to `true`/`1` or `false`/`0`),
when oneDNN is on, or off Linux x86. Figures: docs/performance.md, "Measured design
choices".

Consequences, also in docs/performance.md: the pool grows as needed and keeps its memory until
the process ends; the variables are in `os.environ`, so processes the program starts
inherit them; a program that ran TensorFlow operations before importing tfblocks keeps
the allocator it has. `TF_CPU_ALLOCATOR_USE_BFC=false` before importing tfblocks keeps
TensorFlow's default.

It must not import TensorFlow.
"""

import os
import platform
import sys

from tfblocks._cpu import cpu_flags

USE_BFC = "TF_CPU_ALLOCATOR_USE_BFC"
LIMIT_MB = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# The /proc/cpuinfo flags for which TensorFlow turns oneDNN on by default on Linux.
ONEDNN_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
_TF_DEFAULT_LIMIT_MB = 1 << 16  # TensorFlow's limit when LIMIT_MB is unset: 64 GiB


def physical_memory_mb():
    """The machine's physical memory in MiB, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (AttributeError, ValueError, OSError):
        return None


def onednn_enabled(environ, flags, linux_x86=None):
    """Whether TensorFlow will run with oneDNN (and so with its pooling allocator).

    Args:
        environ: the environment (`TF_ENABLE_ONEDNN_OPTS` decides when it is a boolean).
        flags: the CPU's /proc/cpuinfo flags, or None when unknown.
        linux_x86: whether this is Linux on x86-64; None: this machine.

    Returns:
        True or False, or None where tfblocks does not know TensorFlow's default.
    """
    value = environ.get(ONEDNN, "").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    if linux_x86 is None:
        linux_x86 = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
    if not linux_x86 or flags is None:
        return None
    return any(flag in flags for flag in ONEDNN_CPU_FLAGS)


def use_bfc_allocator(environ=None, onednn="detect", memory_mb="detect"):
    """Asks TensorFlow for its BFC CPU allocator where it would otherwise use `malloc`.

    Args:
        environ: the environment to set (default `os.environ`).
        onednn: whether oneDNN will be on (True, False, or None: unknown); `"detect"`:
            this machine's (`onednn_enabled`).
        memory_mb: physical memory in MiB (None: unknown); `"detect"`: this machine's.

    Returns:
        The names of the variables it set (empty when it changed nothing).
    """
    environ = os.environ if environ is None else environ
    if USE_BFC in environ:
        return []  # the user chose
    if onednn == "detect":
        onednn = onednn_enabled(environ, cpu_flags())
    if onednn is not False:
        return []  # oneDNN's allocator pools already, or TensorFlow's choice is unknown
    environ[USE_BFC] = "true"
    changed = [USE_BFC]
    memory_mb = physical_memory_mb() if memory_mb == "detect" else memory_mb
    if LIMIT_MB not in environ and memory_mb and memory_mb > _TF_DEFAULT_LIMIT_MB:
        environ[LIMIT_MB] = str(memory_mb)
        changed.append(LIMIT_MB)
    return changed


use_bfc_allocator()
