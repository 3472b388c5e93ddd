"""A model's weights as `{variable path: NumPy array}`: what a run reads, stores and serves.

The weights of a model in training are not always its variables as they are: with a
moving average (`compile_transformer(..., ema_decay=d)`) they are the optimizer's
averages (`averaged_weights`), with LoRA adapters the kernels with the adapters merged,
in the layout of the model built without them (`merged_weights`); `run_weights` gives
both at once. Such a mapping is assigned to a model (`assign_weights`), stored as an
.npz and loaded back (`load_weights`), averaged over checkpoints (`average_weights`, t2t
`avg_checkpoints`), and served by a float32 model without adapters (`float32_twin`).
"""

import keras
import numpy as np
import tensorflow as tf

from tfblocks.models.builders import build_transformer


def run_weights(model, ema=False):
    """`{path: array}` of what `model` has learned, in the layout of the plain model: the
    trained weights (with `ema`, their moving averages), LoRA adapters merged.

    Example:

    >>> import tfblocks
    >>> model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=50))
    >>> sorted(run_weights(model)) == sorted(v.path for v in model.weights)
    True
    """
    return merged_weights(model, averaged_weights(model) if ema else None)


def averaged_weights(model):
    """`{variable.path: NumPy value}` of `model.weights`, with the moving average of each
    variable that the model's optimizer averages (`use_ema=True`) in its place.

    Args:
        model: a compiled model whose optimizer (or, under `mixed_float16`, the inner
            optimizer of its `LossScaleOptimizer`) has `use_ema=True` and is built.

    Returns:
        A dict from each variable's path to its averaged value; variables the optimizer
        does not train (non-trainable ones, frozen ones) keep their current values.

    Raises:
        ValueError: the optimizer keeps no moving averages.

    Example:

    >>> from tfblocks.training import FusedAdam
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(FusedAdam(0.1, use_ema=True, ema_momentum=0.5), "mse")
    >>> _ = model.fit(np.ones((4, 2)), np.zeros((4, 1)), epochs=2, batch_size=4, verbose=0)
    >>> kernel = model.layers[0].kernel  # trained 2 steps: the average lags behind
    >>> bool((averaged_weights(model)[kernel.path] != np.asarray(kernel)).all())
    True
    """
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    if not getattr(optimizer, "use_ema", False) or not optimizer.built:
        raise ValueError(
            "`averaged_weights` needs a built optimizer with use_ema=True, got "
            f"optimizer={optimizer!r}."
        )
    averages = {}
    for variable, moving in zip(
        optimizer._trainable_variables, optimizer._model_variables_moving_average, strict=True
    ):
        if moving is not None:
            averages[optimizer._var_key(variable)] = moving
    return {v.path: np.asarray(averages.get(optimizer._var_key(v), v)) for v in model.weights}


def merged_weights(model, values=None):
    """`{path: NumPy value}` of `model`'s weights without adapters: each adapted kernel
    merged, `W + (alpha / rank) · A · B`, and the adapters left out.

    Args:
        model: a model, with or without adapters (then its weights as they are).
        values: optional `{path: value}` of `model.weights` to merge instead of their
            current values (e.g. `averaged_weights(model)`).

    Returns:
        A dict in the variable layout of the same model built without adapters.

    Example:

    >>> import tfblocks
    >>> from tfblocks.training.lora import enable_lora
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=50)
    >>> model = tfblocks.build_transformer(hp)
    >>> plain = sorted(merged_weights(model))
    >>> _ = enable_lora(model, rank=2)
    >>> sorted(merged_weights(model)) == plain
    True
    """
    if values is None:
        values = {v.path: np.asarray(v) for v in model.weights}
    merged = dict(values)
    for layer in model._flatten_layers(include_self=False):
        if not isinstance(layer, keras.layers.Dense) or not layer.lora_enabled:
            continue
        a = merged.pop(layer.lora_kernel_a.path)  # [in, r]
        b = merged.pop(layer.lora_kernel_b.path)  # [r, out]
        kernel = layer._kernel.path
        scale = layer.lora_alpha / layer.lora_rank
        merged[kernel] = (merged[kernel] + scale * (a @ b)).astype(merged[kernel].dtype)
    return merged


def assign_weights(model, values, source="`values`"):
    """Sets `model`'s weights from `values`, a mapping of variable paths to arrays (more
    keys are ignored); a ValueError naming `source` when one is missing.

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> assign_weights(model, {v.path: np.zeros(v.shape) for v in model.weights})
    >>> float(np.abs(model.layers[0].kernel).max())
    0.0
    """
    missing = [v.path for v in model.weights if v.path not in values]
    if missing:
        raise ValueError(f"{source} has no weights for {missing[:3]} (another architecture?).")
    for variable in model.weights:
        variable.assign(values[variable.path])


def load_weights(model, path):
    """Sets `model`'s weights from an .npz of `{path: array}` (`RunFolder.save_weights`,
    a run folder's `best.npz`, `last.npz` and checkpoints)."""
    with np.load(path) as stored:
        assign_weights(model, stored, repr(path))


def average_weights(model, paths):
    """Sets `model`'s weights to the mean of the checkpoints `paths` (t2t `avg_checkpoints`);
    a variable that is not a float (a seed state) takes the last checkpoint's value.

    Example:

    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> folder = tempfile.mkdtemp()
    >>> for i in (1, 3):
    ...     np.savez(os.path.join(folder, f"{i}.npz"),
    ...              **{v.path: np.full(v.shape, i, "float32") for v in model.weights})
    >>> average_weights(model, [os.path.join(folder, f"{i}.npz") for i in (1, 3)])
    >>> np.asarray(model.layers[0].bias).tolist()
    [2.0]
    """
    if not paths:
        raise ValueError("`paths` must name at least one checkpoint, got none.")
    stores = [np.load(p) for p in paths]
    try:
        for variable in model.weights:
            last = stores[-1][variable.path]
            if not np.issubdtype(last.dtype, np.floating):  # e.g. a seed state: the last one
                variable.assign(last)
                continue
            values = [s[variable.path].astype(np.float64) for s in stores]
            variable.assign(np.mean(values, axis=0).astype(last.dtype))
    finally:
        for s in stores:
            s.close()


def float32_twin(hp, model):
    """A float32 `Transformer` of `hp`'s architecture without adapters, built, holding
    `model`'s weights (any LoRA adapters merged; variable paths equal, so run-folder
    weights load into either): what translates for a model that trains under a mixed
    dtype policy, with a moving average or with adapters.

    Example:

    >>> import tfblocks
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=50)
    >>> model = tfblocks.build_transformer(hp, dtype="mixed_bfloat16")
    >>> twin = float32_twin(hp, model)
    >>> twin.dtype_policy.name, twin.count_params() == model.count_params()
    ('float32', True)
    """
    twin = build_transformer(hp, name=model.name, dtype="float32")
    ids = tf.ones([1, 2], tf.int32)
    twin({"inputs": ids, "targets": ids})
    assign_weights(twin, merged_weights(model))
    return twin
