"""The shared layer-test harness: one call checks what every tfblocks layer must do.

`run_layer_test` checks, for one layer class and one set of inputs:
- `get_config()` / `from_config()` round trip;
- an eager call and a symbolic (functional) call with the expected output shape;
- a `.keras` save/load of a functional model around the layer with identical outputs;
- one `fit` step with `jit_compile=True` that changes every trainable weight;
- `mixed_float16` and `mixed_bfloat16` calls with finite outputs in the compute dtype;
- bad input: a float input with a wider last axis, or a second input with another
  batch size, raises a ValueError that names the argument and its shape.
"""

import re

import keras
import numpy as np
import pytest


def _as_inputs(input_data):
    """Normalises input data to an ordered dict of name -> array."""
    if isinstance(input_data, dict):
        return dict(input_data)
    return {"x": input_data}


def _build_model(layer, inputs, call_kwargs, positional):
    """A functional model calling `layer` on keras.Inputs shaped like `inputs`."""
    symbolic = {
        name: keras.Input(shape=value.shape[1:], dtype=value.dtype, name=name)
        for name, value in inputs.items()
    }
    args = [symbolic[name] for name in positional]
    kwargs = {name: t for name, t in symbolic.items() if name not in positional}
    outputs = layer(*args, **kwargs, **call_kwargs)
    return keras.Model(symbolic, outputs)


def _expect_shape_error(layer, inputs, positional, call_kwargs, name):
    args = [inputs[n] for n in positional]
    kwargs = {n: v for n, v in inputs.items() if n not in positional}
    with pytest.raises(ValueError, match=rf"`{name}`.*{re.escape(name)}\.shape="):
        layer(*args, **kwargs, **call_kwargs)


def _check_bad_inputs(layer, inputs, positional, call_kwargs):
    """Mis-shaped inputs to a built layer raise ValueErrors naming argument and shape."""
    for name, value in inputs.items():
        if np.issubdtype(value.dtype, np.floating) and value.ndim >= 2:
            wider = np.concatenate([value, value[..., :1]], axis=-1)
            _expect_shape_error(layer, {**inputs, name: wider}, positional, call_kwargs, name)
    name = list(inputs)[-1]
    if len(inputs) > 1 and inputs[name].shape[0] > 1:
        fewer = {**inputs, name: inputs[name][:1]}
        _expect_shape_error(layer, fewer, positional, call_kwargs, name)


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    call_kwargs=None,
    positional=None,
    tmp_path=None,
    run_training=True,
    run_mixed_precision=True,
    zero_gradient_weights=(),
    check_bad_inputs=False,
):
    """Runs the standard battery of layer checks; raises AssertionError on failure.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        input_data: an array, or a dict of named arrays (tensor call arguments).
        expected_output_shape: the output shape of a call on `input_data`.
        call_kwargs: non-tensor call arguments (e.g. `use_causal_mask=True`).
        positional: names in `input_data` passed positionally, in order; the rest
            are passed by keyword. Defaults to the first name only.
        tmp_path: a directory for the `.keras` file (pytest's `tmp_path`).
        run_training: also run the `fit` step.
        run_mixed_precision: also run the mixed precision calls.
        zero_gradient_weights: substrings of weight paths whose gradient is zero by
            construction (e.g. the key bias: softmax ignores a per-row constant);
            the fit step must leave those unchanged instead of changing them.
        check_bad_inputs: also check the ValueErrors on mis-shaped inputs (the names
            in `input_data` must be the call's argument names).
    """
    call_kwargs = dict(call_kwargs or {})
    inputs = _as_inputs(input_data)
    positional = positional or [next(iter(inputs))]

    # Config round trip.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for key, _value in init_kwargs.items():
        assert key in config, f"constructor argument {key!r} missing from get_config()"
    revived = layer_cls.from_config(config)
    assert revived.get_config() == config

    # Eager call.
    args = [inputs[name] for name in positional]
    kwargs = {name: v for name, v in inputs.items() if name not in positional}
    eager = layer(*args, **kwargs, **call_kwargs)
    assert tuple(eager.shape) == tuple(expected_output_shape), (eager.shape, expected_output_shape)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(eager)))

    if check_bad_inputs:
        _check_bad_inputs(layer, inputs, positional, call_kwargs)

    # Symbolic call inside a functional model, then `.keras` save / load.
    model = _build_model(layer_cls(**init_kwargs), inputs, call_kwargs, positional)
    assert tuple(model.output.shape[1:]) == tuple(expected_output_shape[1:])
    before = keras.ops.convert_to_numpy(model(inputs))
    if tmp_path is not None:
        path = str(tmp_path / f"{layer_cls.__name__}.keras")
        model.save(path)
        reloaded = keras.saving.load_model(path)
        after = keras.ops.convert_to_numpy(reloaded(inputs))
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)
        assert [w.shape for w in reloaded.weights] == [w.shape for w in model.weights]

    # One XLA training step moves every trainable weight.
    if run_training:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
        rng = np.random.default_rng(0)
        target = rng.normal(size=before.shape).astype("float32")
        start = [keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights]
        history = model.fit(inputs, target, batch_size=len(target), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        for w, w0 in zip(model.trainable_weights, start, strict=False):
            moved = not np.allclose(keras.ops.convert_to_numpy(w), w0)
            frozen = any(part in w.path for part in zero_gradient_weights)
            assert moved != frozen, f"{w.path}: moved={moved}, expected moved={not frozen}"

    # Mixed precision: finite outputs in the compute dtype, float32 variables.
    if run_mixed_precision:
        for policy in ("mixed_float16", "mixed_bfloat16"):
            mixed = layer_cls(**init_kwargs, dtype=policy)
            out = mixed(*args, **kwargs, **call_kwargs)
            compute = policy.split("_")[1]
            assert keras.backend.standardize_dtype(out.dtype) == compute, (policy, out.dtype)
            assert all(w.dtype == "float32" for w in mixed.weights)
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))))
    return layer
