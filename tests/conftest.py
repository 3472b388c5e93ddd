"""Test-wide settings: the TensorFlow backend, quiet logs, and a fresh Keras state."""

import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest

# The test files that used the most CPU time (`make test`'s `--cpu-times` report of a
# clean-clone CI run, 2026-12-01), most first. `make test` hands files to its two
# processes in collection order (`--no-loadscope-reorder`; pytest-xdist would otherwise
# put files with many tests first, i.e. these, most of them one to four long tests, last):
# starting with the longest leaves short files to fill the end, so both processes finish
# about together (that run took 1175 s for 2096 CPU-seconds: 127 s more than 2096 / 2, one
# core idle). Files not listed keep their order after these; a stale list costs only time.
LONGEST_FIRST = (
    "tests/benchmarks/test_benchmarks.py",
    "tests/test_decoding.py",
    "tests/examples/test_translate.py",
    "tests/test_run_folder.py",
    "tests/test_readme.py",
    "tests/test_export.py",
    "tests/training/test_multi_worker.py",
    "tests/test_generator.py",
    "tests/examples/test_language_model.py",
    "tests/training/test_distribute.py",
    "tests/examples/test_attention_maps.py",
    "tests/training/test_mixed_precision.py",
    "tests/training/test_learning.py",
    "tests/examples/test_pre_vs_post_ln.py",
    "tests/test_quiet.py",
    "tests/training/test_xla_step.py",
    "tests/test_ctranslate2.py",
    "tests/training/test_resume.py",
    "tests/layers/test_cache.py",
    "tests/examples/test_quickstart.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts with float32 and fresh layer names, whatever the last one did."""
    keras.config.set_dtype_policy("float32")
    # free_memory=False: no gc.collect() per test. With the heap of a long test session
    # a full collection took ~1 s, i.e. several minutes of a 570-test run; Python's own
    # generational collector still runs as usual.
    keras.utils.clear_session(free_memory=False)
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


# `pytest --cpu-times N`: the N test files and tests that used the most CPU time -----------
# On a 2-core machine every core is busy for the whole run, so the suite's wall time is
# about its CPU time / 2: CPU seconds, not the wall durations of `--durations` (which count
# waiting for the other process), say what to make cheaper. A test's CPU time is its
# process's (all threads) plus that of the child processes it waited for (scripts run
# through `subprocess`); module fixtures count for the first test that uses them.


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-times",
        type=int,
        default=0,
        metavar="N",
        help="report the N test files and tests that used the most CPU time",
    )


def _cpu_seconds():
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not item.config.getoption("cpu_times"):
        yield
        return
    item.cpu_start = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.config.getoption("cpu_times") and call.when == "teardown":
        start = getattr(item, "cpu_start", None)
        if start is not None:
            outcome.get_result().user_properties.append(("cpu_s", _cpu_seconds() - start))


_CPU = {}


def pytest_runtest_logreport(report):
    seconds = dict(report.user_properties).get("cpu_s")
    if report.when == "teardown" and seconds is not None:
        _CPU[report.nodeid] = seconds


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
        write(f"the {count} {title} that used the most CPU time (process + child processes):")
        for name, seconds in sorted(table.items(), key=lambda kv: -kv[1])[:count]:
            write(f"{seconds:8.1f} s  {name}")
