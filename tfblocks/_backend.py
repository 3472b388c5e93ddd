"""The Keras backend boundary: what runs under any Keras 3 backend, what needs TensorFlow.

Runs under any backend (TensorFlow, JAX), through `keras.ops`:

- `tfblocks.layers`: every layer, masks, dtype policies, `.keras` files (`HashDropout`
  draws the same masks for the same seed);
- `tfblocks.models`: the model builders and the model's forward pass (a model saved under
  one backend loads under the other with the same logits);
- `tfblocks.training`'s loss, metrics, schedules and `FusedAdam` (Keras' own Adam update
  and gradient accumulation outside TensorFlow), so `compile_transformer` + `model.fit`.

Needs Keras on TensorFlow (`require_tensorflow` refuses, naming the object, as it is made):

- `tf.distribute`: the strategies (`tfblocks.training.distribute`, `multi_worker`) and
  the per-replica XLA step (`xla_step`); outside TensorFlow the recipe trains without;
- `tfblocks.decoding`: the `Decoder`'s `tf.function` / XLA loops;
- `tfblocks.serving`: `Translator`, `Generator`, SavedModel signatures, CTranslate2 export;
- `tfblocks.translation`: the training job, and the `tfblocks-*` commands (`use_tensorflow`
  selects TensorFlow while Keras is not loaded yet).

TensorFlow itself is installed in every case: `tfblocks.text` builds `tf.data` pipelines,
which feed `model.fit` under either backend.

Ground floor: imports nothing of tfblocks, and neither Keras nor TensorFlow until a
function is called (loading Keras would fix its backend).
"""

import os
import sys

TENSORFLOW = "tensorflow"


class BackendError(RuntimeError):
    """TensorFlow-only code called under another Keras backend (`require_tensorflow`)."""


def name():
    """Keras' backend, e.g. `"tensorflow"` or `"jax"` (loads Keras).

    Example:
    >>> name()  # the test suite's backend
    'tensorflow'
    """
    import keras

    return keras.backend.backend()


def is_tensorflow(backend=None):
    """True if `backend` (Keras' own when None) is TensorFlow.

    Example:
    >>> is_tensorflow(), is_tensorflow("jax")
    (True, False)
    """
    return (name() if backend is None else backend) == TENSORFLOW


def require_tensorflow(what, backend=None):
    """Raises `BackendError` unless `backend` (Keras' own when None) is TensorFlow: `what`
    (decoding, serving, export, the training job) is TensorFlow code, while the layers
    and models also run under JAX (docs/layers.md, "Backends").

    Example:
    >>> require_tensorflow("Decoder")  # the test suite's backend
    >>> require_tensorflow("Decoder", "jax")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfblocks._backend.BackendError: Decoder runs on TensorFlow only, but ... is 'jax': ...
    """
    backend = name() if backend is None else backend
    if backend != TENSORFLOW:
        raise BackendError(
            f"{what} runs on TensorFlow only, but Keras' backend is {backend!r}: start Python "
            "with KERAS_BACKEND=tensorflow (a model trained under JAX loads there from its "
            ".keras file)."
        )


def use_tensorflow(what):
    """Makes Keras run on TensorFlow for a TensorFlow program (`what`, a command): while
    Keras is not loaded, sets `KERAS_BACKEND=tensorflow` (a shell's `KERAS_BACKEND=jax`,
    set for the user's own JAX work, does not reach it); once it is, `require_tensorflow`.

    Example:
    >>> use_tensorflow("tfblocks-train")  # Keras is loaded, on TensorFlow
    """
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = TENSORFLOW
    else:
        require_tensorflow(what)
