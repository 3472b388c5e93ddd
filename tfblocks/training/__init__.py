"""The t2t training recipe: loss, metrics, schedules, compile, and tf.distribute."""

from tfblocks import _lazy

# Imported now, or on first use in a `tfblocks-*` command (tfblocks/_lazy.py), which
# reads `tfblocks.training.precision.POLICIES` for its flags without TensorFlow.
__getattr__, __dir__, __all__ = _lazy.public_names(
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
