"""The model class, its builders, the hparams sets (t2t's named hyper-parameters), saved
presets (a model folder: weights, hparams and tokenizers) and the importers of other
toolkits' models."""

from tfblocks import _lazy

# The public API, listed once (tfblocks/_lazy.py). Before 0.1.0 the hparams sets were
# `PRESETS` ("preset" now names a saved model folder only) and the regimes `SCHEDULES`
# ("schedule" names a Keras learning-rate schedule only): kept for one release.
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.models.builders": ["build_language_model", "build_transformer"],
        "tfblocks.models.hyperparameters": ["HPARAMS_SETS", "REGIMES", "HParams", "hparams"],
        "tfblocks.models.inputs": ["padding_mask", "shift_right"],
        "tfblocks.models.m2m100": ["M2M100Import", "import_m2m100", "import_nllb"],
        "tfblocks.models.marian": ["MarianImport", "import_marian"],
        "tfblocks.models.preset": ["Preset", "load_preset", "load_target_tokenizer", "save_preset"],
        "tfblocks.models.transformer": ["Transformer"],
    },
    deprecated={"PRESETS": "HPARAMS_SETS", "SCHEDULES": "REGIMES"},
)
