"""Quiet TensorFlow by default: no C++ log lines below FATAL, no warnings of its Python loggers.

A program that imports tfblocks should print what a person wants to read, not
TensorFlow's log lines such as `oneDNN custom operations are on`, `Could not find cuda
drivers on your machine` or, on the first operation of a machine without a GPU,
`failed call to cuInit: INTERNAL: CUDA error`, which reads like a failure.

`quiet_tensorflow()` runs when tfblocks is imported (`tfblocks/__init__.py`, before
anything of tfblocks can load TensorFlow) and imports nothing heavy itself; it prepares
TensorFlow's first import, whoever asks for it later (tfblocks, Keras, the program):

* `TF_CPP_MIN_LOG_LEVEL=3`, kept if the user set it: TensorFlow reads it once, at its
  first log line, and then drops C++ lines below that level (3: below FATAL; the cuInit
  line is an ERROR line). Exceptions, Keras' progress and Python's `warnings` are
  unchanged, and GPUs stay visible.
* TensorFlow's shared libraries log a few lines while they load, before they read that
  variable (`All log messages before absl::InitializeLog() ...`, the oneDNN and
  `cudart_stub` lines). A `sys.meta_path` finder (`_QuietImport`) runs the import of
  the `tensorflow` package with the process's standard error (file descriptor 2)
  redirected to a temporary file, then writes back every line except C++ log lines
  below that level.
* After that import, the `tensorflow` and `absl` Python loggers (deprecation and
  retracing notices, SavedModel warnings) are set to ERROR where they have no level yet.

A program that sets `TF_CPP_MIN_LOG_LEVEL` itself, before importing tfblocks, chooses
for itself: its level is kept (the lines TensorFlow logs while loading are filtered at
that level too; `0` shows every line) and the Python loggers are left alone. A program
run with `--verbose` on its command line (the `tfblocks-*` commands and the examples
take it), and one that imported TensorFlow before tfblocks, keep TensorFlow's logging.

It must not import TensorFlow.
"""

import contextlib
import importlib.util
import logging
import os
import re
import sys

LEVEL = "TF_CPP_MIN_LOG_LEVEL"
# absl/TSL C++ log lines: `I0000 00:00:1796037712.885045    5047 port.cc:153] ...`
# and the older `2024-01-01 12:00:00.000000: I tensorflow/core/...` form.
_LOG_LINE = re.compile(
    r"(?:(?P<sev>[IWE])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<old_sev>[IWE]) \S+:\d+\])"
)
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called"
_LEVELS = {"I": 0, "W": 1, "E": 2}


def wants_quiet(argv=None):
    """Whether this program gets quiet TensorFlow: unless `--verbose` is on its command line."""
    argv = sys.argv if argv is None else argv
    return "--verbose" not in argv[1:]


def is_noise(line, min_level):
    """Whether `line` is a C++ log line that TF_CPP_MIN_LOG_LEVEL=`min_level` hides."""
    if min_level >= 1 and line.startswith(_ABSL_PREAMBLE):
        return True
    match = _LOG_LINE.match(line)
    if not match:
        return False
    return _LEVELS[match.group("sev") or match.group("old_sev")] < min_level


def min_log_level(environ=None):
    """TF_CPP_MIN_LOG_LEVEL as a number (0, what TensorFlow reads, when it is not one)."""
    environ = os.environ if environ is None else environ
    try:
        return int(environ.get(LEVEL, "0"))
    except ValueError:
        return 0


def quiet_tensorflow():
    """Quiets TensorFlow's logs from its first import on (see the module docstring).

    Returns:
        False (and does nothing) if TensorFlow was already imported, else True.
    """
    if "tensorflow" in sys.modules:
        return False
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport(quiet_python=LEVEL not in os.environ))
    os.environ.setdefault(LEVEL, "3")
    return True


class _QuietImport:
    """A `sys.meta_path` finder: the `tensorflow` package is found as usual, and its
    loader wrapped in `_QuietLoader`."""

    def __init__(self, quiet_python):
        self.quiet_python = quiet_python
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow" or self._finding:
            return None
        self._finding = True  # importlib.util.find_spec asks this finder again
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self.quiet_python)
        return spec


class _QuietLoader:
    """Runs the real loader with standard error filtered, then restores it on the module."""

    def __init__(self, loader, quiet_python):
        self.loader = loader
        self.quiet_python = quiet_python

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        with filtered_stderr(min_log_level()):
            self.loader.exec_module(module)
        if not self.quiet_python:
            return
        loggers = [logging.getLogger("tensorflow")]
        if "absl.logging" in sys.modules:  # absl's logger is made by absl, of its own class
            loggers.append(logging.getLogger("absl"))
        for logger in loggers:
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.ERROR)


@contextlib.contextmanager
def filtered_stderr(min_level):
    """Within it, file descriptor 2 goes to a temporary file; on leaving, every line of
    it but C++ log lines below `min_level` (`is_noise`) is written to standard error."""
    saved = None
    if min_level > 0 and sys.stderr is not None:  # None: a program without standard error
        sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:  # no file descriptor 2 to redirect
            saved = None
    if saved is None:
        yield
        return
    import tempfile

    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(True) if not is_noise(line, min_level)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


if wants_quiet():
    quiet_tensorflow()
