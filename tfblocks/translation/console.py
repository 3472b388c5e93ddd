"""What the three console scripts share: how an expected error ends the program."""

import sys


def run_command(name, main, errors=(ValueError, OSError)):
    """Runs a console script's `main()`; an error of the `errors` types (bad arguments,
    files or models) ends it with one line `NAME: error: ...` on standard error and exit
    status 2. With `--verbose` on the command line the traceback is shown instead.

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
    except errors as error:
        if "--verbose" in sys.argv:
            raise
        print(f"{name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
