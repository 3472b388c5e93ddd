"""The tfblocks Keras layers."""

from tfblocks.layers._utils import segment_mask
from tfblocks.layers.attention import MultiHeadAttention
from tfblocks.layers.block import TransformerBlock
from tfblocks.layers.dropout import HashDropout
from tfblocks.layers.embedding import SinusoidalEmbedding, timing_signal
from tfblocks.layers.feed_forward import DenseReluDense
from tfblocks.layers.local_attention import LocalMultiHeadAttention
from tfblocks.layers.relative_attention import RelativeMultiHeadAttention

__all__ = [
    "DenseReluDense",
    "HashDropout",
    "LocalMultiHeadAttention",
    "MultiHeadAttention",
    "RelativeMultiHeadAttention",
    "SinusoidalEmbedding",
    "TransformerBlock",
    "segment_mask",
    "timing_signal",
]
