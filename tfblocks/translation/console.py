"""What the console scripts share: their parser and its common arguments, how they
read their input, the search their `--beam-size` names, and how an expected error ends
the program."""

import argparse
import os
import re
import sys

from tfblocks import _checks

# TensorFlow's prefix naming the op's function: `{{function_node __wrapped__ReadFile_...}} `.
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
# What TensorFlow puts between a Python exception's line and its traceback when a Python
# function it ran raised; the exception's line starts with its class name.
_PYTHON_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt):")


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
        _tensorflow_backend(name)
        return main()
    except Exception as error:
        expected = (ValueError, OSError, _op_error(), _checks.BackendError, *errors)
        if "--verbose" in sys.argv or not isinstance(error, expected):
            raise
        print(f"{name}: error: {error_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None


# Parsers ---------------------------------------------------------------------------------


def _tensorflow_backend(name):
    """The commands are TensorFlow programs: a shell's KERAS_BACKEND=jax (set for the
    user's own JAX work) does not reach them while Keras is not loaded yet (a console
    script loads it after parsing its arguments); where it is, another backend is an
    error."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "tensorflow"
    else:
        _checks.require_tensorflow(name)


def command_parser(prog, doc):
    """The parser of the console script `prog` whose module docstring is `doc`: its first
    paragraph the description, the rest (examples) the epilog, both as written.

    >>> command_parser("tfblocks-x", "Does x.\\n\\nExample:\\n  tfblocks-x").format_usage()
    'usage: tfblocks-x [-h]\\n'
    """
    return argparse.ArgumentParser(
        prog=prog,
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n\n", 1)[1],
    )


# The most subwords `--max-length` asks for: a sentence's caches and attention grow with
# it, and a sentence of more subwords is a document.
MAX_LENGTH = 4096


def add_decoding_arguments(parser):
    """`--beam-size`, `--alpha`, `--max-length`, `--batch-size` and `--engine`: how a
    loaded model translates (checked by `check_decoding_arguments`)."""
    parser.add_argument("--beam-size", type=int, default=None, help="default 4 (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length-penalty exponent")
    parser.add_argument(
        "--max-length", type=int, default=None,
        help=f"subwords per sentence (2 to {MAX_LENGTH}; default: the run's max_length)",
    )  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--engine", default="tensorflow", choices=["tensorflow", "ctranslate2"])


def add_model_argument(parser):
    """`--model`, with the warning that a SavedModel runs its own graph."""
    parser.add_argument(
        "--model",
        required=True,
        action="append",
        help="run folder, preset or SavedModel; a run folder's preset (model/) is loaded "
        "when it has one, a SavedModel (export/1) otherwise: a SavedModel runs its own "
        "graph, which can read and write files, so give only models you trust; repeat "
        "--model to decode with the ensemble of several run folders or presets (the mean "
        "of their log-probabilities; one tokenizer)",
    )


def add_verbose_argument(parser):
    """`--verbose`: TensorFlow's log lines, and a traceback instead of `run_command`'s line."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's log lines, and an error's traceback instead of one line",
    )


def check_decoding_arguments(parser, args):
    """Refuses (`parser.error`) a `--batch-size`, `--beam-size` or `--max-length` that
    cannot work, before anything is loaded: 0 is an error, never "the default"; a
    `--max-length` above `MAX_LENGTH` too."""
    if args.batch_size <= 0:
        parser.error(f"--batch-size must be a positive integer, got --batch-size={args.batch_size}")
    if args.beam_size is not None and args.beam_size <= 0:
        parser.error(f"--beam-size must be a positive integer, got --beam-size={args.beam_size}")
    if args.max_length is not None and not 2 <= args.max_length <= MAX_LENGTH:
        parser.error(
            f"--max-length must be 2 (one subword and EOS) to {MAX_LENGTH}, got "
            f"--max-length={args.max_length}"
        )


# The options that sample instead of searching a beam: flag, `Sampling`'s argument, type,
# metavar and help.
SAMPLING_OPTIONS = (
    ("--sampling-topk", "top_k", int, "K",
     "sample among the K most likely subwords (0 = all, the default)"),
    ("--sampling-topp", "top_p", float, "P",
     "sample among the fewest most likely subwords whose probability reaches P, in (0, 1] "
     "(nucleus sampling; default 1 = all)"),
    ("--sampling-temperature", "temperature", float, "T",
     "sample from softmax(logits / T), T > 0 (below 1 sharper, above 1 flatter; default 1)"),
)  # fmt: skip


def add_sampling_arguments(parser):
    """`--sampling-topk`, `--sampling-topp`, `--sampling-temperature` and `--seed`: any of
    the first three decodes with `tfblocks.decoding.Sampling` instead of beam search
    (`sampling_search`; checked by `check_sampling_arguments`)."""
    group = parser.add_argument_group(
        "sampling", "any of --sampling-topk/-topp/-temperature samples each subword from "
        "the model's distribution instead of searching a beam (no --beam-size needed)",
    )  # fmt: skip
    for flag, _, kind, metavar, help_ in SAMPLING_OPTIONS:
        group.add_argument(flag, type=kind, metavar=metavar, help=help_)
    group.add_argument(
        "--seed", type=int, metavar="S",
        help="seed of the samples (default 0): the same seed, input and --batch-size give "
        "the same output",
    )  # fmt: skip


def sampling(args):
    """Whether the command line asks for sampling (any of `SAMPLING_OPTIONS`)."""
    return bool(_sampling_values(args))


def _sampling_values(args):
    """`{flag: (Sampling's argument, value)}` of the `SAMPLING_OPTIONS` given in `args`."""
    values = {
        flag: (arg, getattr(args, flag[2:].replace("-", "_"))) for flag, arg, *_ in SAMPLING_OPTIONS
    }
    return {flag: pair for flag, pair in values.items() if pair[1] is not None}


def check_sampling_arguments(parser, args):
    """Refuses (`parser.error`), one line each, a sampling value `Sampling` would refuse,
    a `--seed` outside int32 or without sampling, and with sampling the options of beam search
    (`--beam-size` above 1, `--stop-early`), of scoring (`--score`) and of CTranslate2."""
    if args.sampling_topk is not None and args.sampling_topk < 0:
        parser.error(f"--sampling-topk must be 0 or more, got --sampling-topk={args.sampling_topk}")
    if args.sampling_topp is not None and not 0 < args.sampling_topp <= 1:
        parser.error(f"--sampling-topp must be in (0, 1], got --sampling-topp={args.sampling_topp}")
    temperature = args.sampling_temperature
    if temperature is not None and not (_checks.is_finite_real(temperature) and temperature > 0):
        parser.error(
            f"--sampling-temperature must be a finite number above 0, got "
            f"--sampling-temperature={temperature}"
        )
    if args.seed is not None and not 0 <= args.seed < 2**31:  # `Sampling` casts it to int32
        parser.error(f"--seed must be 0 to {2**31 - 1}, got --seed={args.seed}")
    if not sampling(args):
        if args.seed is not None:
            parser.error(
                f"--seed seeds sampling: give --sampling-topk, --sampling-topp or "
                f"--sampling-temperature too, got --seed={args.seed} alone"
            )
        return
    given = next(iter(_sampling_values(args)))
    refused = (
        ("--beam-size", args.beam_size if (args.beam_size or 1) > 1 else None),
        ("--stop-early", getattr(args, "stop_early", False) or None),
        ("--score", getattr(args, "score", None)),
        ("--engine", "ctranslate2" if args.engine == "ctranslate2" else None),
    )
    for flag, value in refused:
        if value is not None:
            parser.error(
                f"{given} samples instead of searching a beam: {flag}={value} does not apply"
            )


def sampling_search(args):
    """The `tfblocks.decoding.Sampling` the command line asks for, or None (beam search)."""
    if not sampling(args):
        return None
    from tfblocks.decoding import Sampling  # imports TensorFlow: not at the top

    options = dict(_sampling_values(args).values())
    return Sampling(seed=args.seed or 0, **options)


def search_options(args):
    """`engines.load_translate`'s `search` (`sampling_search`) and `replace_unknowns`."""
    return {"search": sampling_search(args), "replace_unknowns": args.replace_unknowns}


def add_replace_unknowns_argument(parser):
    """`--replace-unknowns`: a translation's `<unk>` becomes the source word it is aligned
    to (`Translator(...)(texts, replace_unknowns=True)`)."""
    parser.add_argument(
        "--replace-unknowns",
        action="store_true",
        help="replace each unknown subword (<unk>) of a translation by the source word its "
        "cross-attention points at (in text written without spaces, such as Japanese, "
        "the source subword's own characters); one run folder or preset",
    )


def check_replace_unknowns_argument(parser, args):
    """Refuses (`parser.error`) `--replace-unknowns` with an ensemble (several `--model`)."""
    if args.replace_unknowns and len(args.model) > 1:
        parser.error(
            "--replace-unknowns reads one model's cross-attention, which an ensemble has not: "
            f"give one --model, got {len(args.model)}"
        )


# --japanese-spaces value -> `remove_spaces` of `tfblocks.text.read_sentences`.
JAPANESE_SPACES = {"auto": None, "remove": True, "keep": False}
# A space between two non-ASCII characters: what pre-tokenized Japanese looks like.
_SPACED_NON_ASCII = re.compile(r"[^\x00-\x7f]\s+[^\x00-\x7f]")


def add_japanese_spaces_argument(parser, what):
    """Adds `--japanese-spaces` to `parser`; `what` names the input it applies to."""
    parser.add_argument(
        "--japanese-spaces",
        default="auto",
        choices=list(JAPANESE_SPACES),
        help="spaces between the tokens of pre-tokenized Japanese: auto (default) removes "
        f"them from {what} when the model's run recorded ja as that side's language (never "
        "for another language), and for a model without recorded languages when it is a "
        f"file named *.ja, as tfblocks-train reads a corpus; remove / keep: always / never "
        f"for {what}",
    )


def model_languages(models):
    """`(source, target)` languages recorded by the run of the (first) `--model`, or None."""
    from tfblocks.translation.run_folder import run_languages

    models = [models] if isinstance(models, str | os.PathLike) else list(models)
    return run_languages(models[0]) if models else None


def read_input(path, japanese_spaces, advise=True, language=None):
    """The sentences of `path` (standard input for None), read as `tfblocks-train` reads.

    `language` is the language of the text as the model's run recorded it (None:
    unknown); with `auto`, Japanese (`ja`) is joined, any other language kept as it is,
    and an unknown one follows the *.ja file-name rule. With `advise`, warns on standard
    error when `auto` left most lines of a text of unknown language looking like
    pre-tokenized Japanese (a file not named *.ja, or standard input).
    """
    from tfblocks.text import read_sentences, remove_japanese_spaces
    from tfblocks.text.corpus import decode_lines

    remove_spaces = JAPANESE_SPACES[japanese_spaces]
    if remove_spaces is None and language is not None:
        remove_spaces, advise = language == "ja", False
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


def read_lines_as_they_come(path, japanese_spaces, language=None):
    """Yields each line of `path` (standard input for None) as soon as it is read (a
    pipe or a terminal need not end first), joined as `read_input` joins a whole text
    (`language` as there; no advice, as the lines are not seen all together)."""
    from tfblocks.text import remove_japanese_spaces
    from tfblocks.text.lines import file_language, file_lines

    remove = JAPANESE_SPACES[japanese_spaces]
    if remove is None and language is not None:
        remove = language == "ja"
    if remove is None:  # a model without recorded languages: the *.ja file-name rule
        remove = path is not None and file_language(path) == "ja"
    if path is not None:
        numbered = file_lines(path)
    elif sys.stdin is None:  # closed (`<&-`): Python has no standard input at all
        raise ValueError("standard input is closed: give --input FILE, or the text on it")
    else:
        numbered = _stdin_lines()
    for _, line in numbered:
        yield remove_japanese_spaces(line) if remove else line


def _stdin_lines():
    """Yields `(number, line)` of standard input, each as soon as its line end is read
    (as `file_lines` reads a file: UTF-8, no line end, no byte-order mark)."""
    from tfblocks.text.lines import invalid_utf8

    for number, data in enumerate(iter(sys.stdin.buffer.readline, b""), 1):
        data = data.removesuffix(b"\n").rstrip(b"\r")
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise invalid_utf8("standard input", number, data, error) from None
        yield number, line.removeprefix("\ufeff") if number == 1 else line
