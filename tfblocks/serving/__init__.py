"""Serving: raw strings in, translations out, as SavedModels (`Translator`, `Generator`),
through CTranslate2 (`export_ctranslate2`, `CTranslate2Translator`) or as one LiteRT
file for phones (`Translator.export_litert`, `tfblocks.serving.litert`); their n-best
lists hold `Hypothesis(text, score)`."""

from tfblocks import _lazy

# The public API, listed once (tfblocks/_lazy.py).
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.serving.ctranslate2": ["CTranslate2Translator"],
        "tfblocks.serving.ctranslate2_export": ["export_ctranslate2"],
        "tfblocks.serving.generator": ["Generator"],
        "tfblocks.serving.hypothesis": ["Hypothesis"],
        "tfblocks.serving.savedmodel": ["Translator"],
    },
)
