"""Quiet TensorFlow for tfblocks' programs: no C++ info, warning or CUDA error lines.

A program that uses tfblocks (the example scripts, the `tfblocks-*` commands) should
print what a person wants to read, not TensorFlow's C++ log lines such as
`oneDNN custom operations are on` or, on a machine without a GPU,
`failed call to cuInit: INTERNAL: CUDA error`, which reads like a failure.

Two things are needed, both before TensorFlow is imported:

* `TF_CPP_MIN_LOG_LEVEL=3` (kept if the user set it): TensorFlow reads it once, at
  its first log line, and then drops C++ lines below ERROR (3) — the cuInit line is an
  ERROR line. It does not hide anything from Python: exceptions, Keras' progress and
  Python warnings are unchanged, and GPUs stay visible.
* TensorFlow's shared libraries log a few lines while they load, before they read
  that variable (`All log messages before absl::InitializeLog() ...`, the oneDNN and
  `cudart_stub` lines). `quiet_tensorflow` imports TensorFlow with the process's
  standard error (file descriptor 2) redirected to a temporary file, then writes
  back every line except C++ log lines below the chosen level.

This module is imported by `tfblocks/__init__.py` before anything else that can load
TensorFlow (only `tfblocks/_allocator.py`, which sets environment variables and never
imports TensorFlow, runs before it) and acts only when the program asks for it: the
environment variable `TFBLOCKS_QUIET=1` (the examples set it before importing
tfblocks), or a program named `tfblocks-*` (the console scripts) unless
`TFBLOCKS_QUIET=0`. `--verbose` on the command line, or `TF_CPP_MIN_LOG_LEVEL` set to
0, keeps every line. Importing tfblocks as a library changes no logging.

It must not import TensorFlow at module level.
"""

import importlib
import os
import re
import sys
import tempfile

# absl/TSL C++ log lines: `I0000 00:00:1796037712.885045    5047 port.cc:153] ...`
# and the older `2024-01-01 12:00:00.000000: I tensorflow/core/...` form.
_LOG_LINE = re.compile(
    r"(?:(?P<sev>[IWE])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<old_sev>[IWE]) \S+:\d+\])"
)
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called"
_LEVELS = {"I": 0, "W": 1, "E": 2}


def wants_quiet(argv=None, environ=None):
    """Whether this program asked for quiet TensorFlow (see the module docstring)."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if "--verbose" in argv[1:]:
        return False
    requested = environ.get("TFBLOCKS_QUIET", "").strip()
    if requested:
        return requested not in ("0", "false", "False", "no")
    return bool(argv) and os.path.basename(argv[0]).startswith("tfblocks-")


def is_noise(line, min_level):
    """Whether `line` is a C++ log line that TF_CPP_MIN_LOG_LEVEL=`min_level` hides."""
    if min_level >= 1 and line.startswith(_ABSL_PREAMBLE):
        return True
    match = _LOG_LINE.match(line)
    if not match:
        return False
    return _LEVELS[match.group("sev") or match.group("old_sev")] < min_level


def quiet_tensorflow():
    """Imports TensorFlow with its C++ log lines below TF_CPP_MIN_LOG_LEVEL (default 3) hidden.

    Returns:
        False (and does nothing) if TensorFlow was already imported, else True.
    """
    if "tensorflow" in sys.modules:
        return False
    try:
        min_level = int(os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3"))
    except ValueError:
        min_level = 0
    sys.stderr.flush()
    try:
        saved = os.dup(2) if min_level > 0 else None
    except OSError:  # no standard error to redirect
        saved = None
    if saved is None:
        importlib.import_module("tensorflow")
        return True
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            importlib.import_module("tensorflow")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(True) if not is_noise(line, min_level)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
    return True


if wants_quiet():
    quiet_tensorflow()
