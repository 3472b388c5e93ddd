"""Helpers for code that runs both inside and outside XLA-compiled functions.

Ground floor: imports nothing of tfblocks.
"""

import math

import numpy as np
import tensorflow as tf
from keras import ops

try:  # TensorFlow's test for "inside an XLA-compiled function" (not public API).
    from tensorflow.python.ops import control_flow_util as _control_flow_util
except ImportError:  # pragma: no cover - another TensorFlow layout
    _control_flow_util = None


def in_xla_context():
    """True while tracing inside an XLA-compiled function (`jit_compile=True`, TPU).

    Example:
    >>> in_xla_context()
    False
    >>> bool(tf.function(lambda: tf.constant(in_xla_context()), jit_compile=True)())
    True
    """
    if _control_flow_util is None:
        return True  # cannot tell: callers take their XLA path, correct everywhere
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(_control_flow_util.GraphOrParentsInXlaContext(graph))


def flat_size(shape):
    """The element count of `shape`: a Python int when static, else an int64 scalar.

    `shape` is a tuple of ints and / or scalar tensors (`keras.ops.shape`) or a 1-D
    shape tensor (`tf.shape`).

    Never int32, so counts of 2³¹ and more neither overflow nor wrap.

    Example:
    >>> flat_size((64, 8, 2048, 2048))
    2147483648
    """
    if tf.is_tensor(shape):  # a shape tensor, e.g. tf.shape(x)
        return ops.prod(ops.cast(shape, "int64"))
    if all(isinstance(d, (int, np.integer)) for d in shape):
        return math.prod(int(d) for d in shape)
    dims = [ops.cast(d, "int64") for d in shape]  # some dims are int32 scalar tensors
    return math.prod(dims[1:], start=dims[0])


def compiled_if_large(shape, min_elements, compiled, plain):
    """`compiled()` if `shape` holds at least `min_elements` elements, else `plain()`.

    For a static shape the choice is made here; otherwise (a step traced with relaxed
    shapes) it is a `tf.cond` on the run-time size, so the compiled function is only
    compiled for the shapes that run through it. Both must return the same structure.

    Example:
    >>> compiled_if_large((4, 8), 16, lambda: "compiled", lambda: "plain")
    'compiled'
    """
    size = flat_size(shape)
    if isinstance(size, int):
        return compiled() if size >= min_elements else plain()
    return tf.cond(size >= min_elements, compiled, plain)
