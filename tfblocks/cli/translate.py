"""`tfblocks-translate`: translate lines of text with a trained model.

Reads one sentence per line from standard input (or `--input FILE`) and writes one
translation per line, in the same order, to standard output (or `--output FILE`; an
existing file is replaced only with `--overwrite`, never the input); an empty line gives
an empty line. Input and output are UTF-8. Progress goes to standard error.

With `--n-best K` it writes the K best translations of each line in Moses' n-best format,
`INDEX ||| translation ||| score` (INDEX the 0-based line number), K lines per input
line, in input order. With `--alignments` each line is `translation ||| alignment`, the
word alignment in Pharaoh format (`i-j`: 0-based source word i, target word j; words
as whitespace separates them). With `--score TARGETS` it translates nothing: it writes the
log-probability of each line of TARGETS given the input's line, one number per line.
With `--target-prefix FILE` the translation of each line starts with the words of the
same line of FILE (interactive translation, terminology); an empty line forces nothing.
With `--constraints FILE` each translation holds the phrases of the same line of FILE
(separated by tabs; an empty line constrains nothing), found by constrained beam search.
`--score`, `--target-prefix` and `--constraints` read a file or a pipe
(`--score <(cut -f2 pairs.tsv)`).
With `--replace-unknowns` each unknown subword (`<unk>`) of a translation becomes the
source word its cross-attention points at (in text written without spaces, such as
Japanese, the source subword's own characters). `--sampling-topk K`, `--sampling-topp P`
or `--sampling-temperature T` sample each subword from the model's distribution instead
of searching a beam (`--n-best K`: K samples a line); `--seed S` seeds them, so the same
seed, input and `--batch-size` give the same output.

With `--interactive`, and whenever standard input is a terminal, each line is translated
as soon as it is read and its translation written at once (a line in, a line out),
instead of after the end of the input.

Pre-tokenized Japanese is joined as `tfblocks-train` joins a corpus: when the model's run
folder records Japanese (ja) as its source language, the spaces between the tokens of the
input (small_parallel_enja's test.ja) are removed, and never for another language; for a
model without recorded languages, those of a file named *.ja (`--japanese-spaces`).

Examples:
  echo 今日のランチはカレーだ。 | tfblocks-translate --model runs/enja
  tfblocks-translate --model runs/enja/export/1 --input test.ja --output test.hyp
  tfblocks-translate --model runs/enja --beam-size 1 --japanese-spaces remove < test.ja
  tfblocks-translate --model runs/enja --n-best 4 --input test.ja --output test.nbest
  tfblocks-translate --model runs/enja --input test.ja --score test.en --output test.scores
  tfblocks-translate --model runs/enja --input test.ja --target-prefix starts.en
  tfblocks-translate --model runs/enja --input test.ja --constraints glossary.tsv
  tfblocks-translate --model runs/enja --model runs/enja-seed2 --input test.ja
  tfblocks-translate --model runs/enja --alignments --input test.ja --output test.aligned
  tfblocks-translate --model runs/enja --interactive --beam-size 1
  tfblocks-translate --model runs/enja --replace-unknowns --input manual.ja
  tfblocks-translate --model runs/enja --sampling-topp 0.9 --seed 7 --n-best 5 < test.ja
  tfblocks-translate --model runs/multi --target-lang fr --input test.de
"""

import sys

from tfblocks.cli.arguments import (
    BATCH_SIZE,
    add_decoding_arguments,
    add_model_argument,
    command_parser,
    model_languages,
    parse_translation_arguments,
    sampling,
    search_options,
)
from tfblocks.cli.console import (
    check_paths,
    error_line,
    n_best_lines,
    one_line,
    read_input,
    read_lines_as_they_come,
    run_command,
)
from tfblocks.translation.targets import language_direction, tag_lines, target_language
from tfblocks.translation.xla_cache import run_folder_of, use_run_cache


def parse_args(argv=None):
    parser = command_parser("tfblocks-translate", __doc__)
    add_model_argument(parser)
    parser.add_argument("--input", help="file to translate (default: standard input)")
    parser.add_argument("--output", help="file to write (default or -: standard output)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --output file"
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--stop-early",
        action="store_true",
        help="end a sentence's beam search once beam-size hypotheses have finished "
        "(fairseq's and CTranslate2's rule) instead of t2t's",
    )
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="K",
        help="write the K best translations of each line (at most the beam size; with "
        "sampling, K samples) in Moses' n-best format: INDEX ||| translation ||| score "
        "(default: off, the best translation alone)",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="write `translation ||| alignment`: the word alignment in Pharaoh format "
        "(i-j: 0-based source word i, target word j), from a decoder layer's "
        "cross-attention",
    )
    parser.add_argument(
        "--score",
        metavar="TARGETS",
        help="translate nothing: write the log-probability of each line of TARGETS (as "
        "many lines as the input) given the input's line (default: off)",
    )
    parser.add_argument(
        "--target-prefix",
        metavar="FILE",
        help="start the translation of each input line with the words of the same line of "
        "FILE (forced), then decode freely; an empty line forces nothing (default: off)",
    )
    parser.add_argument(
        "--constraints",
        metavar="FILE",
        help="make the translation of each input line hold the phrases of the same line of "
        "FILE (tab-separated target phrases; an empty line constrains nothing; default: off)",
    )
    parser.add_argument(
        "--interactive",
        action="store_true",
        help="translate each line as soon as it is read and write its translation at once "
        "(a line in, a line out; the default when standard input is a terminal); not with "
        "--output FILE, --score, --target-prefix, --constraints or --batch-size",
    )
    args = parse_translation_arguments(parser, argv, "the input (a file or standard input)")
    check_output_arguments(parser, args)
    return args


def check_output_arguments(parser, args):
    """Refuses (`parser.error`) an `--n-best` that cannot work, `--alignments` with an
    ensemble, options `--score` would ignore, what `--interactive` cannot do and
    `--overwrite` without an `--output` file (docs/command-line.md's table of options by
    mode lists them)."""
    if args.n_best is not None and args.n_best <= 0:
        parser.error(f"--n-best must be a positive integer, got --n-best={args.n_best}")
    beam = None if sampling(args) else args.beam_size  # sampling: any number of samples
    if args.n_best is not None and beam is not None and args.n_best > beam:
        parser.error(
            f"--n-best must be at most --beam-size, got --n-best={args.n_best} and "
            f"--beam-size={args.beam_size}"
        )
    if args.alignments and args.n_best is not None:
        parser.error("--alignments aligns the best translation only: drop --n-best")
    if args.alignments and len(args.model) > 1:
        parser.error(
            "--alignments reads one model's cross-attention, which an ensemble has not: give "
            f"one --model, got {len(args.model)}"
        )
    if args.score is not None:
        given = [
            flag
            for flag, value in (
                ("--alignments", args.alignments or None),
                ("--n-best", args.n_best),
                ("--beam-size", args.beam_size),
                ("--alpha", args.alpha),
                ("--stop-early", args.stop_early or None),
                ("--target-prefix", args.target_prefix),
                ("--constraints", args.constraints),
                ("--replace-unknowns", args.replace_unknowns or None),
                ("--xla", None if args.xla == "auto" else args.xla),
                ("--min-length", args.min_length),
                ("--disallow-unk", args.disallow_unk or None),
                ("--max-length-ratio", args.max_length_ratio),
                ("--no-repeat-ngram-size", args.no_repeat_ngram_size),
                ("--repetition-penalty", args.repetition_penalty),
            )
            if value is not None
        ]
        if given:
            parser.error(f"--score scores given translations: {', '.join(given)} does not apply")
    if args.overwrite and args.output in (None, "-"):
        parser.error("--overwrite replaces an existing --output file: give --output FILE")
    if args.interactive and args.output not in (None, "-"):
        parser.error(
            "--interactive writes each translation to standard output as soon as it is done: "
            f"drop --output={args.output!r}"
        )
    if args.interactive and args.batch_size is not None:
        parser.error(
            "--interactive translates each line as a batch of its own as soon as it comes: "
            f"--batch-size={args.batch_size} does not apply"
        )
    for flag, value in (
        ("--score", args.score),
        ("--target-prefix", args.target_prefix),
        ("--constraints", args.constraints),
    ):
        if args.interactive and value is not None:
            parser.error(
                f"--interactive translates each line as it comes: {flag} (a file of as many "
                "lines as the input) does not apply"
            )


def main(argv=None):
    args = parse_args(argv)
    reads = (
        ("--score", args.score),
        ("--target-prefix", args.target_prefix),
        ("--constraints", args.constraints),
    )
    check_paths(args.input, args.output, args.overwrite, reads)  # before TensorFlow loads
    use_run_cache(run_folder_of(args.model), "tfblocks-translate")  # its compiled programs
    from tfblocks.translation import engines
    from tfblocks.translation.in_batches import translate_in_batches
    from tfblocks.translation.progress import count_progress

    languages = model_languages(args.model) or (None, None)
    notice = lambda message: print(f"tfblocks-translate: {message}", file=sys.stderr)  # noqa: E731
    target = target_language(args.model, args.target_lang, notice)  # several directions' tag
    # An imported M2M-100 / NLLB run: the direction its language tokens name.
    tokens = language_direction(args.model, args.source_lang, args.target_lang, notice)
    if tokens is not None:
        tokens, languages = tokens
    if _interactive(args):
        run, what = engines.load_translate(
            args.model, args.beam_size, args.alpha, args.max_length, args.engine, notice,
            n_best=args.n_best, stop_early=args.stop_early, alignments=args.alignments,
            language_tokens=tokens, xla=args.xla, **search_options(args),
        )  # fmt: skip
        print(f"translating each line as it is read with {what}", file=sys.stderr)
        skipped = lambda error: notice(f"{error_line(error)} The line is skipped.")  # noqa: E731
        lines = read_lines_as_they_come(args.input, args.japanese_spaces, languages[0], skipped)
        warm = None if sampling(args) else _warm_up(run, tag_lines(["a"], target))
        for index, line in enumerate(lines):
            if line is None:  # not UTF-8: said, an empty line out, and the session goes on
                _write_out("\n")
                continue
            if warm is not None:  # the first line waits for the warm-up, never beside it
                warm.join()
                warm = None
            _write_out(_output_lines(args, index, run(tag_lines([line], target))[0]))
        return
    lines = tag_lines(read_input(args.input, args.japanese_spaces, language=languages[0]), target)
    if args.score is not None:
        targets = _read_aligned(args, "--score", args.score, len(lines), languages[1])
        _check_score_lengths(args.score, targets)  # before the model loads
        run, what = engines.load_score(
            args.model, args.max_length, args.engine, notice, language_tokens=tokens
        )
        items, doing, length = list(zip(lines, targets, strict=True)), "scoring", _pair_length
    else:
        prefix = args.target_prefix is not None
        constraints = args.constraints is not None
        run, what = engines.load_translate(
            args.model, args.beam_size, args.alpha, args.max_length, args.engine, notice,
            n_best=args.n_best, stop_early=args.stop_early, prefix=prefix,
            alignments=args.alignments, constraints=constraints, language_tokens=tokens,
            xla=args.xla, lines=len(lines), **search_options(args),
        )  # fmt: skip
        items, doing, length = lines, "translating", len
        columns = [lines]
        if prefix:
            columns.append(
                _read_aligned(args, "--target-prefix", args.target_prefix, len(lines), languages[1])
            )
        if constraints:
            columns.append(_read_phrases(args, len(lines), languages[1]))
        if len(columns) > 1:
            items, length = list(zip(*columns, strict=True)), _source_length
    print(f"{doing} {len(lines)} lines with {what}", file=sys.stderr)
    # On a terminal one line rewritten; in a log a line each (at most every 10 s).
    progress = count_progress("lines")
    batch_size = args.batch_size or BATCH_SIZE
    if args.constraints is not None and args.score is None:
        run, length, items = _by_line(run, length, items, args.constraints)
    out = translate_in_batches(run, items, batch_size, progress, length=length)
    text = "".join(_output_lines(args, index, result) for index, result in enumerate(out))
    if args.output not in (None, "-"):
        from tfblocks._files import write_text

        write_text(args.output, text)
    else:
        _write_out(text)


def _by_line(run, length, items, path):
    """`run`, `length` and `items` with each item numbered, so that a phrase the model
    refuses (a `PhraseError` of the batch it came in, sorted by length) is named by its
    line of `--constraints` (`path`), from 1."""
    from tfblocks.decoding.constrained import PhraseError

    def numbered_run(batch):
        try:
            return run([item for _, item in batch])
        except PhraseError as error:
            line = batch[error.sentence][0] + 1
            shown = str(error.shown)
            shown = shown if len(shown) <= 40 else shown[:39] + "…"
            raise ValueError(
                f"--constraints={path!r} line {line}, phrase {error.phrase + 1} "
                f"({shown!r}) {error.reason}"
            ) from None

    return numbered_run, lambda pair: length(pair[1]), list(enumerate(items))


def _output_lines(args, index, result):
    """What is written for the input line `index` (0-based) given its `result`: a score
    (`--score`), Moses' n-best lines (`--n-best`), `translation ||| alignment`
    (`--alignments`) or the translation, each line ended by a newline."""
    if args.score is not None:
        return f"{result:.6f}\n"
    if args.n_best is not None:
        return n_best_lines(index, result)
    if args.alignments:
        translation, links = result
        return f"{one_line(translation)} ||| {links}\n"
    return one_line(result) + "\n"


def _write_out(text):
    """Writes `text` to standard output at once (flushed), as UTF-8 whatever the locale."""
    if hasattr(sys.stdout, "buffer"):
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _warm_up(run, lines):
    """A started thread that translates `lines` once with `run` and drops the result, so
    that the decoding's graph is traced (and a shape compiled) while the first line is
    being typed; its error, if any, is the first line's to raise. Not with sampling,
    whose draws it would use up."""
    import contextlib
    import threading

    def warm():
        with contextlib.suppress(Exception):  # the first real line raises it, with its text
            run(lines)

    thread = threading.Thread(target=warm, name="tfblocks-warm-up", daemon=True)
    thread.start()
    return thread


def _interactive(args):
    """Whether each line is translated as soon as it is read: with `--interactive`, and
    when standard input is a terminal, the output standard output and no file of as many
    lines as the input is given (`--score`, `--target-prefix`)."""
    if args.interactive:
        return True
    if args.input is not None or args.output not in (None, "-"):
        return False
    if args.score is not None or args.target_prefix is not None:
        return False
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, OSError, ValueError):  # replaced or closed: not a terminal
        return False


def _read_aligned(args, flag, path, count, language=None, japanese_spaces="auto"):
    """The lines of `path` (the file of `flag`, target-side text), one per input line, read
    as tfblocks-evaluate reads `--ref` (the run's target `language`, or the *.ja rule, no
    advice; or as `japanese_spaces` says); a ValueError naming both when the counts differ."""
    lines = read_input(path, japanese_spaces, advise=False, language=language)
    if len(lines) != count:
        name = "standard input" if args.input is None else repr(args.input)
        raise ValueError(
            f"{flag}={path!r} has {len(lines)} lines but the input ({name}) has {count}; "
            "give one line per input line"
        )
    return lines


def _read_phrases(args, count, language=None):
    """The phrases of each line of `--constraints` (tab-separated; blank ones dropped), one
    list per input line, read as `--target-prefix` is (`_read_aligned`), pre-tokenized
    Japanese joined phrase by phrase (joining the line would join its tabs too)."""
    from tfblocks.text import remove_japanese_spaces

    path = args.constraints
    lines = _read_aligned(args, "--constraints", path, count, japanese_spaces="keep")
    from tfblocks.text.lines import file_language, is_japanese

    join = is_japanese(language) or (language is None and is_japanese(file_language(path)))
    return [
        [remove_japanese_spaces(p) if join else p for p in line.split("\t") if p.strip()]
        for line in lines
    ]


# The most characters of a `--score` target: it is scored whole, never cut (as a source
# is), and its memory grows with the square of its length; a longer line is a document.
MAX_SCORE_CHARACTERS = 4096


def _check_score_lengths(path, targets):
    """Refuses a `--score` file (`path`) with a target (`targets`, its lines) longer than
    `MAX_SCORE_CHARACTERS`, naming its line."""
    for number, target in enumerate(targets, 1):
        if len(target) > MAX_SCORE_CHARACTERS:
            raise ValueError(
                f"--score={path!r}, line {number}: {len(target)} characters; a target is "
                f"scored whole and may have at most {MAX_SCORE_CHARACTERS}"
            )


def _source_length(item):
    """The characters of a (text, target prefix and/or phrases) tuple's text: batches go
    by the text."""
    return len(item[0])


def _pair_length(pair):
    """The characters of a (source, target) pair: `--score` batches pairs by length."""
    return len(pair[0]) + len(pair[1])


def run():
    """The console entry point of `tfblocks-translate`."""
    run_command("tfblocks-translate", main)


if __name__ == "__main__":
    run()
