"""Test-wide settings: the TensorFlow backend, quiet logs, a fresh Keras state, and the
`--cpu-times N` report."""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# What the suite's time goes to: tracing Python into graphs and compiling XLA programs for
# tiny models, in this process and in the scripts it starts (they inherit the environment).
# - XLA's LLVM back end at optimization level 0: the same HLO programs, with less time
#   spent optimizing machine code that runs for milliseconds (test_decoding's two slowest
#   tests: 152.8 -> 137.0 CPU-s, 2026-12-02). Results agree up to float rounding (no FMA
#   contraction or vectorized reductions at level 0), which is what the tests' tolerances
#   allow for anyway. A level the caller put in XLA_FLAGS is kept.
# - Under pytest-xdist (`make test`), TensorFlow's thread pools share the cores among the
#   processes: cores // processes threads each (one each on the 2-core CI machine). Two
#   test processes with pools as large as the machine (and a script one of them waits
#   for) oversubscribe it, and idle pool threads spin. A count the caller set is kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _share = (_cores or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, _share)))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(max(1, _share)))

import pytest


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts with float32 and fresh layer names, whatever the last one did."""
    # Imported here, not at the top: pytest-xdist's controlling process loads this file
    # too, runs no test, and need not spend seconds importing TensorFlow first.
    import keras

    keras.config.set_dtype_policy("float32")
    # free_memory=False: no gc.collect() per test. With the heap of a long test session
    # a full collection took ~1 s, i.e. several minutes of a 570-test run; Python's own
    # generational collector still runs as usual.
    keras.utils.clear_session(free_memory=False)
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


# The order of the files ------------------------------------------------------------------
# `make test` runs the files in 2 processes (`--dist loadfile`): each process takes the next
# file when it is almost out of work. pytest-xdist's default order (most tests first) put
# the few-test files that run whole jobs (training, export, benchmark scripts) last, so one
# process was still running them long after the other had finished. The files that used
# the most CPU time (`--cpu-times`, 2026-12-02) go first here, heaviest first, and the many
# cheap tests fill in at the end; a file not listed keeps its place after these. The order
# changes only the wall time, never what runs; a run without pytest-xdist keeps pytest's own
# order (a failure in a quick test still shows first). This also sets xdist's
# --loadscope-reorder (most tests first) off, whatever the command line said.
HEAVY_FIRST = (
    "tests/benchmarks/test_benchmarks.py",
    "tests/test_decoding.py",
    "tests/examples/test_translate.py",
    "tests/test_export.py",
    "tests/training/test_multi_worker.py",
    "tests/test_readme.py",
    "tests/test_run_folder.py",
    "tests/test_generator.py",
    "tests/examples/test_language_model.py",
    "tests/training/test_distribute.py",
    "tests/training/test_learning.py",
    "tests/examples/test_attention_maps.py",
    "tests/text/test_dataset.py",
    "tests/test_ctranslate2.py",
    "tests/examples/test_pre_vs_post_ln.py",
    "tests/examples/test_quickstart.py",
    "tests/training/test_mixed_precision.py",
    "tests/test_allocator.py",
    "tests/training/test_resume.py",
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker
        return
    rank = {name: index for index, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


# `pytest --cpu-times N`: the N test files and tests that used the most CPU time -----------
# On the 2-core CI machine both processes keep both cores busy almost all the run, so the
# suite's wall time follows its CPU time / 2; CPU seconds say what to make cheaper, while
# the wall times of `--durations` also grow with what the other process runs at the same
# time. A test's CPU time is its process's (all threads) plus that of the child processes
# it waited for (scripts run through `subprocess`); a module fixture's set-up counts for
# the file's first test that uses it, its teardown for the file's last test.

_CPU_START = pytest.StashKey[tuple]()
_CPU = {}  # nodeid -> CPU seconds, in the process that prints the report
_SPANS = {}  # worker -> [(start, end) wall-clock times of its tests], same process


def _count(value):
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"--cpu-times must be >= 0, got {value!r}")
    return number


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-times",
        type=_count,
        default=0,
        metavar="N",
        help="report the N test files and tests that used the most CPU time",
    )


def _cpu_seconds():
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("cpu_times"):
        item.stash[_CPU_START] = (_cpu_seconds(), time.time())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        cpu, wall = item.stash[_CPU_START]
        report.user_properties.append(("cpu_s", _cpu_seconds() - cpu))
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        report.user_properties.append(("span", (worker, wall, time.time())))
    return report


def pytest_runtest_logreport(report):
    properties = dict(report.user_properties)
    if report.when == "teardown" and "cpu_s" in properties:
        _CPU[report.nodeid] = properties["cpu_s"]
        worker, start, end = properties["span"]
        _SPANS.setdefault(worker, []).append((start, end))


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("cpu_times")
    if not count or not _CPU:
        return
    files = {}
    for nodeid, seconds in _CPU.items():
        name = nodeid.split("::")[0]
        files[name] = files.get(name, 0.0) + seconds
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU time: {sum(_CPU.values()):.0f} s in all")
    for title, table in (("files", files), ("tests", _CPU)):
        shown = min(count, len(table))
        write(f"the {shown} {title} that used the most CPU time (process + child processes):")
        for name, seconds in sorted(table.items(), key=lambda kv: -kv[1])[:shown]:
            write(f"{seconds:8.1f} s  {name}")
    # When each process ran out of work: a process that ends long before the others
    # leaves a core idle (the file order of the schedule, not the tests, is then to blame).
    begin = min(start for spans in _SPANS.values() for start, _ in spans)
    finish = max(end for spans in _SPANS.values() for _, end in spans)
    for worker, spans in sorted(_SPANS.items()):
        end = max(e for _, e in spans)
        write(
            f"process {worker}: {len(spans)} tests, last one ended at {end - begin:.0f} s "
            f"({finish - end:.0f} s before the run's last)"
        )
