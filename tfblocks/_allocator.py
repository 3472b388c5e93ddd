"""TensorFlow's CPU memory allocator: the BFC allocator, which tfblocks turns on by default.

TensorFlow's default CPU allocator hands every tensor to `malloc`. A training step of
the translation model allocates and frees large buffers (logits `[batch, length,
vocab]`, attention scores, their gradients) on every step; glibc serves blocks that
large with `mmap` and returns them with `munmap`, so each step faults its memory in
again from the kernel. Measured on small_parallel_enja (`benchmarks/input_shapes.py
--limit-train 10000 --epochs 2 --modes dynamic`, transformer_small, 2-core AMD EPYC
without AVX-512): 61.6 s of the process's 281.7 CPU-seconds went to the kernel, and the
second epoch ran at 1864 real target tokens/s; with TensorFlow's best-fit-with-coalescing
(BFC) allocator, which keeps freed memory in its own pool, 5.8 s and 2423 tokens/s
(1.30x), with the same losses (see benchmarks/RESULTS.md, "The CPU allocator").

TensorFlow has the BFC allocator for CPU memory but uses it only when the environment
variable `TF_CPU_ALLOCATOR_USE_BFC` is true when it creates its CPU allocator (at the
first operation, not at `import tensorflow`). `use_bfc_allocator()` runs when tfblocks
is imported (`tfblocks/__init__.py`, before anything of tfblocks runs an operation) and
sets, unless the user already set them:

* `TF_CPU_ALLOCATOR_USE_BFC=true`;
* `TF_CPU_BFC_MEM_LIMIT_IN_MB`: the machine's physical memory when that is more than
  TensorFlow's default limit for this pool (64 GiB), so that a large machine's memory
  stays usable.

To keep TensorFlow's default allocator, set `TF_CPU_ALLOCATOR_USE_BFC=false` before
importing tfblocks. In a program that ran TensorFlow operations before importing
tfblocks the setting has no effect (TensorFlow's allocator already exists). The pool
grows as needed and does not give memory back to the system before the process ends.

It must not import TensorFlow.
"""

import os

USE_BFC = "TF_CPU_ALLOCATOR_USE_BFC"
LIMIT_MB = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
_TF_DEFAULT_LIMIT_MB = 1 << 16  # TensorFlow's limit when LIMIT_MB is unset: 64 GiB


def physical_memory_mb():
    """The machine's physical memory in MiB, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (AttributeError, ValueError, OSError):
        return None


def use_bfc_allocator(environ=None, memory_mb=None):
    """Sets TensorFlow's BFC CPU allocator in `environ` (default `os.environ`) unless the
    user chose; returns the names it set."""
    environ = os.environ if environ is None else environ
    memory_mb = physical_memory_mb() if memory_mb is None else memory_mb
    changed = []
    if USE_BFC not in environ:
        environ[USE_BFC] = "true"
        changed.append(USE_BFC)
    if LIMIT_MB not in environ and memory_mb is not None and memory_mb > _TF_DEFAULT_LIMIT_MB:
        environ[LIMIT_MB] = str(memory_mb)
        changed.append(LIMIT_MB)
    return changed


use_bfc_allocator()
