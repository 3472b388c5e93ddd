"""A run folder keeps the XLA programs its commands compile (`RUN/xla-cache/KEY/`), so that the
next command on it loads them instead of compiling them again.

XLA compiles a program for each shape of the decoding loop (batch size, source bucket,
cache length) the first time a process meets it: seconds each, in every fresh process.
TensorFlow's persistent XLA cache (`--tf_xla_persistent_cache_directory` in
`TF_XLA_FLAGS`) writes each compiled program to a folder and loads it in a later
process that asks for the same program again. `tfblocks-translate`, `tfblocks-evaluate`
and `tfblocks-serve` point it at their run folder before TensorFlow loads.

TensorFlow's key for a program holds the name it gave the traced function, which ends
with a count of the functions the process traced before: a program is found again by a
process that traces the same functions in the same order (the same command on inputs of
the same shapes; a server restarted with the same warm-up). `tfblocks-train` keeps no
cache: its test translation comes after its training steps, so a later command never
asks for those names, and the demo's run would write 114 programs, 213 MB.

- **Keyed** by TensorFlow's version, the machine's CPU features and `XLA_FLAGS`
  (`KEY`): a program compiled for another CPU (AVX-512 code on an AVX2 machine) or by
  another XLA is never loaded; a run folder copied between machines keeps one folder
  per machine.
- **Safe with several processes**: TensorFlow writes each program to a unique
  temporary file and renames it into place, so two commands filling one folder at once
  never read a partial file (a program both compile is written twice, the same).
- **A read-only run folder** is read (its programs load, new ones are not written); one
  without a cache is used without one, said in one line.
- **CPU programs only** (`--tf_xla_persistent_cache_device_types=CPU`): a GPU program
  is built for one GPU, which the key does not name.
- **Your own setting wins**: a `--tf_xla_persistent_cache_directory` already in
  `TF_XLA_FLAGS` (an empty one: no cache at all), or a `TF_XLA_FLAGS` naming a file of
  flags, is left as it is.
- Only a command that has not imported TensorFlow yet can set it (TensorFlow reads the
  flags once); the Python API (`Translator`, `load_translate`) compiles as before.

This module must not import TensorFlow: the commands call it before TensorFlow loads.
"""

import hashlib
import importlib.metadata
import os
import platform
import sys

from tfblocks._cpu import cpu_flags

CACHE_FOLDER = "xla-cache"
# `--xla auto`: a job of more lines than this decodes with XLA, a smaller one without
# (measured on the demo's model, 2 cores, AVX2, `tfblocks-translate` from a fresh
# process: 200 lines 20.33 s without XLA and 39.37 s with, 2,000 lines 23.43 s and
# 56.16 s, 10,000 lines 58.34 s and 69.14 s; about 4.4 ms a line more without XLA and
# 1.6 ms with, so XLA pays from about 14,000 lines; docs/decoding-and-serving.md, "XLA
# or not").
XLA_MIN_LINES = 15000
_FLAG = "--tf_xla_persistent_cache_directory"


def use_xla(xla, lines=None):
    """Whether a run folder's or preset's decoding is compiled with XLA for `--xla` (`xla`:
    "on", "off" or "auto") and a job of `lines` lines (None: lines as they come, as
    `--interactive` reads them). XLA compiles a program per batch shape (seconds each, in
    every fresh process) and then decodes fastest; without it the decoding is one
    TensorFlow graph for every shape, traced once: `auto` is on above `XLA_MIN_LINES`."""
    if xla not in ("auto", "on", "off"):
        raise ValueError(f"`xla` must be 'auto', 'on' or 'off', got xla={xla!r}.")
    if xla != "auto":
        return xla == "on"
    return lines is not None and lines > XLA_MIN_LINES


def cache_key():
    """`tf<version>-<machine>-<hash>`: the TensorFlow version, the machine's architecture
    and a hash of its CPU's features and of `XLA_FLAGS` (what changes the code XLA
    writes), e.g. `tf2.21.0-x86_64-3f1c2a9b0d`."""
    version = _tensorflow_version()
    features = _cpu_features()
    digest = hashlib.sha256(f"{features}\n{os.environ.get('XLA_FLAGS', '')}".encode())
    return f"tf{version}-{platform.machine() or 'cpu'}-{digest.hexdigest()[:10]}"


def _tensorflow_version():
    """The version of the installed distribution that provides `tensorflow` (tensorflow,
    tensorflow-cpu, tf-nightly, ...), read from its metadata without importing it."""
    names = importlib.metadata.packages_distributions().get("tensorflow", [])
    for name in ["tensorflow", *sorted(names)]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def _cpu_features():
    """The CPU's instruction-set flags (`_cpu.cpu_flags`), or its name where the system
    does not list them."""
    flags = cpu_flags()
    if flags is None:
        return f"{platform.processor()} {platform.machine()}"
    return " ".join(sorted(flags))


def run_folder_of(path):
    """The run folder (a folder with `run.json`) that `path` is, or whose `model/` or
    `export/N` it is; None otherwise (a preset or SavedModel of its own). Of a list of
    paths (an ensemble's `--model`s), the first path's that has one."""
    if isinstance(path, (list, tuple)):
        return next(filter(None, map(run_folder_of, path)), None)
    if not path:
        return None
    path = os.path.abspath(path)
    for folder in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        if os.path.isfile(os.path.join(folder, "run.json")):
            return folder
    return None


def _quoted(value):
    """`value` in double quotes, as TensorFlow's flag parser reads a value with spaces."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tensorflow_loaded():
    """Whether TensorFlow is imported already (its XLA flags then read or about to be)."""
    return "tensorflow" in sys.modules


def _writable(path):
    """Whether `path`, or its nearest existing parent, can be written to."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.access(path, os.W_OK | os.X_OK)


def use_run_cache(run, name):
    """Points TensorFlow's persistent XLA cache at `run`'s `xla-cache/KEY/` (`run`, a run
    folder, existing or one the command is about to write); returns that folder, or None
    where no cache is used: TensorFlow already loaded, a cache setting of the user's in
    `TF_XLA_FLAGS`, or a read-only `run` without a cache (said in one line on standard
    error, `NAME: ...`). A read-only `run` with a cache is read, not written."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    # A value that does not start with "-" names a file of flags (TensorFlow reads it).
    users = _FLAG in flags or (flags.strip() and not flags.lstrip().startswith("-"))
    if not run or _tensorflow_loaded() or users:
        return None
    folder = os.path.join(os.path.abspath(run), CACHE_FOLDER, cache_key())
    # Quoted (a path may hold spaces); CPU programs only: a GPU program is built for one
    # GPU, which the key does not name.
    options = [f"{_FLAG}={_quoted(folder)}",
               "--tf_xla_persistent_cache_device_types=CPU"]  # fmt: skip
    if not _writable(folder):
        if not os.path.isdir(folder):
            print(f"{name}: {run} cannot be written to: the XLA programs compiled now are "
                  "not kept for the next command", file=sys.stderr)  # fmt: skip
            return None
        options.append("--tf_xla_persistent_cache_read_only=true")
    os.environ["TF_XLA_FLAGS"] = " ".join([flags, *options]).strip()
    return folder
