"""One home for "translate these lines with the model at PATH", shared by the CLIs.

PATH may be a run folder (its `model/` preset), a preset directory (`config.json`),
a SavedModel (`saved_model.pb`, or a folder whose `export/1` holds one), or, with
`engine="ctranslate2"`, a CTranslate2 model directory (`model.bin`).
"""

import os


def _saved_model_dir(path):
    for candidate in (path, os.path.join(path, "export", "1")):
        if os.path.isfile(os.path.join(candidate, "saved_model.pb")):
            return candidate
    return None


def _preset_dir(path):
    for candidate in (os.path.join(path, "model"), path):
        if os.path.isfile(os.path.join(candidate, "config.json")):
            return candidate
    return None


def load_translate(path, beam_size=None, alpha=0.6, max_length=None, engine="tensorflow"):
    """Returns `(translate, description)`: `translate(list[str]) -> list[str]`.

    A run folder or preset is preferred to its SavedModel (its beam size can be set);
    a SavedModel translates with the beam it was exported with (`beam_size` must then be
    None). Raises ValueError naming `path` when nothing there can translate.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"`--model` must be a directory, got --model={path!r}.")
    if engine == "ctranslate2":
        from tfblocks.serving import ctranslate2 as ct2  # the optional extra

        if max_length is not None:
            raise ValueError("--max-length is fixed in a CTranslate2 model; drop it.")
        translator = ct2.CTranslate2Translator(path, beam_size=beam_size or 4)
        return translator, f"CTranslate2 model {path} (beam {beam_size or 4})"
    if engine != "tensorflow":
        raise ValueError(f"`--engine` must be tensorflow or ctranslate2, got --engine={engine!r}.")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (SentencePiece ops of a SavedModel)

    preset = _preset_dir(path)
    if preset is not None:
        from tfblocks.decoding import beam_or_greedy
        from tfblocks.models import load_preset
        from tfblocks.serving import Translator

        model, tokenizer, hp = load_preset(preset)
        length = max_length or (hp.max_length if hp is not None else 256)
        beam = beam_size or 4
        strategy = beam_or_greedy(beam, alpha)
        translator = Translator(model, tokenizer, tokenizer, length, strategy=strategy)

        def translate(lines):
            return [t.decode("utf-8") for t in translator(lines).numpy()]

        return translate, f"model {preset} (beam {beam}, max_length {length})"
    saved = _saved_model_dir(path)
    if saved is not None:
        if beam_size is not None or max_length is not None:
            raise ValueError(
                f"--model={path!r} is a SavedModel: its beam size and max_length were fixed "
                "at export; drop --beam-size/--max-length or give the run folder."
            )
        serve = tf.saved_model.load(saved).signatures["serving_default"]

        def translate(lines):
            out = serve(text=tf.constant(lines, tf.string))["translation"]
            return [t.decode("utf-8") for t in out.numpy()]

        return translate, f"SavedModel {saved}"
    raise ValueError(
        f"--model={path!r} holds no tfblocks model: expected a run folder (model/), a "
        "preset (config.json) or a SavedModel (saved_model.pb)."
    )
