"""Model builders and hyper-parameter presets."""

from tfblocks.models.hparams import PRESETS, HParams, hparams
from tfblocks.models.transformer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    build_transformer,
    encoder_decoder,
    transformer_layers,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "PRESETS",
    "UNK_ID",
    "HParams",
    "build_transformer",
    "encoder_decoder",
    "hparams",
    "transformer_layers",
]
