"""`tfblocks-evaluate`: BLEU, chrF and exact match of a model on a test set, as JSON.

Translates `--src` (one sentence per line) with the model and scores the translations
against `--ref` (the same number of lines) with sacrebleu: corpus BLEU (cased, with the
tokenizer of the target language that the model's run recorded: ja-mecab for ja, zh for
zh, ko-mecab for ko, char for th, lo, km and my, 13a for any other or an unknown one;
--bleu-tokenize chooses another), chrF, and the share of exact matches. Prints one JSON
object to standard output; its bleu_signature names the tokenizer.

Both files are read as `tfblocks-train` reads a corpus: the spaces between the tokens of
pre-tokenized Japanese (small_parallel_enja's test.ja) are removed from a side whose
language the model's run recorded as ja (for a model without recorded languages: from a
file named *.ja), so the scores are those training reported for the same split
(`--japanese-spaces` changes this for --src only).

With `--output HYP` the translations of `--src` are also written to HYP, one per line in
the order of `--src` (an existing file is replaced only with `--overwrite`, never
`--src` or `--ref`), so a score can be looked into or computed again.

`--replace-unknowns` and the sampling options (`--sampling-topk`, `--sampling-topp`,
`--sampling-temperature`, `--seed`) decode as they do in `tfblocks-translate`.

Examples:
  tfblocks-evaluate --model runs/enja --src test.ja --ref test.en
  tfblocks-evaluate --model runs/enja --src test.ja --ref test.en --output test.hyp
  tfblocks-evaluate --model runs/en-ja --src test.en --ref test.ja --bleu-tokenize char
  tfblocks-evaluate --model runs/multi --target-lang en --src test.de --ref test.en
"""

import json
import sys

from tfblocks.cli.arguments import (
    BATCH_SIZE,
    add_decoding_arguments,
    add_model_argument,
    command_parser,
    model_languages,
    parse_translation_arguments,
    search_options,
)
from tfblocks.cli.console import check_paths, one_line, read_input, run_command
from tfblocks.translation.evaluation import (
    BLEU_TOKENIZE_DEFAULTS,
    BLEU_TOKENIZERS,
    choose_bleu_tokenize,
    score,
)
from tfblocks.translation.targets import language_direction, tag_lines, target_language
from tfblocks.translation.xla_cache import run_folder_of, use_run_cache


def parse_args(argv=None):
    parser = command_parser("tfblocks-evaluate", __doc__)
    add_model_argument(parser)
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, help="reference translations, one per line")
    parser.add_argument(
        "--output",
        metavar="HYP",
        help="also write the translations of --src to HYP, one per line, in its order "
        "(default: not written)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --output file"
    )
    parser.add_argument(
        "--bleu-tokenize", choices=BLEU_TOKENIZERS, default=None,
        help="sacrebleu's BLEU tokenizer (default: the target language's, as the model's run "
        f"recorded it: {BLEU_TOKENIZE_DEFAULTS})",
    )  # fmt: skip
    add_decoding_arguments(parser)
    args = parse_translation_arguments(parser, argv, "--src (--ref: auto)")
    if args.output == "-":  # standard output holds the JSON scores
        parser.error("--output - would mix the translations with the scores: name a file")
    if args.overwrite and args.output is None:
        parser.error("--overwrite replaces an existing --output file: give --output HYP")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.output is not None:  # refused before anything is read or loaded
        check_paths(args.src, args.output, args.overwrite, [("--ref", args.ref)], "--src")
    use_run_cache(run_folder_of(args.model), "tfblocks-evaluate")  # its compiled programs
    from tfblocks.translation import engines
    from tfblocks.translation.in_batches import translate_in_batches

    notice = lambda message: print(f"tfblocks-evaluate: {message}", file=sys.stderr)  # noqa: E731
    tag = target_language(args.model, args.target_lang, notice)  # several directions' tag
    source, target = model_languages(args.model) or (None, tag)
    # An imported M2M-100 / NLLB run: the direction its language tokens name.
    tokens = language_direction(args.model, args.source_lang, args.target_lang, notice)
    if tokens is not None:
        tokens, (source, target) = tokens
    # Refused (a missing MeCab) before anything is translated.
    tokenize = choose_bleu_tokenize(target, args.bleu_tokenize, "--bleu-tokenize")
    sources = tag_lines(read_input(args.src, args.japanese_spaces, language=source), tag)
    # Joined as training joined its targets; --japanese-spaces is not for --ref.
    references = read_input(args.ref, "auto", advise=False, language=target)
    if len(sources) != len(references):
        raise ValueError(
            f"--src and --ref must have the same number of lines, got {len(sources)} "
            f"({args.src}) and {len(references)} ({args.ref})."
        )
    if not sources:  # BLEU of no sentence is not a score: an error, not a made-up 0
        raise ValueError(
            f"--src={args.src!r} and --ref={args.ref!r} have no lines: nothing to score."
        )
    translate, what = engines.load_translate(
        args.model, args.beam_size, args.alpha, args.max_length, args.engine,
        notice=notice, language_tokens=tokens, xla=args.xla, lines=len(sources),
        **search_options(args),
    )  # fmt: skip
    print(f"evaluating {what} on {len(sources)} sentences", file=sys.stderr)
    hypotheses = translate_in_batches(translate, sources, args.batch_size or BATCH_SIZE)
    if args.output is not None:
        from tfblocks._files import write_text

        write_text(args.output, "".join(one_line(text) + "\n" for text in hypotheses))
    scores = score(hypotheses, references, tokenize=tokenize)
    print(json.dumps(scores, ensure_ascii=False))
    return scores


def run():
    """The console entry point of `tfblocks-evaluate`."""
    run_command("tfblocks-evaluate", main, errors=(ImportError,))  # MeCab not installed


if __name__ == "__main__":
    run()
