"""Named training regimes (learning-rate settings that replace an hparams set's own), and
the `key=value` text of `HParams` overrides: TensorFlow-free, so that the commands' `--help`
can show them. ("Schedule" names a Keras learning-rate schedule only.)"""

# Named training regimes for `hparams(regime=...)`, applied over the hparams set's.
# "small_data": a 200-step warm-up and constant 0.35 instead of t2t's 8000 / 2.0, which
# are tuned for hundreds of thousands of steps: a run of a few thousand steps on a small
# corpus would spend them warming up (the peak rate is about 2.2e-3 at d=128). It is
# `tfblocks-train`'s default (`tfblocks.translation.options.DEMO_OVERRIDES`).
REGIMES = {
    "small_data": {"learning_rate_warmup_steps": 200, "learning_rate_constant": 0.35},
}


def format_overrides(overrides):
    """The `"key=value,key=value"` text of `overrides` (HParams fields and values), which
    `tfblocks.models.hyperparameters.parse_overrides` reads back.

    >>> format_overrides({"max_length": 64, "learning_rate_constant": 0.35})
    'max_length=64,learning_rate_constant=0.35'
    """
    return ",".join(f"{key}={value}" for key, value in overrides.items())
