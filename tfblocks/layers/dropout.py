"""Dropout whose random bits come from a counter hash of (seed, flat position).

`keras.layers.Dropout` draws its mask from a Philox generator, which is costly on CPUs,
more so under XLA. Dropout needs independent-looking bits, not a cryptographic stream:
`HashDropout` computes each element's bits with two rounds of a 32-bit integer finalizer
(MurmurHash3's `fmix32`), element-wise ops that XLA fuses into the multiply.

Outside an XLA-compiled function, where each of those ops would be its own kernel, a
tensor of at least `COMPILE_MIN_ELEMENTS` elements goes through one small XLA-compiled
function instead (smaller ones take the ops one by one: a compilation would not pay
back). Both paths give the same mask for the same seed; the gradient is the same
dropout applied to the incoming gradient, so no mask is stored for the backward pass.

Positions are int64 (split into two 32-bit words for the hash), so tensors of 2³¹
elements and more get distinct positions. The seed changes on every call (a Keras
`SeedGenerator`, as in Keras' Dropout). The keep probability is quantized to 2⁻²⁴.
Speed figures: docs/performance.md, "Measured design choices".

Under another Keras backend (JAX) the same ops run through `keras.ops`, where the
backend's own compiler fuses them, and the gradient comes from the backend's autodiff
(`where` passes it through the kept elements only, scaled: the same dropout). Without
JAX's 64-bit mode the positions are int32 there, so one tensor holds fewer than 2³¹
elements; the masks equal TensorFlow's for the same seed.
"""

import math

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from tfblocks import _backend
from tfblocks._xla import compiled_if_large, flat_size, in_xla_context
from tfblocks.layers import _utils

# MurmurHash3's 32-bit finalizer constants (odd multipliers with good avalanche).
_MUL_1 = 0x85EBCA6B
_MUL_2 = 0xC2B2AE35
# Added to the first seed word: fmix32(0) == 0, so a zero seed would otherwise give key 0.
_SEED_OFFSET = 0x9E3779B9


def _u32(value):
    return ops.convert_to_tensor(np.uint32(value), dtype="uint32")


def _fmix32(h):
    """Avalanche a uint32 tensor: every input bit flips each output bit with p ≈ 1/2."""
    h = ops.bitwise_xor(h, ops.right_shift(h, _u32(16)))
    h = ops.multiply(h, _u32(_MUL_1))
    h = ops.bitwise_xor(h, ops.right_shift(h, _u32(13)))
    h = ops.multiply(h, _u32(_MUL_2))
    return ops.bitwise_xor(h, ops.right_shift(h, _u32(16)))


def position_bits(lo, hi, seed):
    """24 bits for each position `hi · 2³² + lo`, as int32 in [0, 2²⁴).

    Args:
        lo: uint32 tensor, the low word of each flat position.
        hi: uint32 tensor (broadcast against `lo`) with the high word, or None for 0.
        seed: integer tensor of shape `[2]`; only the low 32 bits of each word are used.

    Example:
    >>> seed = keras.ops.convert_to_tensor([1, 2])
    >>> lo = keras.ops.convert_to_tensor(np.array([5, 5], "uint32"))
    >>> hi = keras.ops.convert_to_tensor(np.array([0, 1], "uint32"))
    >>> a, b = keras.ops.convert_to_numpy(position_bits(lo, hi, seed))
    >>> int(a) == int(position_bits(lo[:1], None, seed)[0]), int(a) != int(b)
    (True, True)
    """
    if _index_dtype() == "int64":
        words = ops.cast(ops.bitwise_and(ops.cast(seed, "int64"), 0xFFFFFFFF), "uint32")
    else:  # 32-bit integers: the cast keeps the low 32 bits, as the mask does above
        words = ops.cast(seed, "uint32")
    key_a = _fmix32(ops.add(words[0], _u32(_SEED_OFFSET)))
    key_b = _fmix32(ops.bitwise_xor(words[1], key_a))
    if hi is not None:
        # Multiplying by an odd constant is a bijection of uint32, and 0 ↦ 0: every high
        # word gets its own key, and positions below 2³² keep the int32 path's bits.
        key_b = ops.bitwise_xor(key_b, ops.multiply(hi, _u32(_MUL_1)))
    h = _fmix32(ops.add(_fmix32(ops.bitwise_xor(lo, key_a)), key_b))
    return ops.cast(ops.right_shift(h, _u32(8)), "int32")  # top 24 bits, exact in int32


def _index_dtype():
    """int64 where the backend has it (TensorFlow; JAX with x64), else int32."""
    if _backend.name() == "jax":
        import jax

        return "int64" if jax.config.jax_enable_x64 else "int32"
    return "int64"


def hash_bits(shape, seed):
    """24 pseudo-random bits per element, as int32 in [0, 2²⁴), from a `[2]` int seed.

    Element `i` (row-major flat position) gets `position_bits` of `i`.

    Args:
        shape: the output shape (may contain dynamic sizes).
        seed: integer tensor of shape `[2]`; only the low 32 bits of each word are used.

    Example:
    >>> a = hash_bits((2, 3), keras.ops.convert_to_tensor([1, 2]))
    >>> b = hash_bits((2, 3), keras.ops.convert_to_tensor([1, 2]))
    >>> bool(keras.ops.all(a == b)), a.dtype.name, bool(keras.ops.all(a < 2**24))
    (True, 'int32', True)
    """
    if not _backend.is_tensorflow():
        return ops.reshape(_flat_bits(math.prod(shape), seed), shape)  # [*shape]
    size = ops.cast(flat_size(shape), "int64")
    return ops.reshape(_traced_flat_bits(size, ops.cast(seed, "int64")), shape)  # [*shape]


def _flat_bits(size, seed):
    """`position_bits` of the flat positions 0 … size − 1 (`size` an int64 count)."""
    if _index_dtype() != "int64":  # JAX without x64: positions below 2³¹, high word 0
        if size >= 1 << 31:
            raise ValueError(
                f"HashDropout: a tensor of {size} elements needs 64-bit positions; "
                "enable them with jax.config.update('jax_enable_x64', True)"
            )
        return position_bits(ops.cast(ops.arange(size, dtype="int32"), "uint32"), None, seed)
    index = ops.arange(size, dtype="int64")  # [size]
    lo = ops.cast(ops.bitwise_and(index, 0xFFFFFFFF), "uint32")
    hi = ops.cast(ops.right_shift(index, 32), "uint32")
    return position_bits(lo, hi, seed)


# The hash's forty-odd ops are traced once, here, not at every call site (twice per
# dropout layer in a step outside XLA: forward and gradient). The call is inlined where it
# runs (Grappler outside XLA; XLA fuses the hash into its consumer).
_traced_flat_bits = tf.function(
    _flat_bits,
    input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([2], tf.int64)],
    autograph=False,
)


def apply_hash_dropout(inputs, seed, rate):
    """Inverted dropout of `inputs` with the `hash_bits` mask of `seed`: the layer's math.

    Example:
    >>> y = apply_hash_dropout(keras.ops.ones((2, 4)), keras.ops.convert_to_tensor([1, 2]), 0.5)
    >>> sorted({float(v) for v in keras.ops.unique(y)})
    [0.0, 2.0]
    """
    if not _backend.is_tensorflow() or inputs.shape.rank is not None:
        shape = ops.shape(inputs)
    else:
        shape = tf.shape(inputs)
    bits = hash_bits(shape, seed)
    keep = ops.greater_equal(bits, round(rate * (1 << 24)))
    scale = ops.cast(1.0 / (1.0 - rate), inputs.dtype)
    return ops.where(keep, inputs * scale, ops.zeros_like(inputs))


# One XLA cluster for the whole dropout when the caller is not compiled; traced with
# relaxed shapes, compiled by XLA once per concrete shape and dtype.
_compiled_hash_dropout = tf.function(
    apply_hash_dropout, jit_compile=True, reduce_retracing=True, autograph=False
)

# Smaller tensors take the hash op by op outside XLA: a compilation would not pay back.
COMPILE_MIN_ELEMENTS = 1 << 17


def _dropout_outside_xla(inputs, seed, rate):
    """`apply_hash_dropout` as one compiled call (large tensors) or op by op (small
    ones); its gradient is the same on the incoming gradient (the same mask and scale),
    so no mask is kept for backprop."""

    def call(x):
        shape = tf.shape(x) if x.shape.rank is None else ops.shape(x)
        y = compiled_if_large(
            shape,
            COMPILE_MIN_ELEMENTS,
            lambda: _compiled_hash_dropout(x, seed, rate),
            lambda: apply_hash_dropout(x, seed, rate),
        )
        return tf.ensure_shape(y, x.shape)

    @tf.custom_gradient
    def dropout(x):
        return call(x), call

    return dropout(inputs)


@keras.saving.register_keras_serializable(package="tfblocks")
class HashDropout(keras.layers.Layer):
    """Inverted dropout (`x / (1 - rate)` where kept, 0 elsewhere) with counter-hash bits.

    A drop-in for `keras.layers.Dropout(rate, seed=seed)` without `noise_shape`; see the
    module docstring for why. The mask comes from `hash_bits`, with or without XLA (outside
    an XLA-compiled function the layer calls a small compiled one, or the same ops one by
    one for tensors below `COMPILE_MIN_ELEMENTS` elements). Every tfblocks layer uses it
    for its dropout.

    Args:
        rate: fraction of the elements to zero, in [0, 1).
        seed: optional Python int; with `keras.utils.set_random_seed` or a seed, the
            sequence of masks is reproducible.

    Call arguments:
        inputs: any floating tensor.
        training: applies dropout only when true.

    Example:
    >>> layer = HashDropout(0.5, seed=1)
    >>> y = layer(keras.ops.ones((4, 1000)), training=True)
    >>> sorted({float(v) for v in keras.ops.unique(y)})
    [0.0, 2.0]
    >>> 0.45 < float(keras.ops.mean(y == 0)) < 0.55
    True
    >>> bool(keras.ops.all(layer(keras.ops.ones((2, 3))) == 1))  # inference: identity
    True
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _utils.check_rate("rate", rate)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an int or None, got {seed!r}")
        self.seed = seed
        self.supports_masking = True
        if self.rate > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        seed = self.seed_generator.next()
        if not _backend.is_tensorflow() or in_xla_context():
            return apply_hash_dropout(inputs, seed, self.rate)
        return _dropout_outside_xla(inputs, seed, self.rate)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
