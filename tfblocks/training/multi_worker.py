"""A guarded work-around for keras-team/keras#20585 (Keras 3 `fit` under multi-worker).

With `tf.distribute.MultiWorkerMirroredStrategy`, Keras 3's TensorFlow trainer fails
in two places before and after the first step:

1. `TensorFlowTrainer._maybe_symbolic_build` builds the model from the first batch by
   calling `strategy.reduce("MEAN", batch, axis=None)` on the whole (nested)
   `PerReplica` batch; the collective strategy cannot reduce a dict of int ids
   ("Attempt to convert a value ({'inputs': PerReplica ...}) ... to a Tensor"), and
   `MirroredStrategy` cannot add replicas' batches of different shapes (which
   `distribute_datasets_from_function` gives: each replica pads its own batch). The
   batch is only needed for its shapes and dtypes, so the fix builds from the first
   local replica's values instead, under any strategy.
2. `reduce_per_replica(..., reduction="mean")` reduces every step output with
   `strategy.reduce("MEAN", v, axis=0)`, which fails for the scalar metric values a
   train step returns. The fix reduces rank-0 values with `axis=None` (the mean over
   replicas) and leaves everything else to Keras.

`patch_keras()` installs each fix only while the Keras source still contains the
faulty call, so it switches itself off once Keras is fixed. It is applied by
`get_strategy("multi_worker")` and `get_strategy("mirrored")`, and by the translation
job under a strategy of several replicas; set `TFBLOCKS_NO_KERAS_PATCH=1` to disable it.
"""

import functools
import inspect
import os

import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tf_trainer

_BUGGY_BUILD = 'self.distribute_strategy.reduce(\n                        "MEAN",'
_BUGGY_REDUCE = 'strategy.reduce("MEAN", v, axis=0)'
_applied = set()


def _is_multi_worker(strategy):
    return (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and strategy.extended._in_multi_worker_mode()
    )


def _first_local(value):
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    return value


def _patch_symbolic_build():
    original = tf_trainer.TensorFlowTrainer._maybe_symbolic_build

    @functools.wraps(original)
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is None or self._distribute_strategy is None:
            return original(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:  # Same iteration as Keras: take the first batch.
            data_batch = tf.nest.map_structure(_first_local, next(it))
            break
        return original(self, iterator=None, data_batch=data_batch)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build


def _patch_reduce_per_replica():
    original = tf_trainer.reduce_per_replica

    @functools.wraps(original)
    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not _is_multi_worker(strategy):
            return original(values, strategy, reduction)

        def reduce(value):
            if _first_local(value).shape.rank == 0:
                return strategy.reduce("MEAN", value, axis=None)
            return original(value, strategy, reduction)

        return tf.nest.map_structure(reduce, values)

    tf_trainer.reduce_per_replica = reduce_per_replica


def patch_keras():
    """Installs the keras#20585 fixes that the installed Keras still needs.

    Idempotent. Does nothing when `TFBLOCKS_NO_KERAS_PATCH=1`.

    Returns:
        The sorted names of the fixes in place (`"reduce_per_replica"`,
        `"symbolic_build"`); empty when Keras needs none.

    Example:

    >>> set(patch_keras()) <= {"reduce_per_replica", "symbolic_build"}
    True
    """
    if os.environ.get("TFBLOCKS_NO_KERAS_PATCH") == "1":
        return tuple(sorted(_applied))
    if "symbolic_build" not in _applied and _BUGGY_BUILD in inspect.getsource(
        tf_trainer.TensorFlowTrainer._maybe_symbolic_build
    ):
        _patch_symbolic_build()
        _applied.add("symbolic_build")
    if "reduce_per_replica" not in _applied and _BUGGY_REDUCE in inspect.getsource(
        tf_trainer.reduce_per_replica
    ):
        _patch_reduce_per_replica()
        _applied.add("reduce_per_replica")
    return tuple(sorted(_applied))
