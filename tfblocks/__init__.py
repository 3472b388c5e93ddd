"""tfblocks: Keras 3 / TensorFlow Transformer layers with tensor2tensor semantics."""

# First, before anything loads TensorFlow or runs an operation: TensorFlow's pooling
# (BFC) CPU allocator where it would use malloc and the user did not choose
# (tfblocks/_allocator.py), and TensorFlow without its log lines unless the user chose
# a level (tfblocks/_quiet.py). Then the public names, imported now, or on first use
# while a `tfblocks-*` command parses its arguments (tfblocks/_lazy.py).
from tfblocks import _allocator  # noqa: F401  # isort: skip
from tfblocks import _quiet  # noqa: F401  # isort: skip
from tfblocks import _lazy
from tfblocks._version import __version__  # noqa: F401  (in __all__: `also` below)

# The public API, listed once: each name under the module that defines it.
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.decoding": [
            "decoding",
            "BeamSearch",
            "ConstrainedBeamSearch",
            "Decoder",
            "Ensemble",
            "Greedy",
            "Sampling",
        ],
        "tfblocks.layers": [
            "layers",
            "DenseReluDense",
            "HashDropout",
            "LocalMultiHeadAttention",
            "MultiHeadAttention",
            "RelativeMultiHeadAttention",
            "SinusoidalEmbedding",
            "TransformerBlock",
            "timing_signal",
        ],
        "tfblocks.models": [
            "models",
            "HParams",
            "Transformer",
            "build_language_model",
            "build_transformer",
            "hparams",
            "import_marian",
            "load_preset",
            "save_preset",
        ],
        "tfblocks.serving": [
            "serving",
            "CTranslate2Translator",
            "Generator",
            "Hypothesis",
            "Translator",
            "export_ctranslate2",
        ],
        "tfblocks.text": ["text"],
        "tfblocks.training": [
            "training",
            "FusedAdam",
            "MaskedAccuracy",
            "NoamSchedule",
            "Perplexity",
            "RsqrtDecay",
            "SmoothedCrossEntropy",
            "compile_transformer",
            "get_strategy",
        ],
        "tfblocks.ids": ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"],
    },
    also=["__version__"],
)
