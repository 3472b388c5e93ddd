"""Another toolkit's pretrained model as a tfblocks run folder (`tfblocks-import`).

`import_run` reads the folder (`tfblocks.models.import_marian`), writes `run.json` (where
the model came from, its languages when the folder names them, the decoding defaults it
kept, and `beam_size`: the folder's `num_beams`, the run's one beam size), the tokenizers,
`model/` (the preset) and `export/1/` (the strings-in SavedModel, decoding with that beam
size, as `tfblocks-translate` and `tfblocks-evaluate` do without `--beam-size`:
`run_folder.run_beam_size`), and with `ctranslate2=True` also `ctranslate2/`.
"""

import json
import os
import shutil
import sys
import tempfile


def import_run(model_dir, output, ctranslate2=False):
    """Imports the Marian / OPUS-MT folder `model_dir` as the run folder `output` (new or
    empty), with a CTranslate2 model in it when `ctranslate2`; returns its absolute path.

    The folder is written beside `output` and renamed into place when complete: a refused
    or failed import leaves nothing behind.
    """
    given, output = output, os.path.abspath(output)
    if os.path.islink(output):  # checked before the import's minutes of work, as all here
        raise ValueError(
            f"--output={given!r} is a symbolic link; give a new or empty folder (a link is "
            "never replaced)."
        )
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ValueError(f"--output={given!r} exists and is not an empty folder; choose a new one.")
    from tfblocks.models.marian import import_marian

    imported = import_marian(model_dir)
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    # A fresh folder of our own beside `output` (same file system: the rename is atomic);
    # only it is ever removed.
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.importing-", dir=parent)
    staging = os.path.join(scratch, "run")
    try:
        _write(staging, model_dir, imported)
        if ctranslate2:
            from tfblocks.serving.ctranslate2_export import export_ctranslate2
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
        f"imported {model_dir} ({model.num_encoder_layers}+{model.num_decoder_layers} "
        f"layers, d {model.hidden_size}, vocabulary {model.vocab_size}) into {output}",
        file=sys.stderr,
    )
    return output


def _write(folder, source, imported):
    """The run folder's files in `folder` (the staging copy)."""
    from tfblocks._files import write_json
    from tfblocks.models import save_preset
    from tfblocks.serving import Translator
    from tfblocks.translation.run_folder import RUN_FILE, TARGET_TOKENIZER_FILE, TOKENIZER_FILE
    from tfblocks.translation.searches import DEFAULT_BEAM_SIZE, beam_or_greedy

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
        # The run's one beam size: export/1's, and every command's without --beam-size.
        "beam_size": generation.get("num_beams", DEFAULT_BEAM_SIZE),
        "separate_vocab": separate,
    }
    write_json(os.path.join(folder, RUN_FILE), {"format": 1, "settings": settings})
    source_tokenizer.save(os.path.join(folder, TOKENIZER_FILE))
    if separate:
        target_tokenizer.save(os.path.join(folder, TARGET_TOKENIZER_FILE))
    else:
        target_tokenizer = source_tokenizer
    save_preset(model, source_tokenizer, os.path.join(folder, "model"), hp, target_tokenizer)
    search = beam_or_greedy(settings["beam_size"])
    translator = Translator(model, source_tokenizer, target_tokenizer, hp.max_length, search=search)
    translator.export(os.path.join(folder, "export", "1"))


def _languages(source):
    """`(source_lang, target_lang)` from the folder's `tokenizer_config.json`, else None each."""
    try:
        with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None, None
    pair = (config.get("source_lang"), config.get("target_lang"))
    return pair if all(isinstance(lang, str) for lang in pair) else (None, None)
