"""tfblocks: Keras 3 / TensorFlow Transformer layers with tensor2tensor semantics."""

from tfblocks.layers import (
    DenseReluDense,
    MultiHeadAttention,
    SinusoidalEmbedding,
    TransformerBlock,
    timing_signal,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "DenseReluDense",
    "MultiHeadAttention",
    "SinusoidalEmbedding",
    "TransformerBlock",
    "__version__",
    "timing_signal",
]
