"""Test-wide settings: the TensorFlow backend, quiet logs, and a fresh Keras state."""

import os

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
