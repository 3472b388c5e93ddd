"""The arguments the console commands share: their parser, the model, decoding, sampling
and text options, and the turn from those arguments into a search (`search_options`)."""

import argparse
import os

from tfblocks import _checks
from tfblocks.cli.console import JAPANESE_SPACES
from tfblocks.translation.xla_cache import XLA_MIN_LINES


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
# `--batch-size` when none is given (its default is None, so that a mode that takes none,
# `--interactive`, can tell a given one apart and refuse it).
BATCH_SIZE = 64


def add_decoding_arguments(parser):
    """`--beam-size`, `--alpha`, `--max-length`, `--batch-size` and `--engine`: how a
    loaded model translates (checked by `check_decoding_arguments`). `--alpha` and
    `--batch-size` default to None, so that a mode that has no use for them can tell a
    given value apart from the default and refuse it (`engines.load_translate` takes
    None as t2t's 0.6; `BATCH_SIZE`)."""
    parser.add_argument(
        "--beam-size", type=int, default=None,
        help="1 = greedy; default: the run's, as its export/1 (4 unless its run.json records "
        "another, as an imported model's num_beams)",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=float, default=None,
        help="beam search's length-penalty exponent (default 0.6; CTranslate2's own "
        "length_penalty with --engine ctranslate2); not with greedy search or sampling",
    )  # fmt: skip
    parser.add_argument(
        "--max-length", type=int, default=None,
        help=f"subwords per sentence (2 to {MAX_LENGTH}; default: the run's max_length)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"lines per batch (default {BATCH_SIZE})"
    )
    parser.add_argument(
        "--engine", default="auto", choices=["auto", "tensorflow", "ctranslate2"],
        help="what translates (default auto: a run folder's ctranslate2/ export where "
        "tfblocks-export checked that it translates the run's held-out test as TensorFlow "
        "does with this decoding and no option needs TensorFlow, else tensorflow; the "
        "choice and why in the first line; ctranslate2: a model written by tfblocks-export "
        "ctranslate2, with the ctranslate2 package)",
    )  # fmt: skip
    add_control_arguments(parser)
    parser.add_argument(
        "--xla", default="auto", choices=["auto", "on", "off"],
        help="compile a run folder's or preset's decoding with XLA (default auto: on for "
        f"jobs of more than {XLA_MIN_LINES} lines, off for smaller ones and --interactive, "
        "which then answer sooner); not for a SavedModel (decodes as exported) or "
        "CTranslate2",
    )  # fmt: skip


def add_control_arguments(parser):
    """`--min-length`, `--disallow-unk` and `--max-length-ratio`: what every translation
    must respect (`tfblocks.decoding.Controls`; `decoding_controls.from_arguments`)."""
    group = parser.add_argument_group(
        "controls", "rules every translation keeps, whatever the search (not with --score "
        "or a SavedModel, whose decoding was fixed at export)",
    )  # fmt: skip
    group.add_argument(
        "--min-length", type=int, metavar="N",
        help="no EOS before N subwords (default 0: none; CTranslate2's min_decoding_length)",
    )  # fmt: skip
    group.add_argument(
        "--disallow-unk", action="store_true",
        help="never generate <unk> (default: off; CTranslate2's disable_unk)",
    )  # fmt: skip
    group.add_argument(
        "--no-repeat-ngram-size", type=int, metavar="N",
        help="no n-gram of N subwords twice in a translation (default 0: off; CTranslate2's "
        "no_repeat_ngram_size)",
    )  # fmt: skip
    group.add_argument(
        "--repetition-penalty", type=float, metavar="P",
        help="divide the logit of a subword the translation already holds by P (multiply a "
        "negative one; default 1: off; above 1 discourages repeats; CTranslate2's "
        "repetition_penalty)",
    )  # fmt: skip
    group.add_argument(
        "--max-length-ratio", type=float, metavar="R",
        help="at most R × the source's subwords + 10 subwords a translation (default: none, "
        "only --max-length); not with --engine ctranslate2",
    )  # fmt: skip


def check_control_arguments(parser, args):
    """Refuses (`parser.error`) a negative `--min-length` or `--no-repeat-ngram-size`, and
    a `--max-length-ratio` or `--repetition-penalty` that is not a finite number above 0."""
    for flag in ("--min-length", "--no-repeat-ngram-size"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and value < 0:
            parser.error(f"{flag} must be 0 or more, got {flag}={value}")
    for flag in ("--max-length-ratio", "--repetition-penalty"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and not (_checks.is_finite_real(value) and value > 0):
            parser.error(f"{flag} must be a finite number above 0, got {flag}={value}")


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
    `--max-length` above `MAX_LENGTH` too. (Beam search's `--alpha` and `--stop-early`
    with a beam of 1, greedy search, are refused by `engines.load_translate`, which
    knows a run's own beam size.)"""
    if args.batch_size is not None and args.batch_size <= 0:
        parser.error(f"--batch-size must be a positive integer, got --batch-size={args.batch_size}")
    if args.beam_size is not None and args.beam_size <= 0:
        parser.error(f"--beam-size must be a positive integer, got --beam-size={args.beam_size}")
    if args.max_length is not None and not 2 <= args.max_length <= MAX_LENGTH:
        parser.error(
            f"--max-length must be 2 (one subword and EOS) to {MAX_LENGTH}, got "
            f"--max-length={args.max_length}"
        )
    check_control_arguments(parser, args)


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
    a `--seed` outside int32 or without sampling, and with sampling the options of beam
    search (`--beam-size`, `--alpha`, `--stop-early`, `--constraints`), of scoring
    (`--score`) and of CTranslate2."""
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
        ("--beam-size", args.beam_size),
        ("--alpha", args.alpha),
        ("--stop-early", getattr(args, "stop_early", False) or None),
        ("--score", getattr(args, "score", None)),
        ("--constraints", getattr(args, "constraints", None)),
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
    """`engines.load_translate`'s `search` (`sampling_search`), `replace_unknowns` and
    `controls`."""
    from tfblocks.translation.decoding_controls import from_arguments

    return {
        "search": sampling_search(args), "replace_unknowns": args.replace_unknowns,
        "controls": from_arguments(args),
    }  # fmt: skip


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


def add_target_lang_argument(parser):
    """Adds `--target-lang` to a command's `parser`."""
    parser.add_argument(
        "--target-lang", default=None, metavar="LANG",
        help="the language to translate into, for a model of several directions "
        "(tfblocks-train --pairs; required there): one of its run's languages, a direction "
        "never trained reported as zero-shot; for an imported M2M-100 / NLLB run, any code "
        "of the model (deu_Latn, de; default: the run's)",
    )  # fmt: skip
    parser.add_argument(
        "--source-lang", default=None, metavar="LANG",
        help="the language of the input, for an imported M2M-100 / NLLB run: any code of "
        "the model (eng_Latn, en; default: the run's)",
    )  # fmt: skip


def parse_translation_arguments(parser, argv, japanese_spaces_for):
    """Adds the options every command that translates with a model shares (`--target-lang`,
    `--source-lang`,
    `--japanese-spaces` for the input `japanese_spaces_for` names, `--verbose`,
    `--replace-unknowns`, sampling) to `parser`, parses `argv` and refuses (`parser.error`)
    what those and the decoding options cannot do together; returns the arguments."""
    add_target_lang_argument(parser)
    add_japanese_spaces_argument(parser, japanese_spaces_for)
    add_verbose_argument(parser)
    add_replace_unknowns_argument(parser)
    add_sampling_arguments(parser)
    args = parser.parse_args(argv)
    check_decoding_arguments(parser, args)
    check_sampling_arguments(parser, args)
    check_replace_unknowns_argument(parser, args)
    return args
