"""`pytest --cpu-times N`: the N test files and tests that used the most CPU time.

Loaded by tests/conftest.py (`pytest_plugins`). With every core busy for most of a run,
the suite's wall time follows its CPU time divided by the cores; CPU seconds say what to
make cheaper, while the wall times of `--durations` also grow with whatever the other
processes run at the same time. A test's CPU time is its process's (all threads) plus
that of the child processes it waited for (scripts run through `subprocess`); a module
fixture's set-up counts for the file's first test that uses it, its teardown for the
file's last test.
"""

import argparse
import os
import time

import pytest

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
