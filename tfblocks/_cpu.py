"""What the CPU can do, read without TensorFlow: the instruction-set flags of
/proc/cpuinfo (Linux), for choices that must be made before TensorFlow loads or that
follow TensorFlow's own CPU rules (`tfblocks/_allocator.py`,
`tfblocks/training/precision.py`)."""

import functools


@functools.lru_cache(maxsize=1)
def cpu_flags():
    """The flags of the first CPU in /proc/cpuinfo as a frozenset, or None where the
    system does not list them (not Linux, or no `flags` line).

    Example:
    >>> flags = cpu_flags()
    >>> flags is None or isinstance(flags, frozenset)
    True
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return None
