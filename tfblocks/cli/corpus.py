"""`tfblocks-train`'s corpus options: the language pair and where its files are.

`--source-lang` / `--target-lang` name the pair; `--corpus-dir` holds
`{train,dev,test}.{SOURCE,TARGET}` (plain, `.gz` or shards); `--train-source` ...
`--test-target` give a split's files (lists, globs); `--tsv` with `--source-column` /
`--target-column` (or a header line naming the languages) holds the whole corpus.
`check_corpus_arguments` refuses what cannot work before the corpus is read (of a TSV,
only its first line); `corpus_source` turns the arguments into the library's
`tfblocks.translation.corpus_source.CorpusSource`, which reads them.
"""

import argparse
import os

from tfblocks import _checks
from tfblocks.text.corpus import SPLITS, TsvArguments, check_language
from tfblocks.translation.corpus_source import GZIP_RATIO, STREAM_AUTO_BYTES, CorpusSource

# How errors about `--tsv`'s columns name the flags (`choose_tsv_columns`).
TSV_FLAGS = TsvArguments(
    "--tsv", "--source-column", "--target-column", "--source-column {} --target-column {}"
)


def add_corpus_arguments(parser):
    """Adds the corpus options (a group) to `tfblocks-train`'s `parser`."""
    data = parser.add_argument_group(
        "corpus",
        "Line-aligned files of the pair --source-lang -> --target-lang, or a TSV file;\n"
        "none: the embedded ja->en phrasebook. Each file may be gzipped (NAME.gz) or split\n"
        "into shards (NAME-00000-of-00008, ...). Pre-tokenized Japanese is joined (the\n"
        "spaces between its tokens removed) only on a side whose language is ja.",
    )
    data.add_argument("--source-lang", default="ja", help="source language (default ja)")
    data.add_argument("--target-lang", default="en", help="target language (default en)")
    data.add_argument(
        "--corpus-dir",
        help="folder with {train,dev,test}.{SOURCE,TARGET}, named by the languages "
        "(default: none; with no corpus option at all, the embedded ja->en phrasebook)",
    )
    for split in SPLITS:
        for side in ("source", "target"):
            data.add_argument(
                f"--{split}-{side}", metavar="FILES",
                help=f"the {split} split's {side} files: paths or globs, comma-separated, "
                f"read in order (default: --corpus-dir's {split}.*)",
            )  # fmt: skip
    data.add_argument(
        "--tsv",
        help="tab-separated pairs, 2 %% held out for dev and test (written into the run "
        "folder's heldout/); the columns are --source-column/--target-column, or those a "
        "header line names (its cells include the two language codes, e.g. de<TAB>en); "
        "rows are read as they are (default: none)",
    )
    data.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stream the train split from its files each epoch instead of holding it in "
        "memory (a corpus of any size: a bounded shuffle buffer, the tokenizer sampled, "
        "the folder's corpus identity from the files' sizes, first and last MiB); "
        f"default: streamed when its files hold more than {STREAM_AUTO_BYTES >> 20} MiB "
        f"(gzipped ones counted x{GZIP_RATIO})",
    )
    data.add_argument(
        "--source-column", type=int, default=None, metavar="N",
        help="--tsv column (0-based) of the source sentences (default: its header's)",
    )  # fmt: skip
    data.add_argument(
        "--target-column", type=int, default=None, metavar="M",
        help="--tsv column (0-based) of the target sentences (default: its header's)",
    )  # fmt: skip


# The flags of explicit files (`~` is expanded; a list's items by `expand_paths`).
FILE_FLAGS = tuple(f"{split}_{side}" for split in SPLITS for side in ("source", "target"))


def flag_name(name):
    """`--train-source` of the attribute `train_source`."""
    return f"--{name.replace('_', '-')}"


def check_corpus_arguments(args):
    """Refuses a corpus that the options cannot describe: languages, files, TSV columns."""
    check_language("--source-lang", args.source_lang)
    check_language("--target-lang", args.target_lang)
    if args.source_lang == args.target_lang:
        raise ValueError(
            "`--source-lang` and `--target-lang` must differ, got "
            f"--source-lang={args.source_lang!r} and --target-lang={args.target_lang!r}."
        )
    if args.stream is True and (args.tsv or not (args.corpus_dir or args.train_source)):
        raise ValueError(
            "`--stream` streams line-aligned train files: give --corpus-dir or "
            "--train-source/--train-target, not "
            + (f"--tsv={args.tsv!r}." if args.tsv else "the phrasebook (no corpus given).")
        )
    for split in SPLITS:
        given = [getattr(args, f"{split}_{side}") is not None for side in ("source", "target")]
        if given[0] != given[1]:
            missing = flag_name(f"{split}_{'target' if given[0] else 'source'}")
            present = flag_name(f"{split}_{'source' if given[0] else 'target'}")
            raise ValueError(
                f"`{present}` needs `{missing}` (both sides of the {split} split), got "
                f"{present}={getattr(args, present[2:].replace('-', '_'))!r} without {missing}."
            )
    check_corpus_languages(args)
    files = [flag for flag in FILE_FLAGS if getattr(args, flag) is not None]
    if not files and args.corpus_dir is None and args.tsv is None:
        languages = (args.source_lang, args.target_lang)
        if languages != ("ja", "en"):
            raise ValueError(
                "the embedded phrasebook is ja->en: give a corpus (--corpus-dir, --train-source "
                f"..., --tsv) for --source-lang={languages[0]!r} --target-lang={languages[1]!r}."
            )
    if args.tsv is not None and (files or args.corpus_dir is not None):
        other = flag_name(files[0]) if files else "--corpus-dir"
        raise ValueError(
            f"`--tsv` holds the whole corpus: give either --tsv or line-aligned files, got "
            f"--tsv={args.tsv!r} and {other}."
        )
    if files and args.corpus_dir is None:
        lacking = [s for s in SPLITS if getattr(args, f"{s}_source") is None]
        if lacking:
            raise ValueError(
                f"the {lacking[0]} split has no files: give --{lacking[0]}-source and "
                f"--{lacking[0]}-target, or --corpus-dir, got {flag_name(files[0])}="
                f"{getattr(args, files[0])!r} alone."
            )
    for flag in ("source_column", "target_column"):
        value = getattr(args, flag)
        if value is not None:
            if args.tsv is None:
                name = flag_name(flag)
                raise ValueError(f"`{name}` is a --tsv column, got {name}={value} without --tsv.")
            _checks.check_non_negative_int(flag_name(flag), value)
    if args.tsv is not None:
        tsv_columns(args)


def check_corpus_languages(args):
    """Refuses a `--corpus-dir` that holds no train file of a language of the pair (what
    a forgotten `--source-lang de` looks like: no `train.ja`), naming `--source-lang` /
    `--target-lang` and the languages its train files are of. A folder that cannot be
    listed is left to the reading, which names it."""
    if args.corpus_dir is None or args.tsv is not None or args.train_source is not None:
        return
    from tfblocks.text.lines import file_language

    try:
        names = os.listdir(args.corpus_dir)
    except OSError:
        return
    found = sorted({file_language(n) for n in names if n.startswith("train.")} - {None})
    pair = (("--source-lang", args.source_lang), ("--target-lang", args.target_lang))
    missing = [f"train.{language} ({flag}={language!r})" for flag, language in pair
               if language not in found]  # fmt: skip
    if missing:
        has = f"train files of {', '.join(found)}" if found else "no train.* file"
        raise ValueError(
            f"--corpus-dir={args.corpus_dir!r} has no {' or '.join(missing)}: it has {has}; "
            "name the pair with --source-lang and --target-lang (default ja and en)."
        )


def tsv_columns(args):
    """`(source, target)` columns of `--tsv`: the given ones, else those its header line
    names, by `load_splits`' rule (`choose_tsv_columns`), which refuses missing or equal
    columns naming the flags. A file that cannot be read has no header here; reading the
    corpus names what is wrong with it."""
    from tfblocks.text.corpus import choose_tsv_columns, tsv_header_columns

    given = (args.source_column, args.target_column)
    header = None
    if None in given:
        try:
            header = tsv_header_columns(args.tsv, args.source_lang, args.target_lang)
        except (OSError, ValueError):
            header = None
    return choose_tsv_columns(
        args.tsv, args.source_lang, args.target_lang, given, header, names=TSV_FLAGS
    )


def check_pairs_arguments(args):
    """Refuses what `--pairs` (several directions, each in its folder of `--corpus-dir`)
    cannot be combined with, naming the flags; returns the directions."""
    from tfblocks.text.multilingual import parse_pairs

    if args.pairs is None:
        if args.pair_temperature is not None:
            raise ValueError(
                "`--pair-temperature` mixes the directions of --pairs, got "
                f"--pair-temperature={args.pair_temperature} without --pairs."
            )
        return None
    directions = parse_pairs(args.pairs, "--pairs")
    if args.pair_temperature is not None:
        _checks.check_positive_float("--pair-temperature", args.pair_temperature)
    if args.corpus_dir is None:
        raise ValueError(
            f"`--pairs` reads each direction from its folder of --corpus-dir (de-en/"
            f"train.de, ...), got --pairs={args.pairs!r} without --corpus-dir."
        )
    given = [flag_name(f) for f in FILE_FLAGS if getattr(args, f) is not None]
    given += [name for name, value in (("--tsv", args.tsv), ("--stream", args.stream),
                                       ("--separate-vocab", args.separate_vocab),
                                       ("--init-from", args.init_from)) if value]  # fmt: skip
    if given:
        raise ValueError(
            f"`--pairs` trains one model on the folders of --corpus-dir with one shared "
            f"vocabulary, not with {given[0]}, got --pairs={args.pairs!r} with {given[0]}."
        )
    return directions


def corpus_source(args):
    """The `CorpusSource` of the (checked) corpus arguments: made once, before the corpus
    is read."""
    files = {
        split: (getattr(args, f"{split}_source"), getattr(args, f"{split}_target"))
        for split in SPLITS
        if getattr(args, f"{split}_source") is not None
    }
    directions = check_pairs_arguments(args)
    return CorpusSource(
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        corpus_dir=args.corpus_dir,
        files=files,
        tsv=args.tsv,
        tsv_columns=tsv_columns(args) if args.tsv and directions is None else None,
        stream=args.stream,
        seed=args.seed,
        limit_train=args.limit_train,
        limit_test=args.limit_test,
        directions=directions,
        pair_temperature=args.pair_temperature,
    )
