"""The t2t training recipe: loss, metrics, schedules, compile, and tf.distribute."""

from tfblocks.training.distribute import get_strategy
from tfblocks.training.losses import SmoothedCrossEntropy
from tfblocks.training.metrics import CrossEntropy, MaskedAccuracy, Perplexity
from tfblocks.training.optimizers import FusedAdam
from tfblocks.training.recipe import compile_transformer, learning_rate_schedule
from tfblocks.training.schedules import NoamSchedule, RsqrtDecay
from tfblocks.training.weights import averaged_weights

__all__ = [
    "CrossEntropy",
    "FusedAdam",
    "MaskedAccuracy",
    "NoamSchedule",
    "Perplexity",
    "RsqrtDecay",
    "SmoothedCrossEntropy",
    "averaged_weights",
    "compile_transformer",
    "get_strategy",
    "learning_rate_schedule",
]
