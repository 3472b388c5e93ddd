"""Dropout whose random bits come from a counter hash instead of the Philox generator.

`keras.layers.Dropout` draws its mask with `tf.random.stateless_uniform`, which XLA lowers
to a Philox bit generator. On CPUs that generator costs about 13 ns per element, more
than the matmul the dropout follows: in `benchmarks/profile_step.py` it took a quarter of
a training step. Dropout needs independent-looking bits, not a cryptographic stream, so
`HashDropout` computes each element's bits as a pure function of (seed, flat position)
with two rounds of a 32-bit integer finalizer (xor-shift / multiply, the MurmurHash3
`fmix32` constants). These are element-wise integer ops that XLA fuses into the multiply:
15.7× cheaper than Keras' Dropout under XLA on the benchmark machine. Without XLA each op
runs separately and the hash is slower (0.70×); see `benchmarks/dropout.py`.

The seed changes on every call (a Keras `SeedGenerator`, exactly as Keras' own Dropout),
so every training step sees a fresh mask; a given seed always gives the same mask, with
or without XLA. Keep probability is quantized to 2⁻²⁴.
"""

import keras
import numpy as np
from keras import ops

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


def hash_bits(shape, seed):
    """24 pseudo-random bits per element, as int32 in [0, 2²⁴), from a `[2]` int seed.

    Args:
        shape: the output shape (may contain dynamic sizes).
        seed: integer tensor of shape `[2]`; only the low 32 bits of each word are used.

    Example:
    >>> a = hash_bits((2, 3), keras.ops.convert_to_tensor([1, 2]))
    >>> b = hash_bits((2, 3), keras.ops.convert_to_tensor([1, 2]))
    >>> bool(keras.ops.all(a == b)), a.dtype.name, bool(keras.ops.all(a < 2**24))
    (True, 'int32', True)
    """
    words = ops.cast(ops.bitwise_and(ops.cast(seed, "int64"), 0xFFFFFFFF), "uint32")
    key_a = _fmix32(ops.add(words[0], _u32(_SEED_OFFSET)))
    key_b = _fmix32(ops.bitwise_xor(words[1], key_a))
    size = ops.prod(ops.convert_to_tensor(shape, dtype="int32"))
    index = ops.cast(ops.arange(size, dtype="int32"), "uint32")  # [prod(shape)]
    h = _fmix32(ops.add(_fmix32(ops.bitwise_xor(index, key_a)), key_b))
    h = ops.cast(ops.right_shift(h, _u32(8)), "int32")  # top 24 bits, exact in int32
    return ops.reshape(h, shape)  # [*shape]


@keras.saving.register_keras_serializable(package="tfblocks")
class HashDropout(keras.layers.Layer):
    """Inverted dropout (`x / (1 - rate)` where kept, 0 elsewhere) with counter-hash bits.

    A drop-in for `keras.layers.Dropout(rate, seed=seed)` without `noise_shape`; see the
    module docstring for why. Every tfblocks layer uses it for its dropout.

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
        bits = hash_bits(ops.shape(inputs), self.seed_generator.next())
        keep = ops.greater_equal(bits, round(self.rate * (1 << 24)))
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, inputs * scale, ops.zeros_like(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
