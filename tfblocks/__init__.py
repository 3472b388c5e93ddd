"""tfblocks: Keras 3 / TensorFlow Transformer layers with tensor2tensor semantics."""

# First, before anything loads TensorFlow or runs an operation: TensorFlow's pooling
# (BFC) CPU allocator where it would use malloc and the user did not choose
# (tfblocks/_allocator.py), and programs that ask for it (the examples, the tfblocks-*
# commands) get TensorFlow without its C++ log lines (tfblocks/_quiet.py).
from tfblocks import _allocator  # noqa: F401  # isort: skip
from tfblocks import _quiet  # noqa: F401  # isort: skip
from tfblocks import decoding, layers, models, serving, text, training
from tfblocks._version import __version__
from tfblocks.decoding import BeamSearch, Decoder, Ensemble, Greedy, Sampling
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.layers import (
    DenseReluDense,
    HashDropout,
    LocalMultiHeadAttention,
    MultiHeadAttention,
    RelativeMultiHeadAttention,
    SinusoidalEmbedding,
    TransformerBlock,
    timing_signal,
)
from tfblocks.models import (
    HParams,
    Transformer,
    build_language_model,
    build_transformer,
    hparams,
    load_preset,
    save_preset,
)
from tfblocks.serving import CTranslate2Translator, Generator, Translator, export_ctranslate2
from tfblocks.training import (
    FusedAdam,
    MaskedAccuracy,
    NoamSchedule,
    Perplexity,
    RsqrtDecay,
    SmoothedCrossEntropy,
    compile_transformer,
    get_strategy,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "BeamSearch",
    "CTranslate2Translator",
    "Decoder",
    "DenseReluDense",
    "Ensemble",
    "FusedAdam",
    "Generator",
    "Greedy",
    "HParams",
    "HashDropout",
    "LocalMultiHeadAttention",
    "MaskedAccuracy",
    "MultiHeadAttention",
    "NoamSchedule",
    "Perplexity",
    "RelativeMultiHeadAttention",
    "RsqrtDecay",
    "Sampling",
    "SinusoidalEmbedding",
    "SmoothedCrossEntropy",
    "Transformer",
    "TransformerBlock",
    "Translator",
    "__version__",
    "build_language_model",
    "build_transformer",
    "compile_transformer",
    "decoding",
    "export_ctranslate2",
    "get_strategy",
    "hparams",
    "layers",
    "load_preset",
    "models",
    "save_preset",
    "serving",
    "text",
    "timing_signal",
    "training",
]
