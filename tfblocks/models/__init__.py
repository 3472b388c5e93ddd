"""The model class, its builders and the hyper-parameter presets."""

from tfblocks.models.builders import build_language_model, build_transformer
from tfblocks.models.hparams import PRESETS, SCHEDULES, HParams, hparams
from tfblocks.models.marian import MarianImport, import_marian
from tfblocks.models.preset import Preset, load_preset, load_target_tokenizer, save_preset
from tfblocks.models.transformer import Transformer, padding_mask, shift_right

__all__ = [
    "PRESETS",
    "SCHEDULES",
    "HParams",
    "MarianImport",
    "Preset",
    "Transformer",
    "build_language_model",
    "build_transformer",
    "hparams",
    "import_marian",
    "load_preset",
    "load_target_tokenizer",
    "padding_mask",
    "save_preset",
    "shift_right",
]
