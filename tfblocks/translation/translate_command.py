"""`tfblocks-translate`: translate lines of text with a trained model.

Reads one sentence per line from standard input (or `--input FILE`) and writes one
translation per line, in the same order, to standard output (or `--output FILE`; an
existing file is replaced only with `--overwrite`, never the input); an empty line gives
an empty line. Input and output are UTF-8. Progress goes to standard error.

Pre-tokenized Japanese is joined as `tfblocks-train` joins a corpus: the spaces between
the tokens of a file named *.ja (small_parallel_enja's test.ja) are removed
(`--japanese-spaces`).

Examples:
  echo 今日のランチはカレーだ。 | tfblocks-translate --model runs/enja
  tfblocks-translate --model runs/enja/export/1 --input test.ja --output test.hyp
  tfblocks-translate --model runs/enja --beam-size 1 --japanese-spaces remove < test.ja
"""

import argparse
import os
import re
import stat
import sys

from tfblocks.translation.console import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfblocks-translate",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--model", required=True, help="run folder, preset or SavedModel")
    parser.add_argument("--input", help="file to translate (default: standard input)")
    parser.add_argument("--output", help="file to write (default or -: standard output)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --output file"
    )
    parser.add_argument("--beam-size", type=int, default=None, help="default 4 (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length-penalty exponent")
    parser.add_argument("--max-length", type=int, default=None, help="subwords per sentence")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--engine", default="tensorflow", choices=["tensorflow", "ctranslate2"])
    add_japanese_spaces_argument(parser, "the input (a file or standard input)")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    args = parser.parse_args(argv)
    if args.batch_size <= 0:
        parser.error(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.beam_size is not None and args.beam_size <= 0:
        parser.error(f"--beam-size must be a positive integer, got {args.beam_size}")
    return args


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
        f"them when {what} is a file named *.ja, as tfblocks-train reads a corpus; remove / "
        f"keep: always / never for {what}",
    )


def read_input(path, japanese_spaces, advise=True):
    """The sentences of `path` (standard input for None), read as `tfblocks-train` reads.

    With `advise`, warns on standard error when `auto` left most lines looking like
    pre-tokenized Japanese (a file not named *.ja, or standard input).
    """
    from tfblocks.text import read_sentences, remove_japanese_spaces
    from tfblocks.text.corpus import decode_lines

    remove_spaces = JAPANESE_SPACES[japanese_spaces]
    if path is not None:
        lines = read_sentences(path, remove_spaces=remove_spaces)
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


def check_paths(input_path, output, overwrite):
    """Refuses, before any work, an `--input` that cannot be read and an `--output` that
    cannot be written or would replace what the user has.

    Refused: an existing `--output` without `--overwrite`; the input (the `--input` file
    or the file standard input reads from, even with it); anything but a regular file
    (a folder, a device such as /dev/null, a pipe); `""`; a name ending in a path
    separator; a path whose folder does not exist. `-` is standard output.
    """
    if input_path is not None and not os.path.exists(input_path):
        raise ValueError(f"--input={input_path!r} does not exist")
    if input_path is not None and os.path.isdir(input_path):
        raise ValueError(f"--input={input_path!r} is a folder; give a file")
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
    source = os.stat(input_path) if input_path is not None else _stdin_file()
    if source is not None and os.path.samestat(source, os.stat(output)):
        raise ValueError(
            f"--output={output!r} is the file the input comes from; write the "
            "translations elsewhere"
        )
    if not overwrite:
        raise ValueError(f"--output={output!r} exists; pass --overwrite to replace it")


def _stdin_file():
    """The `os.stat_result` of the regular file standard input reads (`< FILE`), or None."""
    try:
        status = os.fstat(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor (e.g. replaced)
        return None
    return status if stat.S_ISREG(status.st_mode) else None


def main(argv=None):
    args = parse_args(argv)
    check_paths(args.input, args.output, args.overwrite)  # before TensorFlow loads
    from tfblocks.translation import engines
    from tfblocks.translation.in_batches import translate_in_batches

    lines = read_input(args.input, args.japanese_spaces)
    translate, what = engines.load_translate(
        args.model, args.beam_size, args.alpha, args.max_length, args.engine
    )
    print(f"translating {len(lines)} lines with {what}", file=sys.stderr)

    def progress(done, total):
        print(f"\r{done}/{total} lines", end="" if done < total else "\n", file=sys.stderr)

    out = translate_in_batches(translate, lines, args.batch_size, progress)
    text = "".join(line.replace("\n", " ") + "\n" for line in out)
    if args.output not in (None, "-"):
        from tfblocks._files import write_text

        write_text(args.output, text)
    elif hasattr(sys.stdout, "buffer"):  # UTF-8, as the input is read, whatever the locale
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def run():
    """The console entry point of `tfblocks-translate`."""
    run_command("tfblocks-translate", main)


if __name__ == "__main__":
    run()
