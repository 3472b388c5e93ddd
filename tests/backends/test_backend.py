"""The backend boundary's one home, tfblocks/_backend.py: the guard refuses another Keras
backend by name, in one line, without this process leaving TensorFlow."""

import ast
import os
import sys
from pathlib import Path

import pytest

from tfblocks import _backend


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_require_tensorflow_refuses_another_backend_naming_it(backend):
    with pytest.raises(_backend.BackendError) as raised:
        _backend.require_tensorflow("Decoder", backend)
    said = str(raised.value)
    assert said.startswith("Decoder runs on TensorFlow only, but Keras' backend is ")
    assert f"{backend!r}" in said and "KERAS_BACKEND=tensorflow" in said and "\n" not in said


def test_require_tensorflow_passes_on_tensorflow():
    _backend.require_tensorflow("Decoder")  # the suite's backend: Keras' own
    _backend.require_tensorflow("Decoder", "tensorflow")
    assert _backend.is_tensorflow() and _backend.name() == "tensorflow"
    assert not _backend.is_tensorflow("jax")


def test_the_guard_asks_keras_when_no_backend_is_named(monkeypatch):
    monkeypatch.setattr(_backend, "name", lambda: "jax")
    assert not _backend.is_tensorflow()
    with pytest.raises(_backend.BackendError, match="'jax'"):
        _backend.require_tensorflow("Translator")
    with pytest.raises(_backend.BackendError, match=r"^tfblocks-x runs on TensorFlow only"):
        _backend.use_tensorflow("tfblocks-x")  # Keras is loaded: too late to choose


def test_use_tensorflow_chooses_tensorflow_before_keras_loads(monkeypatch):
    monkeypatch.delitem(sys.modules, "keras")  # put back when the test ends
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    _backend.use_tensorflow("tfblocks-x")
    assert os.environ["KERAS_BACKEND"] == "tensorflow"


def test_the_boundary_module_loads_neither_keras_nor_tensorflow():
    source = Path(_backend.__file__).read_text(encoding="utf-8")
    top = [
        alias.name
        for node in ast.parse(source).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert top == ["os", "sys"], top  # keras only inside `name()`, once a function is called
