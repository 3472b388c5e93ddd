"""`tfblocks-import`: a pretrained model of another toolkit as a tfblocks run folder.

    tfblocks-import marian opus-mt-de-en --output runs/de-en
    tfblocks-translate --model runs/de-en < input.de

`marian DIR` reads a Hugging Face Marian / OPUS-MT folder, or one in Marian's own format
(`model.npz` + `vocab.yml` or SentencePiece files; `tfblocks.models.import_marian`), and
writes a run folder like the one `tfblocks-train` leaves: `run.json` (where the model came
from, its languages when the folder names them, the decoding defaults it kept),
`tokenizer.model` (and `target_tokenizer.model` when the sides' SentencePiece models
differ), `model/` (the preset: `tfblocks-translate`, `tfblocks-evaluate` and
`tfblocks-train --init-from` read it) and `export/1/` (the strings-in SavedModel,
decoding with the folder's `num_beams`); with `--ctranslate2`, also `ctranslate2/`
(`export_ctranslate2`, float32: `tfblocks-translate --model RUN --engine ctranslate2`
reads it). The folder is written beside `--output` and
renamed into place when complete: a refused or failed import leaves nothing behind.
"""

import argparse
import os

from tfblocks.cli.arguments import add_verbose_argument
from tfblocks.cli.console import run_command

FORMATS = ("marian", "m2m100", "nllb")  # as tfblocks.translation.importing.FORMATS


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfblocks-import",
        description="Import a pretrained translation model into a tfblocks run folder.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "format",
        choices=FORMATS,
        help="marian: a Hugging Face Marian / OPUS-MT folder, or Marian's model.npz folder; "
        "m2m100 / nllb: a Hugging Face M2M-100 / NLLB-200 folder (with --source-lang and "
        "--target-lang)",
    )
    parser.add_argument("model_dir", metavar="DIR", help="the folder to import")
    parser.add_argument("--output", required=True, help="the run folder to write (new or empty)")
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="also write RUN/ctranslate2/, a CTranslate2 model (pip install tfblocks[ctranslate2])",
    )
    for side in ("source", "target"):
        parser.add_argument(
            f"--{side}-lang",
            metavar="CODE",
            help=f"m2m100 / nllb: the run's {side} language, a code of the model (de or "
            "__de__; deu_Latn); the run translates in this direction (no default: required "
            "there; not for marian, whose folder names its languages)",
        )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    args.model_dir = os.path.expanduser(args.model_dir)
    args.output = os.path.expanduser(args.output)
    return args


def main(argv=None):
    from tfblocks.translation.importing import import_run

    args = parse_args(argv)
    return import_run(
        args.model_dir, args.output, ctranslate2=args.ctranslate2, kind=args.format,
        source_lang=args.source_lang, target_lang=args.target_lang,
    )  # fmt: skip


def run():
    """The `tfblocks-import` console script."""
    run_command("tfblocks-import", main)


if __name__ == "__main__":
    run()
