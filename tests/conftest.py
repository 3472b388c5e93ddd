"""Test-wide settings: the TensorFlow backend, quiet logs, a fresh Keras state, the `heavy`
files first under pytest-xdist, and the `--cpu-times N` report (tests/cpu_times.py)."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Most of the suite's time goes to tracing and XLA-compiling tiny models, in this process
# and in the scripts it starts (they inherit the environment):
# - XLA's LLVM back end at optimization level 0 compiles the same programs with less time
#   spent optimizing machine code that runs for milliseconds. Results agree up to float
#   rounding, which the tests' tolerances allow for. A level set in XLA_FLAGS is kept.
# - Under pytest-xdist the processes share the cores: TensorFlow's thread pools get
#   cores // processes threads each, so that pools as large as the machine in every
#   process do not oversubscribe it. A count set in the environment is kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _share = (_cores or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, _share)))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(max(1, _share)))

import pytest

pytest_plugins = ["tests.cpu_times"]

# The scripts that make the committed fixtures import torch and transformers, which the
# suite does without: never collected (not even for their doctests).
collect_ignore = ["data"]


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts with float32 and fresh layer names, whatever the last one did."""
    # Imported here, not at the top: pytest-xdist's controlling process loads this file
    # too, runs no test, and need not spend seconds importing TensorFlow first.
    import keras

    keras.config.set_dtype_policy("float32")
    # free_memory=False: no full gc.collect() per test, which costs about a second each
    # with the heap of a long session; Python's generational collector still runs.
    keras.utils.clear_session(free_memory=False)
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


# The order of the files: `heavy` ones first --------------------------------------------
# Under pytest-xdist with `--dist loadfile` (`make test`) each process takes the next file
# when it runs out of work. Files that run whole jobs (`pytestmark = pytest.mark.heavy`:
# training runs, exports, scripts) go first, so that the many cheap tests fill in at the
# end instead of one process still running a job long after the other has finished.
# Otherwise the collection order is kept, so xdist's --loadscope-reorder (most tests
# first) is turned off. The order changes only the wall time, never what runs; without
# pytest-xdist pytest's own order stays (a failure in a quick test still shows first).


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker
        return
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
