"""The t2t training recipe: loss, metrics, schedules, compile, and tf.distribute."""

from tfblocks import _lazy

# Imported now, or on first use in a `tfblocks-*` command (tfblocks/_lazy.py), which
# reads `tfblocks.training.precision.POLICIES` for its flags without TensorFlow.
__getattr__, __dir__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.training.distribute": ["get_strategy"],
        "tfblocks.training.losses": ["SmoothedCrossEntropy"],
        "tfblocks.training.metrics": ["CrossEntropy", "MaskedAccuracy", "Perplexity"],
        "tfblocks.training.optimizers": ["FusedAdam"],
        "tfblocks.training.recipe": ["compile_transformer", "learning_rate_schedule"],
        "tfblocks.training.schedules": ["NoamSchedule", "RsqrtDecay"],
        "tfblocks.training.weights": ["averaged_weights"],
    },
)

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
