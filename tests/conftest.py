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
    keras.utils.clear_session()
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
