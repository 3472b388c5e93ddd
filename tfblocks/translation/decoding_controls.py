"""The decoding controls (`tfblocks.decoding.Controls`) as the commands name them:
`--min-length`, `--disallow-unk`, `--max-length-ratio`, `--no-repeat-ngram-size` and
`--repetition-penalty`."""


def as_controls(controls):
    """`controls` as a `tfblocks.decoding.Controls` (None: none; anything else: a
    ValueError naming the argument)."""
    from tfblocks.decoding.controls import check_controls  # imports TensorFlow

    return check_controls(controls)


def control_flags(controls):
    """`{flag: given}` of the command-line flags of `controls` (a `Controls` or None)."""
    controls = as_controls(controls)
    return {
        "--min-length": bool(controls.min_length),
        "--disallow-unk": controls.disallow_unk,
        "--max-length-ratio": controls.max_length_ratio is not None,
        "--no-repeat-ngram-size": bool(controls.no_repeat_ngram_size),
        "--repetition-penalty": controls.repetition_penalty != 1.0,
    }


def described(controls):
    """A description's words for `controls` (`", min_length 3, no <unk>"`), or `""`."""
    controls = as_controls(controls)
    words = [
        f"min_length {controls.min_length}" if controls.min_length else "",
        "no <unk>" if controls.disallow_unk else "",
        f"max_length_ratio {controls.max_length_ratio}" if controls.max_length_ratio else "",
        f"no_repeat_ngram_size {n}" if (n := controls.no_repeat_ngram_size) else "",
        f"repetition_penalty {p}" if (p := controls.repetition_penalty) != 1.0 else "",
    ]
    return "".join(f", {word}" for word in words if word)


def from_arguments(args):
    """The `Controls` of a command's control flags (None when none is given)."""
    given = {
        "min_length": getattr(args, "min_length", None),
        "disallow_unk": getattr(args, "disallow_unk", False) or None,
        "max_length_ratio": getattr(args, "max_length_ratio", None),
        "no_repeat_ngram_size": getattr(args, "no_repeat_ngram_size", None),
        "repetition_penalty": getattr(args, "repetition_penalty", None),
    }
    given = {name: value for name, value in given.items() if value is not None}
    if not given:
        return None
    from tfblocks.decoding.controls import Controls

    return Controls(**given)
