"""tfblocks: Keras 3 / TensorFlow Transformer layers with tensor2tensor semantics."""

from tfblocks import text
from tfblocks.decoding import Decoder
from tfblocks.export import Translator
from tfblocks.layers import (
    DenseReluDense,
    HashDropout,
    MultiHeadAttention,
    SinusoidalEmbedding,
    TransformerBlock,
    timing_signal,
)
from tfblocks.models import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    HParams,
    build_transformer,
    encoder_decoder,
    hparams,
)
from tfblocks.training import (
    MaskedAccuracy,
    NoamSchedule,
    Perplexity,
    RsqrtDecay,
    SmoothedCrossEntropy,
    compile_transformer,
    get_strategy,
    static_batches,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Decoder",
    "DenseReluDense",
    "HParams",
    "HashDropout",
    "MaskedAccuracy",
    "MultiHeadAttention",
    "NoamSchedule",
    "Perplexity",
    "RsqrtDecay",
    "SinusoidalEmbedding",
    "SmoothedCrossEntropy",
    "TransformerBlock",
    "Translator",
    "__version__",
    "build_transformer",
    "compile_transformer",
    "encoder_decoder",
    "get_strategy",
    "hparams",
    "static_batches",
    "text",
    "timing_signal",
]
