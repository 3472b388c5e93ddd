"""Test-wide settings: the TensorFlow backend, quiet logs, a fresh Keras state, and the
`--cpu-times N` report."""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest


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
# On the 2-core CI machine both processes keep both cores busy almost all the run, so the
# suite's wall time follows its CPU time / 2; CPU seconds say what to make cheaper, while
# the wall times of `--durations` also grow with what the other process runs at the same
# time. A test's CPU time is its process's (all threads) plus that of the child processes
# it waited for (scripts run through `subprocess`); a module fixture's set-up counts for
# the file's first test that uses it, its teardown for the file's last test.

_CPU_START = pytest.StashKey[float]()
_CPU = {}  # nodeid -> CPU seconds, in the process that prints the report


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
        item.stash[_CPU_START] = _cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        report.user_properties.append(("cpu_s", _cpu_seconds() - item.stash[_CPU_START]))
    return report


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
        shown = min(count, len(table))
        write(f"the {shown} {title} that used the most CPU time (process + child processes):")
        for name, seconds in sorted(table.items(), key=lambda kv: -kv[1])[:shown]:
            write(f"{seconds:8.1f} s  {name}")
