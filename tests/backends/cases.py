"""Layer cases that run under any Keras backend: the same layers, inputs and calls.

tests/backends/test_jax.py runs them under TensorFlow, and jax_worker.py (a process with
KERAS_BACKEND=jax) runs them with the TensorFlow weights; the outputs must agree.
Imports only keras, numpy and tfblocks' layers, so the module loads under either backend.
"""

import keras
import numpy as np

from tfblocks.layers import (
    DenseReluDense,
    LocalMultiHeadAttention,
    MultiHeadAttention,
    RelativeMultiHeadAttention,
    SinusoidalEmbedding,
    TransformerBlock,
)

WIDTH = 8
VOCAB = 20


def inputs():
    """Fixed inputs: `x` `[2, 5, 8]`, `context` `[2, 4, 8]`, their masks and ids."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, VOCAB, size=(2, 5)).astype("int32")
    ids[1, 3:] = 0  # the second row is padded
    return {
        "x": rng.standard_normal((2, 5, WIDTH)).astype("float32"),
        "context": rng.standard_normal((2, 4, WIDTH)).astype("float32"),
        "mask": ids != 0,
        "context_mask": np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool),
        "ids": ids,
    }


def _block(**options):
    return TransformerBlock(num_heads=2, filter_size=16, **options)


# name → (make the layer, call it on `inputs()`)
CASES = {
    "attention": (
        lambda: MultiHeadAttention(num_heads=2, key_dim=4),
        lambda layer, d: layer(d["x"], d["context"], value_mask=d["context_mask"]),
    ),
    "attention_causal": (
        lambda: MultiHeadAttention(num_heads=2, key_dim=4),
        lambda layer, d: layer(d["x"], d["x"], query_mask=d["mask"], use_causal_mask=True),
    ),
    "local_attention": (
        lambda: LocalMultiHeadAttention(num_heads=2, key_dim=4, window=2),
        lambda layer, d: layer(d["x"], d["x"], query_mask=d["mask"], value_mask=d["mask"]),
    ),
    "relative_attention": (
        lambda: RelativeMultiHeadAttention(num_heads=2, key_dim=4, max_relative_position=3),
        lambda layer, d: layer(d["x"], d["x"], query_mask=d["mask"], value_mask=d["mask"]),
    ),
    "dense_relu_dense": (
        lambda: DenseReluDense(filter_size=16),
        lambda layer, d: layer(d["x"]),
    ),
    "embedding": (
        lambda: SinusoidalEmbedding(vocab_size=VOCAB, hidden_size=WIDTH),
        lambda layer, d: layer(d["ids"]),
    ),
    "block_pre_ln": (
        lambda: _block(),
        lambda layer, d: layer(d["x"], padding_mask=d["mask"]),
    ),
    "block_post_ln_causal": (
        lambda: _block(norm_first=False, causal=True),
        lambda layer, d: layer(d["x"], padding_mask=d["mask"]),
    ),
    "block_decoder": (
        lambda: _block(causal=True, cross_attention=True),
        lambda layer, d: layer(
            d["x"], d["context"], padding_mask=d["mask"], context_padding_mask=d["context_mask"]
        ),
    ),
}


def build(name):
    """The case's layer, built by one call on `inputs()` (weights still random)."""
    make, call = CASES[name]
    layer = make()
    call(layer, inputs())
    return layer


def output(name, layer):
    """The case's output as a NumPy array."""
    return keras.ops.convert_to_numpy(CASES[name][1](layer, inputs()))
