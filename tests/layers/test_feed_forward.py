"""Tests for tfblocks.DenseReluDense."""

import keras
import numpy as np
import pytest

from tests.layers.harness import run_layer_test
from tfblocks import DenseReluDense

RNG = np.random.default_rng(3)


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("activation", ["relu", "gelu", "swish", "silu"])
def test_layer_harness(tmp_path, activation):
    run_layer_test(
        DenseReluDense,
        {"filter_size": 32, "activation": activation, "dropout": 0.1},
        RNG.normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
        check_bad_inputs=True,
    )


def test_matches_formula_on_last_axis_only():
    x = RNG.normal(size=(2, 5, 8)).astype("float32")
    ffn = DenseReluDense(filter_size=32, output_size=6)
    y = _np(ffn(x))
    w1, b1 = _np(ffn.filter_dense.kernel), _np(ffn.filter_dense.bias)
    w2, b2 = _np(ffn.output_dense.kernel), _np(ffn.output_dense.bias)
    assert w1.shape == (8, 32) and w2.shape == (32, 6)
    ffn.filter_dense.bias.assign(RNG.normal(size=32).astype("float32"))
    b1 = _np(ffn.filter_dense.bias)
    y = _np(ffn(x))
    want = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(y, want, atol=1e-5)
    # The same matrices at every position: position 3 alone gives the same row.
    np.testing.assert_allclose(_np(ffn(x[:, 3:4])), y[:, 3:4], atol=1e-6)


def test_gelu_formula():
    x = RNG.normal(size=(1, 2, 4)).astype("float32")
    ffn = DenseReluDense(filter_size=8, activation="gelu")
    y = _np(ffn(x))
    h = x @ _np(ffn.filter_dense.kernel) + _np(ffn.filter_dense.bias)
    gelu = 0.5 * h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2)))
    want = gelu @ _np(ffn.output_dense.kernel) + _np(ffn.output_dense.bias)
    np.testing.assert_allclose(y, want, atol=1e-5)


@pytest.mark.parametrize("activation", ["swish", "silu"])
def test_swish_formula(activation):
    x = RNG.normal(size=(1, 3, 4)).astype("float32")
    ffn = DenseReluDense(filter_size=8, activation=activation)
    ffn.build(x.shape)
    ffn.filter_dense.bias.assign(RNG.normal(size=8).astype("float32"))
    ffn.output_dense.bias.assign(RNG.normal(size=4).astype("float32"))
    h = x.astype("float64") @ _np(ffn.filter_dense.kernel) + _np(ffn.filter_dense.bias)
    want = (h / (1 + np.exp(-h))) @ _np(ffn.output_dense.kernel) + _np(ffn.output_dense.bias)
    np.testing.assert_allclose(_np(ffn(x)), want, atol=1e-5)


def test_without_biases():
    x = RNG.normal(size=(2, 3, 4)).astype("float32")
    ffn = DenseReluDense(filter_size=8, use_bias=False)
    y = _np(ffn(x))
    assert ffn.filter_dense.bias is None and ffn.output_dense.bias is None
    assert ffn.count_params() == 2 * 4 * 8
    want = np.maximum(0.0, x @ _np(ffn.filter_dense.kernel)) @ _np(ffn.output_dense.kernel)
    np.testing.assert_allclose(y, want, atol=1e-5)


def test_parameter_count_of_base_ffn():
    ffn = DenseReluDense(filter_size=2048)
    ffn.build((None, None, 512))
    assert ffn.count_params() == 2 * 512 * 2048 + 2048 + 512


def test_keeps_keras_mask():
    inp = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(10, 8, mask_zero=True)(inp)
    out = DenseReluDense(filter_size=16)(h)
    assert out._keras_mask is not None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"filter_size": 0}, "filter_size=0"),
        ({"filter_size": 8, "output_size": -1}, "output_size=-1"),
        ({"filter_size": 8, "activation": "tanh"}, "activation='tanh'"),
        ({"filter_size": 8, "dropout": 1.5}, "dropout=1.5"),
    ],
)
def test_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        DenseReluDense(**kwargs)


def test_bad_input_shapes_name_the_argument():
    ffn = DenseReluDense(filter_size=16)
    ffn(np.zeros((2, 3, 8), "float32"))
    assert tuple(ffn(np.zeros((3, 8), "float32")).shape) == (3, 8)  # any leading axes
    with pytest.raises(ValueError, match=r"`x` must have rank >= 2.*x\.shape=\(8,\)"):
        ffn(np.zeros((8,), "float32"))
    with pytest.raises(ValueError, match=r"`x` must have last dimension 8.*\(2, 3, 5\)"):
        ffn(np.zeros((2, 3, 5), "float32"))
