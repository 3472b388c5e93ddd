"""The tfblocks Keras layers."""

from tfblocks import _lazy

# The public API, listed once (tfblocks/_lazy.py).
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.layers._utils": ["segment_mask"],
        "tfblocks.layers.attention": ["MultiHeadAttention"],
        "tfblocks.layers.block": ["TransformerBlock"],
        "tfblocks.layers.dropout": ["HashDropout"],
        "tfblocks.layers.embedding": ["SinusoidalEmbedding", "timing_signal"],
        "tfblocks.layers.feed_forward": ["DenseReluDense"],
        "tfblocks.layers.local_attention": ["LocalMultiHeadAttention"],
        "tfblocks.layers.relative_attention": ["RelativeMultiHeadAttention"],
    },
)
