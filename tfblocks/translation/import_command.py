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
import shutil
import sys
import tempfile

from tfblocks.translation.console import add_verbose_argument, run_command

FORMATS = ("marian",)


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
        help="marian: a Hugging Face Marian / OPUS-MT folder, or Marian's model.npz folder",
    )
    parser.add_argument("model_dir", metavar="DIR", help="the folder to import")
    parser.add_argument("--output", required=True, help="the run folder to write (new or empty)")
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="also write RUN/ctranslate2/, a CTranslate2 model (pip install tfblocks[ctranslate2])",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    args.model_dir = os.path.expanduser(args.model_dir)
    args.output = os.path.expanduser(args.output)
    return args


def main(argv=None):
    args = parse_args(argv)
    output = os.path.abspath(args.output)
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ValueError(
            f"--output={args.output!r} exists and is not an empty folder; choose a new one."
        )
    from tfblocks.models.marian import import_marian

    imported = import_marian(args.model_dir)
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    # A fresh folder of our own beside `output` (same file system: the rename is atomic);
    # only it is ever removed.
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.importing-", dir=parent)
    staging = os.path.join(scratch, "run")
    try:
        _write(staging, args.model_dir, imported)
        if args.ctranslate2:
            from tfblocks.serving.ctranslate2 import export_ctranslate2
            from tfblocks.translation.run_folder import CTRANSLATE2_DIR

            export_ctranslate2(
                imported.model,
                imported.source_tokenizer,
                os.path.join(staging, CTRANSLATE2_DIR),
                target_tokenizer=imported.target_tokenizer,
            )
        if os.path.isdir(output):
            os.rmdir(output)  # empty, checked above
        os.rename(staging, output)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    model = imported.model
    print(
        f"imported {args.model_dir} ({model.num_encoder_layers}+{model.num_decoder_layers} "
        f"layers, d {model.hidden_size}, vocabulary {model.vocab_size}) into {output}",
        file=sys.stderr,
    )
    return output


def _write(folder, source, imported):
    """The run folder's files in `folder` (the staging copy)."""
    from tfblocks._files import write_json
    from tfblocks.models import save_preset
    from tfblocks.serving import Translator
    from tfblocks.translation.console import beam_or_greedy
    from tfblocks.translation.run_folder import RUN_FILE, TARGET_TOKENIZER_FILE, TOKENIZER_FILE

    os.makedirs(folder)
    model, source_tokenizer, target_tokenizer, hp, generation = imported
    separate = target_tokenizer.proto != source_tokenizer.proto
    languages = _languages(source)
    settings = {
        "imported_from": os.path.abspath(source),
        "import_format": "marian",
        "source_lang": languages[0],
        "target_lang": languages[1],
        "generation": generation,
        "separate_vocab": separate,
    }
    write_json(os.path.join(folder, RUN_FILE), {"format": 1, "settings": settings})
    source_tokenizer.save(os.path.join(folder, TOKENIZER_FILE))
    if separate:
        target_tokenizer.save(os.path.join(folder, TARGET_TOKENIZER_FILE))
    else:
        target_tokenizer = source_tokenizer
    save_preset(model, source_tokenizer, os.path.join(folder, "model"), hp, target_tokenizer)
    search = beam_or_greedy(generation.get("num_beams", 4))
    translator = Translator(model, source_tokenizer, target_tokenizer, hp.max_length, search=search)
    translator.export(os.path.join(folder, "export", "1"))


def _languages(source):
    """`(source_lang, target_lang)` from the folder's `tokenizer_config.json`, else None each."""
    import json

    try:
        with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None, None
    pair = (config.get("source_lang"), config.get("target_lang"))
    return pair if all(isinstance(lang, str) for lang in pair) else (None, None)


def run():
    """The `tfblocks-import` console script."""
    run_command("tfblocks-import", main)


if __name__ == "__main__":
    run()
