"""What the console scripts do around their work: how an expected error ends the program
(one line, exit status 2), how they read their input lines and check the files they
read and write, and how they write a translation as one line."""

import os
import re
import stat
import sys

from tfblocks import _backend

# TensorFlow's prefix naming the op's function: `{{function_node __wrapped__ReadFile_...}} `.
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
# What TensorFlow puts between a Python exception's line and its traceback when a Python
# function it ran raised; the exception's line starts with its class name.
_PYTHON_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt):")
# What a failed `tf.debugging.Assert` in a graph says before its data (`[message] [42]`),
# after the Python stack of the op's definition.
_ASSERTION = "assertion failed: "


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
    elif isinstance(error, _op_error()) and _PYTHON_TRACEBACK in error.message:
        message = _python_error(error.message)
    elif isinstance(error, _op_error()) and _ASSERTION in error.message:
        message = f"{type(error).__name__}: {_assertion(error.message)}"
    elif isinstance(error, _op_error()):
        message = f"{type(error).__name__}: {_FUNCTION_NODE.sub('', error.message)}"
    else:
        message = str(error) or type(error).__name__
    return " ".join(message.split())


def _python_error(message):
    """The Python exception's own line(s) (`ValueError: ...`) in the message of a
    TensorFlow error that carries one with its traceback (a Python function that
    TensorFlow ran, such as `tf.data.Dataset.from_generator`'s, raised it).

    >>> _python_error("Graph execution error:\\n\\nDetected at node x defined at (most "
    ...               "recent call last):\\n  File 'a.py', line 1\\nValueError: a.de, line 3: "
    ...               "bad\\nTraceback (most recent call last):\\n  File 'b.py'\\nValueError: "
    ...               "a.de, line 3: bad\\n [[{{node PyFunc}}]]")
    'ValueError: a.de, line 3: bad'
    """
    lines = message.split(_PYTHON_TRACEBACK, 1)[0].rstrip().splitlines()
    # An eager op's error starts with its function: `{{function_node ...}} ValueError: ...`.
    lines = [_FUNCTION_NODE.sub("", line) for line in lines]
    starts = [i for i, line in enumerate(lines) if _EXCEPTION_LINE.match(line)]
    return "\n".join(lines[starts[-1] :] if starts else lines[-1:])


def _assertion(message):
    """The data of a graph assertion's message (its text and values), without the stack
    of the op's definition that TensorFlow puts before it.

    >>> _assertion("Graph execution error:\\n\\nDetected at node A defined at (most recent "
    ...            "call last):\\n  File 'a.py', line 1\\n\\nassertion failed: [`target` may "
    ...            "hold at most 8 subwords, got] [9]\\n\\t [[{{node A}}]] [Op:f]")
    '`target` may hold at most 8 subwords, got 9'
    """
    line = message.split(_ASSERTION, 1)[1].split("\n", 1)[0]
    return " ".join(re.findall(r"\[([^\[\]]*)\]", line)) or line


def _text(path):
    return path.decode("utf-8", "replace") if isinstance(path, bytes) else str(path)


def run_command(name, main, errors=(), interrupted=""):
    """Runs a console script's `main()`; an expected error ends it with one line
    `NAME: error: ...` on standard error and exit status 2. With `--verbose` on the
    command line the traceback is shown instead.

    Expected are bad arguments, files and models: `ValueError`, `OSError` (a missing
    file, a full disk, a folder that cannot be written: the path is named), TensorFlow's
    `tf.errors.OpError` (the same from TensorFlow's own file system), and `errors`. An
    interrupt (Ctrl-C) ends it with `NAME: interrupted` and `interrupted` (what the user
    may do next) and exit status 130, as a shell reports SIGINT. The first line a command
    that loads TensorFlow writes, before that import, is `NAME: loading TensorFlow...` on
    standard error (`_Announce`).

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
    announce = _Announce(name)
    sys.meta_path.insert(0, announce)
    try:
        _backend.use_tensorflow(name)
        return main()
    except KeyboardInterrupt:  # Ctrl-C: one line, not TensorFlow's traceback
        if "--verbose" in sys.argv:
            raise
        print(f"{name}: interrupted{interrupted}", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as error:
        expected = (ValueError, OSError, _op_error(), _backend.BackendError, *errors)
        if "--verbose" in sys.argv or not isinstance(error, expected):
            raise
        print(f"{name}: error: {error_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        announce.remove()


# The packages whose first import loads TensorFlow (Keras loads it as its backend).
_LOADS_TENSORFLOW = ("tensorflow", "keras")


class _Announce:
    """A `sys.meta_path` finder that says, on standard error, `NAME: loading TensorFlow...`
    once, when TensorFlow (or Keras) is about to be imported for the first time, so that
    a person sees at once that the command is working through the seconds of that import;
    it finds nothing itself. A command that answers without TensorFlow (`--help`, a bad
    argument) says nothing, nor does one in a process that has TensorFlow already.

    Example:

    >>> import contextlib, io
    >>> announce = _Announce("tfblocks-x")
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     for name in ("numpy", "tensorflow", "keras"):
    ...         announce.find_spec(name)
    >>> err.getvalue()
    'tfblocks-x: loading TensorFlow...\\n'
    """

    def __init__(self, name):
        self.name = name
        self.said = False

    def find_spec(self, name, path=None, target=None):
        if name in _LOADS_TENSORFLOW and not self.said:
            self.said = True
            print(f"{self.name}: loading TensorFlow...", file=sys.stderr, flush=True)
        return None

    def remove(self):
        """Takes this finder out of `sys.meta_path` (when the command ends: not while an
        import goes through that list)."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)


# --japanese-spaces value -> `remove_spaces` of `tfblocks.text.read_sentences`.
JAPANESE_SPACES = {"auto": None, "remove": True, "keep": False}
# A space between two non-ASCII characters: what pre-tokenized Japanese looks like.
_SPACED_NON_ASCII = re.compile(r"[^\x00-\x7f]\s+[^\x00-\x7f]")


def read_input(path, japanese_spaces, advise=True, language=None):
    """The sentences of `path` (standard input for None), read as `tfblocks-train` reads.

    `language` is the language of the text as the model's run recorded it (None:
    unknown); with `auto`, Japanese (`ja`, `jpn`, `jpn_Jpan`) is joined, any other
    language kept as it is, and an unknown one follows the *.ja file-name rule. With
    `advise`, warns on standard error when `auto` left most lines of a text of unknown
    language looking like pre-tokenized Japanese (a file not named *.ja, or standard
    input).
    """
    from tfblocks.text import read_sentences, remove_japanese_spaces
    from tfblocks.text.corpus import decode_lines
    from tfblocks.text.lines import is_japanese

    remove_spaces = JAPANESE_SPACES[japanese_spaces]
    if remove_spaces is None and language is not None:
        remove_spaces, advise = is_japanese(language), False
    if path is not None:
        lines = read_sentences(path, remove_spaces=remove_spaces)
    elif sys.stdin is None:  # closed (`<&-`): Python has no standard input at all
        raise ValueError("standard input is closed: give --input FILE, or the text on it")
    else:
        lines = decode_lines(sys.stdin.buffer.read(), "standard input")
        lines = [remove_japanese_spaces(s) for s in lines] if remove_spaces else lines
    spaced = sum(1 for line in lines if _SPACED_NON_ASCII.search(line))
    if advise and remove_spaces is None and spaced * 2 > sum(1 for line in lines if line):
        name = "standard input" if path is None else path
        print(
            f"warning: {spaced} of the {len(lines)} lines of {name} look like pre-tokenized "
            "Japanese (spaces between Japanese characters) and are read as they are; "
            "--japanese-spaces remove joins them as tfblocks-train joins a *.ja corpus",
            file=sys.stderr,
        )
    return lines


def read_lines_as_they_come(path, japanese_spaces, language=None, invalid=None):
    """Yields each line of `path` (standard input for None) as soon as it is read (a
    pipe or a terminal need not end first), joined as `read_input` joins a whole text
    (`language` as there; no advice, as the lines are not seen all together).

    `invalid`: None, or a function called with the ValueError of a line of standard input
    that is not UTF-8, for which None is yielded and reading goes on (a session at a
    terminal is not ended by one mistyped line); without it that error ends the reading.
    """
    from tfblocks.text import remove_japanese_spaces
    from tfblocks.text.lines import file_language, file_lines, is_japanese

    remove = JAPANESE_SPACES[japanese_spaces]
    if remove is None and language is not None:
        remove = is_japanese(language)
    if remove is None:  # a model without recorded languages: the *.ja file-name rule
        remove = path is not None and is_japanese(file_language(path))
    if path is not None:
        numbered = file_lines(path)
    elif sys.stdin is None:  # closed (`<&-`): Python has no standard input at all
        raise ValueError("standard input is closed: give --input FILE, or the text on it")
    else:
        numbered = _stdin_lines(invalid)
    for _, line in numbered:
        yield line if line is None or not remove else remove_japanese_spaces(line)


def _stdin_lines(invalid=None):
    """Yields `(number, line)` of standard input, each as soon as its line end is read
    (as `file_lines` reads a file: UTF-8, no line end, no byte-order mark); a line that is
    not UTF-8 raises its ValueError, or with `invalid` is passed to it and yields None."""
    from tfblocks.text.lines import invalid_utf8

    for number, data in enumerate(iter(sys.stdin.buffer.readline, b""), 1):
        data = data.removesuffix(b"\n").rstrip(b"\r")
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as error:
            if invalid is None:
                raise invalid_utf8("standard input", number, data, error) from None
            invalid(invalid_utf8("standard input", number, data, error))
            yield number, None
            continue
        yield number, line.removeprefix("\ufeff") if number == 1 else line


def check_paths(input_path, output, overwrite, reads=(), input_flag="--input"):
    """Refuses, before any work, an `--input` that cannot be read and an `--output` that
    cannot be written or would replace what the user has.

    `reads` are the other files the command reads, `(flag, path)` pairs (`--score`,
    `--target-prefix`; a None path is not given): each must be a regular file, a pipe
    (`<(...)`, a FIFO) or a character device (`/dev/stdin` on a terminal). `input_flag`
    names `input_path` in the messages (`--src` for tfblocks-evaluate).

    Refused: an existing `--output` without `--overwrite`; any file the command reads
    (the `--input` file or the file standard input reads from, and those of `reads`),
    even with it, whatever name reaches it (a link, `./`); anything but a regular file
    (a folder, a device such as /dev/null, a pipe); `""`; a name ending in a path
    separator; a path whose folder does not exist. `-` is standard output.
    """
    if input_path is not None and not os.path.exists(input_path):
        raise ValueError(f"{input_flag}={input_path!r} does not exist")
    if input_path is not None and os.path.isdir(input_path):
        raise ValueError(f"{input_flag}={input_path!r} is a folder; give a file")
    reads = [(flag, path) for flag, path in reads if path is not None]
    for flag, path in reads:
        if not _readable(path):
            raise ValueError(f"{flag}={path!r} is not a file or a pipe")
    if output is None or output == "-":
        return
    if not output or output.endswith(("/", os.sep)):
        raise ValueError(f"--output={output!r} must name a file")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"--output={output!r}: the folder {folder!r} does not exist")
    if not os.path.lexists(output):
        return
    if not os.path.isfile(output):
        raise ValueError(f"--output={output!r} exists and is not a regular file")
    written = os.stat(output)
    source = os.stat(input_path) if input_path is not None else _stdin_file()
    if source is not None and os.path.samestat(source, written):
        raise ValueError(
            f"--output={output!r} is the file the input comes from; write the "
            "translations elsewhere"
        )
    for flag, path in reads:
        if os.path.samestat(os.stat(path), written):
            raise ValueError(
                f"--output={output!r} is the file {flag}={path!r} reads; write the output elsewhere"
            )
    if not overwrite:
        raise ValueError(f"--output={output!r} exists; pass --overwrite to replace it")


def _readable(path):
    """Whether `path` is something to read lines from: a regular file, a pipe or a
    character device (links followed; a missing path, a folder or a socket: False)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _stdin_file():
    """The `os.stat_result` of the regular file standard input reads (`< FILE`), or None."""
    try:
        status = os.fstat(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor (e.g. replaced)
        return None
    return status if stat.S_ISREG(status.st_mode) else None


# What `str.splitlines()` (and Python's universal newlines) take for a line end.
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def one_line(translation):
    """`translation` with every line break a space: one line out per line in, for any reader.

    >>> one_line("a\\nb\\u2028c\\r")
    'a b c '
    """
    return _LINE_BREAKS.sub(" ", translation)


def n_best_lines(index, hypotheses):
    """Moses' n-best lines of the input line `index`: `INDEX ||| translation ||| score`.

    >>> n_best_lines(0, [("Today's lunch is curry.", -1.5), ("", 0.0)])
    "0 ||| Today's lunch is curry. ||| -1.500000\\n0 |||  ||| 0.000000\\n"
    """
    return "".join(f"{index} ||| {one_line(text)} ||| {score:.6f}\n" for text, score in hypotheses)
