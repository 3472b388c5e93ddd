"""Choosing a `tf.distribute` strategy.

Build and compile the model inside `strategy.scope()`; `model.fit` does the rest (TPUs need
batches of one static shape: `tfblocks.text.make_dataset(..., shapes="max_length")` or
`shapes="packed"`):

    strategy = get_strategy("auto")
    with strategy.scope():
        model = compile_transformer(build_transformer(hp), hp)
    train = make_dataset(pairs, tokenizer, tokenizer, shapes="max_length", repeat=True)
    model.fit(train, epochs=..., steps_per_epoch=...)

Losses and metrics in `tfblocks.training` are exact over the *global* batch (token
counts are all-reduced / summed across replicas), so a mirrored run matches a
single-device run on the same global batch up to floating-point summation order.
`compile_transformer` keeps XLA on under `MirroredStrategy` and
`MultiWorkerMirroredStrategy` by compiling each replica's gradient computation
(`tfblocks.training.xla_step`).
"""

import json
import os

import tensorflow as tf

KINDS = ("auto", "default", "mirrored", "tpu", "multi_worker")


def _tpu_name():
    """The TPU to connect to: `TPU_NAME`, `"local"` on a TPU VM, else None."""
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if tf.config.list_physical_devices("TPU"):
        return "local"
    if os.environ.get("COLAB_TPU_ADDR"):
        return ""  # the resolver reads COLAB_TPU_ADDR itself
    return None


def _tpu_strategy():
    name = _tpu_name()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name or "")
    if name != "local":
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def get_strategy(kind="auto", devices=None):
    """Returns a `tf.distribute.Strategy`.

    Args:
        kind: `"default"` (no distribution), `"mirrored"` (all local GPUs, or
            `devices`), `"tpu"` (`TPUClusterResolver`: the Cloud TPU named by
            `TPU_NAME`, the local chips of a TPU VM, or Colab's), `"multi_worker"`
            (`MultiWorkerMirroredStrategy` configured by `TF_CONFIG`, with
            `tfblocks.training.multi_worker.patch_keras` applied, as for `"mirrored"`),
            or `"auto"`: a TPU if one is found, else `MirroredStrategy` over all GPUs
            when there are several, else the default strategy (one GPU or CPU only:
            nothing to mirror, and the whole step compiles with XLA).
        devices: device names for `"mirrored"` (e.g. two logical CPUs in tests).

    Returns:
        The strategy.

    Raises:
        ValueError: an unknown `kind`, or `devices` given for another kind.

    Example:

    >>> get_strategy("default").num_replicas_in_sync
    1
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got kind={kind!r}.")
    if devices is not None and kind != "mirrored":
        raise ValueError(f"`devices` applies to kind='mirrored' only, got kind={kind!r}.")
    if kind == "auto":
        if _tpu_name() is not None:
            kind = "tpu"
        elif len(tf.config.list_physical_devices("GPU")) > 1:
            kind = "mirrored"
        else:
            kind = "default"
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "tpu":
        return _tpu_strategy()
    from tfblocks.training import multi_worker  # only needed for these kinds

    multi_worker.patch_keras()
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
    return tf.distribute.MultiWorkerMirroredStrategy()


def cluster_task():
    """This process's task in the `TF_CONFIG` cluster: `(is_chief, name)`.

    The chief is the task of type `"chief"`, or worker 0 when the cluster has none (as
    `MultiWorkerMirroredStrategy` has it); it alone should write what the run keeps.
    Without `TF_CONFIG` the process is a cluster of its own: `(True, None)`.

    Returns:
        A bool and the task's `"type-index"` name (e.g. `"worker-1"`), or None.

    Raises:
        ValueError: a `TF_CONFIG` that is not JSON or names no task.

    Example:

    >>> os.environ["TF_CONFIG"] = json.dumps(
    ...     {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})
    >>> cluster_task()
    (False, 'worker-1')
    >>> del os.environ["TF_CONFIG"]
    """
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return True, None
    try:
        config = json.loads(text)
        kind, index = config["task"]["type"], int(config["task"].get("index", 0))
        chiefs = config.get("cluster", {}).get("chief")
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(
            f"`TF_CONFIG` must be JSON with a cluster and this process's task "
            f'({{"type": ..., "index": ...}}), got TF_CONFIG={text!r}.'
        ) from None
    chief = kind == "chief" or (kind == "worker" and index == 0 and not chiefs)
    return chief, f"{kind}-{index}"
