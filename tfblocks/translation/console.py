"""What the console scripts share: how an expected error ends the program, and the
search their `--beam-size` names."""

import re
import sys

from tfblocks import _checks

# TensorFlow's prefix naming the op's function: `{{function_node __wrapped__ReadFile_...}} `.
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def _op_error():
    """`tf.errors.OpError`, or `()` before TensorFlow is imported (not imported here: a
    command that fails before it loads TensorFlow should not wait for it)."""
    tensorflow = sys.modules.get("tensorflow")
    return getattr(getattr(tensorflow, "errors", None), "OpError", ())


def error_line(error):
    """The one line that reports `error`: its message, with the path of an OSError
    (`filename`, `filename2`) and the kind of a TensorFlow error (`NotFoundError: ...`).

    >>> error_line(FileNotFoundError(2, "No such file or directory", "runs/x/dev.ja"))
    "No such file or directory: 'runs/x/dev.ja'"
    >>> error_line(ValueError("`--epochs` must be positive,\\n  got --epochs=0"))
    '`--epochs` must be positive, got --epochs=0'
    """
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        paths = [error.filename] + ([] if error.filename2 is None else [error.filename2])
        message = f"{error.strerror}: {' -> '.join(repr(_text(p)) for p in paths)}"
    elif isinstance(error, _op_error()):
        message = f"{type(error).__name__}: {_FUNCTION_NODE.sub('', error.message)}"
    else:
        message = str(error) or type(error).__name__
    return " ".join(message.split())


def _text(path):
    return path.decode("utf-8", "replace") if isinstance(path, bytes) else str(path)


def beam_or_greedy(beam_size, alpha=0.6, stop_early=False):
    """The search a beam width names (`--beam-size`): `Greedy()` for 1, else
    `BeamSearch(beam_size, alpha, stop_early)`.

    >>> beam_or_greedy(1), beam_or_greedy(4)
    (Greedy(), BeamSearch(beam_size=4, alpha=0.6, stop_early=False))
    """
    from tfblocks.decoding import BeamSearch, Greedy  # imports TensorFlow: not at the top

    _checks.check_bool("stop_early", stop_early)
    if _checks.check_positive_int("beam_size", beam_size) == 1:
        return Greedy()
    return BeamSearch(beam_size, alpha, stop_early)


def run_command(name, main, errors=()):
    """Runs a console script's `main()`; an expected error ends it with one line
    `NAME: error: ...` on standard error and exit status 2. With `--verbose` on the
    command line the traceback is shown instead.

    Expected are bad arguments, files and models: `ValueError`, `OSError` (a missing
    file, a full disk, a folder that cannot be written: the path is named), TensorFlow's
    `tf.errors.OpError` (the same from TensorFlow's own file system), and `errors`.

    Example:

    >>> def main():
    ...     raise ValueError("`--epochs` must be positive, got --epochs=0")
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     try:
    ...         run_command("tfblocks-train", main)
    ...     except SystemExit as stop:
    ...         print(stop.code)
    2
    >>> err.getvalue()
    'tfblocks-train: error: `--epochs` must be positive, got --epochs=0\\n'
    """
    try:
        return main()
    except Exception as error:
        expected = (ValueError, OSError, _op_error(), *errors)
        if "--verbose" in sys.argv or not isinstance(error, expected):
            raise
        print(f"{name}: error: {error_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
