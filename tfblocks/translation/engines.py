"""One home for "translate (or score) these lines with the model at PATH", shared by the CLIs.

PATH may be a run folder (its `model/` preset), a preset directory (`config.json`),
a SavedModel (`saved_model.pb`, or a folder whose `export/1` holds one), or, with
`engine="ctranslate2"`, a CTranslate2 model directory (`model.bin`).

A model must be trusted: a SavedModel runs its own graph, which can read and write any
file the user can. A preset is read with Keras' safe mode (its config names registered
classes; no code is loaded), so it is preferred whenever PATH holds one, and loading a
SavedModel is said on standard error.
"""

import os
import sys


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


def _say(message):
    print(message, file=sys.stderr)


def load_translate(
    path,
    beam_size=None,
    alpha=0.6,
    max_length=None,
    engine="tensorflow",
    notice=_say,
    n_best=None,
    stop_early=False,
):
    """Returns `(translate, description)`: `translate(list[str]) -> list[str]`, or with
    `n_best=K`, `translate(list[str]) -> list[list[Hypothesis]]` (K per line, best first).

    A run folder or preset is preferred to its SavedModel (its beam size can be set, and
    Keras' safe mode loads it); a SavedModel translates with the beam it was exported
    with (`beam_size` must then be None, and `stop_early` False), and `notice(message)`
    is called first with a line saying that it runs its own graph; for `n_best` it needs
    an `n_best` signature of at least K. Raises ValueError naming `path` when nothing
    there can translate, and naming `--n-best` when K is more than the beam keeps.
    """
    if n_best is not None and (isinstance(n_best, bool) or not n_best >= 1):
        raise ValueError(f"`--n-best` must be a positive integer, got --n-best={n_best!r}.")
    kind, found = _find(path, max_length, engine)
    beam, count = beam_size or 4, n_best or 1
    if kind != "saved" and count > beam:
        raise ValueError(
            f"`--n-best` must be at most the beam size {beam}, got --n-best={n_best}; "
            f"give --beam-size {n_best} or more."
        )
    if kind == "ctranslate2":
        from tfblocks.serving import ctranslate2 as ct2  # the optional extra

        translator = ct2.CTranslate2Translator(
            found, beam_size=beam, length_penalty=alpha, num_hypotheses=count
        )
        what = f"CTranslate2 model {found} (beam {beam})"
        return (translator if n_best is None else translator.n_best), what
    if kind == "preset":
        from tfblocks.decoding import beam_or_greedy

        strategy = beam_or_greedy(beam, alpha, stop_early)
        translator, length = _preset_translator(found, max_length, strategy, count)
        what = f"model {found} (beam {beam}, max_length {length})"
        if n_best is not None:
            return translator.n_best, what
        return _strings(translator), what
    if beam_size is not None or max_length is not None or stop_early:
        raise ValueError(
            f"--model={path!r} is a SavedModel: its beam size, stopping rule and max_length "
            "were fixed at export; drop --beam-size/--stop-early/--max-length or give the "
            "run folder."
        )
    if n_best is None:
        serve = _signature(found, path, "serving_default", "translation", notice)

        def translate(lines):
            return _decoded(serve(text=_strings_in(lines))["translation"])

        return translate, f"SavedModel {found}"
    serve = _signature(
        found, path, "n_best", "translations", notice, "Translator(num_hypotheses=K)'s export"
    )
    exported = serve.structured_outputs["translations"].shape[1]
    if exported is not None and n_best > exported:
        raise ValueError(
            f"`--n-best` must be at most the {exported} hypotheses the SavedModel {found} "
            f"returns, got --n-best={n_best}."
        )

    def translate_n_best(lines):
        from tfblocks.serving import Hypothesis

        out = serve(text=_strings_in(lines))
        texts = out["translations"].numpy()[:, :n_best]
        scores = out["scores"].numpy()[:, :n_best]
        return [
            [Hypothesis(t.decode("utf-8"), float(v)) for t, v in zip(*row, strict=True)]
            for row in zip(texts, scores, strict=True)
        ]

    return translate_n_best, f"SavedModel {found} (n_best)"


def load_score(path, max_length=None, engine="tensorflow", notice=_say):
    """Returns `(score, description)`: `score(list[(source, target)]) -> list[float]`,
    each target's log-probability given its source (`Translator.score`,
    `CTranslate2Translator.score`, or a SavedModel's `score` signature)."""
    kind, found = _find(path, max_length, engine)
    if kind == "ctranslate2":
        from tfblocks.serving import ctranslate2 as ct2  # the optional extra

        scorer = ct2.CTranslate2Translator(found).score
        what = f"CTranslate2 model {found}"
    elif kind == "preset":
        translator, length = _preset_translator(found, max_length)
        scorer = translator.score
        what = f"model {found} (max_length {length})"
    else:
        if max_length is not None:
            raise ValueError(
                f"--model={path!r} is a SavedModel: its max_length was fixed at export; "
                "drop --max-length or give the run folder."
            )
        serve = _signature(found, path, "score", "score", notice, "a newer tfblocks")

        def scorer(sources, targets):
            return serve(source=_strings_in(sources), target=_strings_in(targets))["score"].numpy()

        what = f"SavedModel {found}"

    def score(pairs):
        if not pairs:
            return []
        sources, targets = zip(*pairs, strict=True)
        return [float(v) for v in scorer(list(sources), list(targets))]

    return score, what


def _find(path, max_length, engine):
    """`(kind, folder)` of the model at `path`: `("ctranslate2" | "preset" | "saved", ...)`."""
    path = os.fspath(path)
    if max_length is not None and (isinstance(max_length, bool) or max_length < 2):
        raise ValueError(f"`--max-length` must be at least 2, got --max-length={max_length!r}.")
    if not os.path.isdir(path):
        raise ValueError(f"`--model` must be a directory, got --model={path!r}.")
    if engine == "ctranslate2":
        if max_length is not None:
            raise ValueError("--max-length is fixed in a CTranslate2 model; drop it.")
        return "ctranslate2", path
    if engine != "tensorflow":
        raise ValueError(f"`--engine` must be tensorflow or ctranslate2, got --engine={engine!r}.")
    import tensorflow_text  # noqa: F401  (SentencePiece ops of a SavedModel)

    preset = _preset_dir(path)
    if preset is not None:
        return "preset", preset
    saved = _saved_model_dir(path)
    if saved is not None:
        return "saved", saved
    raise ValueError(
        f"--model={path!r} holds no tfblocks model: expected a run folder (model/), a "
        "preset (config.json) or a SavedModel (saved_model.pb)."
    )


def _preset_translator(preset, max_length, strategy=None, num_hypotheses=1):
    """`(Translator, max_length)` of the preset at `preset` (its run's `max_length`
    unless `max_length` is given)."""
    from tfblocks.models import load_preset, load_target_tokenizer
    from tfblocks.serving import Translator

    model, tokenizer, hp = load_preset(preset)
    target_tokenizer = load_target_tokenizer(preset) or tokenizer  # separate vocabularies
    default = hp.max_length if hp is not None else 256
    length = default if max_length is None else max_length
    translator = Translator(
        model, tokenizer, target_tokenizer, length, strategy=strategy,
        num_hypotheses=num_hypotheses,
    )  # fmt: skip
    return translator, length


def _signature(saved, path, name, output, notice, made_by="a tfblocks.Translator export"):
    """The SavedModel `saved`'s signature `name` (with the output `output`), after
    `notice` said that the SavedModel runs its own graph; a ValueError when it has none."""
    import tensorflow as tf

    notice(f"loading the SavedModel {saved} (it runs its own graph: use only models you trust)")
    serve = tf.saved_model.load(saved).signatures.get(name)
    if serve is None or output not in serve.structured_outputs:
        raise ValueError(
            f"--model={path!r}: the SavedModel {saved} has no `{name}` signature with a "
            f"`{output}` output ({made_by} has one)."
        )
    return serve


def _strings_in(lines):
    import tensorflow as tf

    return tf.constant(list(lines), tf.string)


def _decoded(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def _strings(translator):
    """`translate(list[str]) -> list[str]` of a `Translator`."""
    return lambda lines: _decoded(translator(lines))
