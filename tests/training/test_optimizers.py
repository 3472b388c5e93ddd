"""`FusedAdam` updates variables exactly as `keras.optimizers.Adam`; its gradient
accumulation and moving average of the weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.training import FusedAdam, averaged_weights


def _train(optimizer_cls, grads_fn, dtype="float32", jit_compile=None, steps=4, **kwargs):
    """Variables after `steps` updates of `optimizer_cls(**kwargs)` with `grads_fn(step)`."""
    shapes = [(5, 3), (3,), (7, 4)]
    rng = np.random.default_rng(0)  # the same start for both optimizers
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    variables = [keras.Variable(v.copy(), dtype=dtype) for v in values]
    optimizer = optimizer_cls(**kwargs)
    optimizer.build(variables)

    def step(grads):
        optimizer.apply(grads, variables)

    if jit_compile is not None:
        step = tf.function(step, jit_compile=jit_compile)
    for i in range(steps):
        step(grads_fn(i, shapes, dtype))
    return [keras.ops.convert_to_numpy(v) for v in variables], optimizer


def _dense(seed):
    rng = np.random.default_rng(seed)
    return lambda i, shapes, dtype: [
        tf.constant(rng.standard_normal(s).astype(dtype)) for s in shapes
    ]


@pytest.mark.parametrize("jit_compile", [None, False, True])
def test_same_variables_as_keras_adam(jit_compile):
    kwargs = dict(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=1e-6)
    fused, fused_opt = _train(FusedAdam, _dense(1), jit_compile=jit_compile, **kwargs)
    want, keras_opt = _train(keras.optimizers.Adam, _dense(1), jit_compile=jit_compile, **kwargs)
    for got, ref in zip(fused, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    # The moments too: a checkpoint holds the same optimizer state either way.
    for got, ref in zip(fused_opt.variables, keras_opt.variables, strict=True):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6, atol=1e-7)
    assert int(fused_opt.iterations.numpy()) == 4


def test_learning_rate_schedule_and_sparse_gradients():
    # A schedule (t2t's) and an IndexedSlices gradient, as an untied embedding lookup
    # gives, with a repeated row: the update is Adam on the dense gradient (the slices of
    # a row summed), as t2t's Adam. Keras' Adam squares each slice before summing
    # (Σg² instead of (Σg)² for v), so Keras' Adam gets the dense gradient here.
    def slices(i, shapes, dtype):
        dense = _dense(i)(i, shapes, dtype)
        rows = tf.constant([0, 3, 3])
        values = tf.constant(np.random.default_rng(i).standard_normal((3, 3)).astype(dtype))
        return [tf.IndexedSlices(values, rows, tf.constant(shapes[0])), *dense[1:]]

    def dense(i, shapes, dtype):
        return [tf.convert_to_tensor(g) for g in slices(i, shapes, dtype)]

    schedule = tfblocks.NoamSchedule(hidden_size=16, warmup_steps=2)
    fused, _ = _train(FusedAdam, slices, learning_rate=schedule, jit_compile=False)
    want, _ = _train(keras.optimizers.Adam, dense, learning_rate=schedule, jit_compile=False)
    # Default betas: TensorFlow's kernel takes 1 − β₂ in float32 (0.00099998713), Keras in
    # Python floats (float32(0.001)), 1.3e-5 apart relatively; with updates of about 0.1
    # a step here, the variables differ by a few 1e-6 after four steps.
    tolerance = dict(rtol=1e-4, atol=1e-5)
    for got, ref in zip(fused, want, strict=True):
        np.testing.assert_allclose(got, ref, **tolerance)
    sparse_keras, _ = _train(keras.optimizers.Adam, slices, learning_rate=schedule)
    assert not np.allclose(sparse_keras[0], want[0], **tolerance)  # the difference is real


def test_float16_variables():
    # The kernel in float16: 1 − β rounded in float16 (1 − 0.95 → 0.0503 instead of
    # 0.05), so the updates agree to a few percent, not to float32 rounding.
    kwargs = dict(learning_rate=0.01, beta_1=0.8, beta_2=0.95)
    start, _ = _train(FusedAdam, _dense(2), dtype="float16", steps=0, **kwargs)
    fused, _ = _train(FusedAdam, _dense(2), dtype="float16", **kwargs)
    want, _ = _train(keras.optimizers.Adam, _dense(2), dtype="float16", **kwargs)
    for got, ref, init in zip(fused, want, start, strict=True):
        assert got.dtype == np.float16
        got, ref, init = (a.astype("float32") for a in (got, ref, init))
        assert np.abs(ref - init).mean() > 5e-3  # four steps of up to lr each
        np.testing.assert_allclose(got - init, ref - init, rtol=0.03, atol=5e-4)


def test_bfloat16_variables_take_keras_update():
    # No GPU kernel of ResourceApplyAdam for bfloat16: Keras' update, the same values.
    kwargs = dict(learning_rate=0.01, beta_1=0.8, beta_2=0.95)
    fused, _ = _train(FusedAdam, _dense(2), dtype="bfloat16", **kwargs)
    want, _ = _train(keras.optimizers.Adam, _dense(2), dtype="bfloat16", **kwargs)
    start, _ = _train(FusedAdam, _dense(2), dtype="bfloat16", steps=0, **kwargs)
    for got, ref, init in zip(fused, want, start, strict=True):
        assert not np.array_equal(got, init)  # it trained
        np.testing.assert_array_equal(got, ref)


def test_amsgrad_takes_keras_update():
    fused, _ = _train(FusedAdam, _dense(3), learning_rate=0.05, amsgrad=True)
    want, _ = _train(keras.optimizers.Adam, _dense(3), learning_rate=0.05, amsgrad=True)
    for got, ref in zip(fused, want, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_compile_transformer_uses_it_and_it_round_trips():
    hp = tfblocks.hparams("transformer_tiny", vocab_size=16)
    model = tfblocks.build_transformer(hp)
    tfblocks.compile_transformer(model, hp, jit_compile=False)
    assert type(model.optimizer) is FusedAdam
    config = keras.saving.serialize_keras_object(model.optimizer)
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is FusedAdam
    assert restored.beta_2 == hp.optimizer_adam_beta2


def test_keras_adam_state_loads_into_it():
    # Run folders written before FusedAdam hold Keras Adam's state: the same variables in
    # the same order, so `--epochs` continues them with their moments and step count.
    _, keras_opt = _train(keras.optimizers.Adam, _dense(4), learning_rate=0.05)
    store = {}
    keras_opt.save_own_variables(store)
    _, fused_opt = _train(FusedAdam, _dense(4), steps=0, learning_rate=0.05)
    fused_opt.load_own_variables(store)
    assert int(fused_opt.iterations.numpy()) == 4
    for got, ref in zip(fused_opt.variables, keras_opt.variables, strict=True):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())


@pytest.mark.parametrize("jit_compile", [None, True])
def test_accumulation_updates_with_the_mean_gradient_and_counts_updates(jit_compile):
    # Six calls with accumulation over 3 = two updates with the mean of each three; the
    # schedule (rising: a micro-batch count would give another rate) and the moving
    # average see the two updates only.
    rng = np.random.default_rng(5)
    shapes = [(5, 3), (3,), (7, 4)]
    calls = [[rng.standard_normal(s).astype("float32") for s in shapes] for _ in range(6)]

    def each(i, shapes, dtype):
        return [tf.constant(g) for g in calls[i]]

    def mean(i, shapes, dtype):
        group = calls[3 * i : 3 * i + 3]
        return [tf.constant(np.mean(g, axis=0)) for g in zip(*group, strict=True)]

    kwargs = dict(learning_rate=tfblocks.NoamSchedule(16, warmup_steps=4), use_ema=True,
                  ema_momentum=0.5, jit_compile=jit_compile)  # fmt: skip
    got, accumulating = _train(FusedAdam, each, steps=6, gradient_accumulation_steps=3, **kwargs)
    want, plain = _train(FusedAdam, mean, steps=2, **kwargs)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    averages = [o._model_variables_moving_average for o in (accumulating, plain)]
    for a, b in zip(*averages, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert int(accumulating.iterations.numpy()) == 2
    assert float(accumulating.learning_rate) == float(plain.learning_rate) > 0


def test_accumulation_refuses_clipping_and_weight_decay():
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=2 with clipnorm=1\.0"):
        FusedAdam(gradient_accumulation_steps=2, clipnorm=1.0)


def test_fit_keeps_the_trained_weights_and_averaged_weights_reads_the_average():
    """Keras' `fit` would end by overwriting the weights with their averages; FusedAdam's
    leaves them, so a second `fit` continues from the trained weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(FusedAdam(0.1, use_ema=True, ema_momentum=0.6), "mse")
    kernel = model.layers[0].kernel
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.append(np.asarray(kernel).copy())
    )
    x = np.random.default_rng(0).normal(size=(12, 3)).astype("float32")
    model.fit(x, np.ones((12, 2)), batch_size=4, epochs=1, callbacks=[record], verbose=0)
    np.testing.assert_array_equal(np.asarray(kernel), seen[-1])  # not the average
    average = seen[0]  # the first update sets it, then average ← d·average + (1 − d)·w
    for weights in seen[1:]:
        average = 0.6 * average + 0.4 * weights
    np.testing.assert_allclose(averaged_weights(model)[kernel.path], average, rtol=1e-6)
    assert not np.allclose(average, seen[-1])
    model.compile(FusedAdam(0.1), "mse")
    with pytest.raises(ValueError, match="use_ema=True"):
        averaged_weights(model)
