"""One home for "translate (or score) these lines with the model at PATH", shared by the CLIs.

PATH may be a run folder (its `model/` preset), a preset directory (`config.json`),
a SavedModel (`saved_model.pb`, or a folder whose `export/1` holds one), or, with
`engine="ctranslate2"`, a CTranslate2 model directory (`model.bin`) or a run folder
holding one in `ctranslate2/` (`tfblocks-import --ctranslate2`). A list of several
run folders or presets is their `tfblocks.Ensemble` (one tokenizer, byte for byte);
CTranslate2 has no ensembles.

A model must be trusted: a SavedModel runs its own graph, which can read and write any
file the user can. A preset is read with Keras' safe mode (its config names registered
classes; no code is loaded), so it is preferred whenever PATH holds one, and loading a
SavedModel is said on standard error.
"""

import os
import sys

from tfblocks.translation.decoding_controls import as_controls, control_flags, described
from tfblocks.translation.run_folder import (
    CTRANSLATE2_DIR,
    run_beam_size,
    run_language_tokens,
    run_pairs,
)
from tfblocks.translation.saved_engine import (
    aligned,
    check_saved_options,
    decoded,
    saved_translate,
    signature,
    strings_in,
    with_inputs,
)
from tfblocks.translation.searches import ALPHA
from tfblocks.translation.xla_cache import use_xla


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


# How the commands name the options that sample (`--sampling-*`).
SAMPLING_FLAGS = "sampling (--sampling-topk, --sampling-topp or --sampling-temperature)"


def load_translate(
    path,
    beam_size=None,
    alpha=None,
    max_length=None,
    engine="tensorflow",
    notice=_say,
    n_best=None,
    stop_early=False,
    prefix=False,
    alignments=False,
    search=None,
    replace_unknowns=False,
    constraints=False,
    language_tokens=None,
    loaded=None,
    xla=None,
    lines=None,
    controls=None,
):
    """Returns `(translate, description)`: `translate(list[str]) -> list[str]`, or with
    `n_best=K`, `translate(list[str]) -> list[list[Hypothesis]]` (K per line, best first),
    or with `alignments`, `translate(list[str]) -> list[(translation, alignment)]` (the
    word alignment in Pharaoh format, `Translator.align`; a SavedModel's `align`
    signature). With `prefix`, `translate` takes `(text, target_prefix)` pairs instead of
    texts: each translation starts with its prefix ("" forces nothing); with
    `constraints`, `(text, phrases)` pairs (phrases: a list of str each translation holds,
    `Translator(..., constraints=...)`); with both, `(text, target_prefix, phrases)`.

    `alpha` is beam search's length-penalty exponent (None: `ALPHA`; CTranslate2's
    `length_penalty`). A run folder or preset is preferred to its SavedModel (its beam
    size can be set, and Keras' safe mode loads it); a SavedModel translates with the
    beam it was exported with (`beam_size` and `alpha` must then be None, and `stop_early`
    False), and `notice(message)` is called first with a line saying that it runs its own
    graph; for `n_best` it needs
    an `n_best` signature of at least K (`prefix`: its `prefix` signature; `alignments`:
    its `align` signature; `constraints`: its `constrained` signature, without `prefix`).
    Raises ValueError naming `path` when nothing there can translate, naming `--n-best`
    when K is more than the beam keeps, and for `constraints` with CTranslate2 (it has
    none), with sampling or with `replace_unknowns`.

    Without `beam_size`, a run folder's model (its preset or CTranslate2 export) decodes
    with the run's beam size, as its export/1 does (`run_folder.run_beam_size`: 4 unless
    its run.json records another, such as an imported model's `num_beams`).

    `search`, a `tfblocks.decoding.Sampling` (`console.sampling_search`), decodes instead
    of the beam (`n_best` K: K samples), and `replace_unknowns` replaces each `<unk>` of
    a translation by the source word it is aligned to (`Translator`'s
    `replace_unknowns`): both only for a run folder or preset.

    `language_tokens` (`targets.language_direction`'s): an M2M-100 / NLLB run folder or
    preset translates in that direction instead of its own (its SavedModel: only its own).

    `loaded`, a dict the caller keeps (`{}` at first), keeps what is loaded (a preset's
    model and tokenizers, a SavedModel, a CTranslate2 model) by its folder for the next
    call given it: the translators of several options share one copy of the weights.

    `xla` (`--xla`: "on", "off" or "auto"; None: "on" where it applies): a run folder's
    or preset's decoding compiled with XLA or run as one TensorFlow graph for every shape
    (answers first on small jobs); "auto" chooses by the job's `lines` (`use_xla`). A
    SavedModel (it decodes as exported) and CTranslate2 refuse "on" and "off".

    `controls`, a `tfblocks.decoding.Controls` (`--min-length`, `--disallow-unk`,
    `--max-length-ratio`, `--no-repeat-ngram-size`, `--repetition-penalty`): a run
    folder's or preset's `Translator` applies them; CTranslate2 its own options of the
    same meaning and refuses `max_length_ratio`; a SavedModel refuses them.

    `engine` "auto" (`--engine auto`): a run folder's CTranslate2 export where its check
    against TensorFlow found the same translations for this decoding and no option needs
    TensorFlow, TensorFlow otherwise (`engine_choice.choose_engine`); the description
    ends with the choice and its reason.
    """
    if engine == "auto":  # one of the two, then said in the description
        return _auto_translate(dict(locals()))
    _check_options(n_best, alignments, constraints, search, replace_unknowns)
    kind, found = _find(path, max_length, engine)
    _check_preset_only(path, kind, search, replace_unknowns, xla)
    _check_direction(path, kind, found, language_tokens)
    # Without `beam_size`: the run's one beam size (its export/1's; an ensemble: the first's).
    beam = beam_size or run_beam_size(found[0] if isinstance(found, list) else found)
    count = n_best or 1
    _check_greedy_options(path, kind, beam, search, constraints, alpha, stop_early)
    if kind != "saved" and search is None and count > beam:
        raise ValueError(
            f"`--n-best` must be at most the beam size {beam}, got --n-best={n_best}; "
            f"give --beam-size {n_best} or more."
        )
    if kind == "ctranslate2" and constraints:
        from tfblocks.serving.ctranslate2 import NO_CONSTRAINTS  # needs no ctranslate2

        raise ValueError(f"--constraints: {NO_CONSTRAINTS}")
    if kind in ("ctranslate2", "preset"):
        alpha = ALPHA if alpha is None else alpha
        if kind == "ctranslate2":
            translator = _ct2_translator(found, beam, alpha, count, loaded, controls)
            what = f"CTranslate2 model {found} (beam {beam}{described(controls)})"
        else:
            search = _search(beam, alpha, stop_early, search, constraints)
            jit_compile = xla is None or use_xla(xla, lines)
            args = (found, max_length, search[0], count, language_tokens, loaded, jit_compile)
            translator, length = _preset_translator(*args, controls=controls)
            compiled = "" if jit_compile else ", no XLA"
            what = f"{_described(found)} ({search[1]}, max_length {length}{compiled}"
            what += f"{described(controls)})"
        translate = translator.n_best if n_best is not None else _strings(translator)
        if replace_unknowns:
            translate = _replacing(translator, n_best is not None)
        if alignments:
            translate = aligned(translate, translator.align)
        return with_inputs(translate, prefix, constraints), what
    check_saved_options(path, beam_size, alpha, stop_early, max_length, prefix, constraints,
                        controls)  # fmt: skip
    options = (n_best, prefix, alignments, constraints)
    return saved_translate(found, path, notice, *options, loaded=loaded)


def _auto_translate(arguments):
    """`load_translate(**arguments)` with `engine="auto"`: with the engine
    `engine_choice.choose_engine` picks (TensorFlow for any option the check did not
    cover, and for a run of several directions: its tags), the choice and its reason
    at the end of the description."""
    from tfblocks.translation.engine_choice import choose_engine

    a = arguments
    given = {
        "--max-length": a["max_length"], "--n-best": a["n_best"], "--stop-early": a["stop_early"],
        "--target-prefix": a["prefix"], "--alignments": a["alignments"],
        SAMPLING_FLAGS: a["search"], "--replace-unknowns": a["replace_unknowns"],
        "--constraints": a["constraints"], "--source-lang/--target-lang": a["language_tokens"],
        f"--xla {a['xla']}": a["xla"] in ("on", "off"), **control_flags(a["controls"]),
    }  # fmt: skip
    path = a["path"]
    first = path if isinstance(path, str | os.PathLike) else next(iter(path))
    tensorflow_only = [flag for flag, value in given.items() if value]
    if run_pairs(first):
        tensorflow_only.append("several directions")
    beam = a["beam_size"] or run_beam_size(first)
    engine, why = choose_engine(path, beam, ALPHA, a["alpha"], tuple(tensorflow_only))
    translate, what = load_translate(**{**arguments, "engine": engine})
    return translate, f"{what}; --engine auto: {why}"


def _search(beam, alpha, stop_early, search, constraints):
    """`(search, description)` of a preset's decoding: `search` (a sampling) or the beam
    of `beam` (greedy for 1), constrained with `constraints` (a beam of any width)."""
    from tfblocks.translation.searches import beam_or_greedy

    decoding = f"beam {beam}" if search is None else repr(search)
    search = search or beam_or_greedy(beam, alpha, stop_early)
    if constraints:  # a beam search of any width, so a beam of 1 too
        from tfblocks.decoding import ConstrainedBeamSearch

        search = ConstrainedBeamSearch(beam, alpha, stop_early)
    return search, decoding


def _check_greedy_options(path, kind, beam, search, constraints, alpha, stop_early):
    """Refuses (ValueError) beam search's `--alpha` and `--stop-early` where a beam of 1
    (`--beam-size 1`, or the run's own) decodes with greedy search, which would ignore
    them (with `constraints` a beam of 1 is a constrained beam search, which takes both;
    a SavedModel refuses them whatever its beam)."""
    if beam != 1 or search is not None or constraints or kind == "saved":
        return
    given = [
        f"{flag}={value} does not apply"
        for flag, value in (("--alpha", alpha), ("--stop-early", stop_early or None))
        if value is not None
    ]
    if given:
        raise ValueError(
            f"--model={path!r} decodes with a beam of 1, greedy search, which has no length "
            f"penalty and no beam to stop: {' and '.join(given)}; drop it or give "
            "--beam-size 2 or more."
        )


def _check_preset_only(path, kind, search, replace_unknowns, xla=None):
    """Refuses sampling, unknown-word replacement and `--xla on|off` (ValueError) for a
    model that is no run folder or preset: a SavedModel decodes with the search (and the
    XLA) it was exported with, neither it nor CTranslate2 here replaces unknowns, and
    CTranslate2 compiles nothing."""
    wanted = [
        flag
        for flag, value in (
            (SAMPLING_FLAGS, search),
            ("--replace-unknowns", replace_unknowns),
            (f"--xla {xla}", xla in ("on", "off")),
        )
        if value
    ]
    if kind != "preset" and wanted:
        model = "a CTranslate2 model" if kind == "ctranslate2" else "a SavedModel"
        raise ValueError(
            f"--model={path!r} is {model}: {' and '.join(wanted)} "
            f"{'need' if len(wanted) > 1 else 'needs'} a run folder or preset (give the run "
            "folder, with --engine tensorflow)."
        )


def load_score(path, max_length=None, engine="tensorflow", notice=_say, language_tokens=None):
    """Returns `(score, description)`: `score(list[(source, target)]) -> list[float]`,
    each target's log-probability given its source (`Translator.score`,
    `CTranslate2Translator.score`, or a SavedModel's `score` signature); an M2M-100 /
    NLLB run's in the direction of `language_tokens` (as `load_translate`). `engine`
    "auto" scores with TensorFlow (CTranslate2 normalizes over `<pad>` and `<s>` too)."""
    engine = "tensorflow" if engine == "auto" else engine
    kind, found = _find(path, max_length, engine)
    _check_direction(path, kind, found, language_tokens)
    if kind == "ctranslate2":
        from tfblocks.serving import ctranslate2 as ct2  # the optional extra

        scorer = ct2.CTranslate2Translator(found).score
        what = f"CTranslate2 model {found}"
    elif kind == "preset":
        translator, length = _preset_translator(found, max_length, language_tokens=language_tokens)
        scorer = translator.score
        what = f"{_described(found)} (max_length {length})"
    else:
        if max_length is not None:
            raise ValueError(
                f"--model={path!r} is a SavedModel: its max_length was fixed at export; "
                "drop --max-length or give the run folder."
            )
        serve = signature(found, path, "score", "score", notice, "a newer tfblocks")

        def scorer(sources, targets):
            return serve(source=strings_in(sources), target=strings_in(targets))["score"].numpy()

        what = f"SavedModel {found}"

    def score(pairs):
        if not pairs:
            return []
        sources, targets = zip(*pairs, strict=True)
        return [float(v) for v in scorer(list(sources), list(targets))]

    return score, what


def _find(path, max_length, engine):
    """`(kind, folder)` of the model at `path`: `("ctranslate2" | "preset" | "saved", ...)`;
    for a list of several paths (an ensemble), `("preset", [their preset folders])`."""
    if not isinstance(path, str | os.PathLike):
        paths = list(path)
        if len(paths) > 1:
            return "preset", _ensemble_presets(paths, max_length, engine)
        path = paths[0]
    path = os.fspath(path)
    if max_length is not None and (isinstance(max_length, bool) or max_length < 2):
        raise ValueError(f"`--max-length` must be at least 2, got --max-length={max_length!r}.")
    if not os.path.isdir(path):
        raise ValueError(f"`--model` must be a directory, got --model={path!r}.")
    if engine == "ctranslate2":
        if max_length is not None:
            raise ValueError("--max-length is fixed in a CTranslate2 model; drop it.")
        inside = os.path.join(path, CTRANSLATE2_DIR)  # a run folder's export, if any
        if not os.path.isfile(os.path.join(path, "model.bin")) and os.path.isdir(inside):
            return "ctranslate2", inside
        return "ctranslate2", path
    if engine != "tensorflow":
        raise ValueError(
            f"`--engine` must be auto, tensorflow or ctranslate2, got --engine={engine!r}."
        )
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


def _ensemble_presets(paths, max_length, engine):
    """The preset folders of the models at `paths`, refused (ValueError) unless every one
    is a run folder or preset that tfblocks can load into an `Ensemble`."""
    if engine == "ctranslate2":
        raise ValueError(
            f"--engine ctranslate2 takes one --model, got {len(paths)}: CTranslate2's "
            "Translator has no ensembles of several models; ensemble them with --engine "
            "tensorflow (the default)."
        )
    presets = []
    for path in paths:
        kind, found = _find(path, max_length, engine)
        if kind != "preset":
            raise ValueError(
                f"--model={os.fspath(path)!r} is a SavedModel: an ensemble (several --model) "
                "needs run folders or presets, whose models tfblocks loads and combines."
            )
        presets.append(found)
    return presets


def _load_presets(presets):
    """`(model, tokenizer, hparams)` of one preset folder, or of a list of them: their
    `Ensemble`, with the first one's tokenizer and hparams; the tokenizers must be the
    same SentencePiece model (byte for byte), else a ValueError naming the folders."""
    from tfblocks.models import load_preset

    if not isinstance(presets, list):
        return load_preset(presets)
    from tfblocks.decoding import Ensemble
    from tfblocks.models.preset import TransformerTokenizer

    # The tokenizers first (with separate vocabularies, the target's too): a mismatch is
    # reported before any model loads.
    protos = [
        (TransformerTokenizer.from_preset(preset).proto, _target_proto(preset))
        for preset in presets
    ]
    for preset, proto in zip(presets[1:], protos[1:], strict=True):
        if proto != protos[0]:
            raise ValueError(
                f"--model={preset!r} has another tokenizer than --model={presets[0]!r} (their "
                "SentencePiece models differ): the models of an ensemble must share one."
            )
    loaded = [load_preset(preset) for preset in presets]
    model = Ensemble([preset.model for preset in loaded])
    return model, loaded[0].tokenizer, loaded[0].hparams


def _target_proto(preset):
    """The bytes of a preset's target tokenizer (separate vocabularies), or None."""
    from tfblocks.models import load_target_tokenizer

    target = load_target_tokenizer(preset)
    return None if target is None else target.proto


def _check_options(n_best, alignments, constraints, search, replace_unknowns):
    """Refuses (ValueError naming the flags) what `load_translate`'s options cannot do."""
    if n_best is not None and (isinstance(n_best, bool) or not n_best >= 1):
        raise ValueError(f"`--n-best` must be a positive integer, got --n-best={n_best!r}.")
    if alignments and n_best is not None:
        raise ValueError("`--alignments` aligns the best translation only; drop --n-best.")
    for flag, value in (
        (SAMPLING_FLAGS, search),
        ("--replace-unknowns", replace_unknowns),
    ):
        if constraints and value:
            raise ValueError(f"--constraints need beam search: drop {flag} or --constraints.")


def _check_direction(path, kind, found, language_tokens):
    """Refuses (ValueError) `language_tokens` other than the run's own where the model
    found at `path` (`kind`, `found`: `_find`'s) cannot take them."""
    if language_tokens is None or kind == "preset":
        return
    if kind == "ctranslate2":
        raise ValueError(
            f"--model={path!r}: an M2M-100 / NLLB model has no CTranslate2 export yet; "
            "translate with --engine tensorflow."
        )
    if language_tokens != run_language_tokens(found):
        raise ValueError(
            f"--model={path!r} is a SavedModel that translates in its run's direction only; "
            "give the run folder for --source-lang / --target-lang."
        )


def _preset_translator(preset, max_length, search=None, num_hypotheses=1, language_tokens=None,
                       loaded=None, jit_compile=True, controls=None):  # fmt: skip
    """`(Translator, max_length)` of the preset at `preset` (its run's `max_length`
    unless `max_length` is given), or of the `Ensemble` of a list of presets (the
    first one's `max_length`); an M2M-100 / NLLB run's in its own direction, or in
    that of `language_tokens`. The model and tokenizers are kept in, or taken from,
    `loaded` (`load_translate`'s) when given."""
    from tfblocks.models import load_target_tokenizer
    from tfblocks.serving import Translator

    if isinstance(preset, list) and any(run_language_tokens(p) for p in preset):
        raise ValueError(
            "An ensemble of M2M-100 / NLLB runs (language tokens) is not supported yet; "
            f"translate with one of them, got {', '.join(preset)}."
        )
    first = preset[0] if isinstance(preset, list) else preset
    loaded = {} if loaded is None else loaded
    key = ("preset", *map(os.path.abspath, preset if isinstance(preset, list) else [preset]))
    if key not in loaded:
        model, tokenizer, hp = _load_presets(preset)
        target_tokenizer = load_target_tokenizer(first) or tokenizer  # separate vocabularies
        loaded[key] = (model, tokenizer, hp, target_tokenizer)
    model, tokenizer, hp, target_tokenizer = loaded[key]
    default = hp.max_length if hp is not None else 256
    length = default if max_length is None else max_length
    translator = Translator(
        model, tokenizer, target_tokenizer, length, search=search,
        num_hypotheses=num_hypotheses,
        language_tokens=language_tokens or run_language_tokens(first), jit_compile=jit_compile,
        controls=controls,
    )  # fmt: skip
    return translator, length


def _ct2_translator(found, beam, alpha, count, loaded=None, controls=None):
    """The `CTranslate2Translator` of the model folder `found` with these search options;
    with `loaded` (`load_translate`'s), a copy of the one kept there (one loaded model:
    the search options are read at each call), kept there the first time."""
    import copy

    from tfblocks.serving import ctranslate2 as ct2  # the optional extra

    controls = as_controls(controls)
    if controls.max_length_ratio is not None:
        raise ValueError(f"--max-length-ratio={controls.max_length_ratio}: {ct2.NO_LENGTH_RATIO}")
    names = ("min_length", "disallow_unk", "no_repeat_ngram_size", "repetition_penalty")
    options = {name: getattr(controls, name) for name in names}  # CTranslate2's too
    loaded, key = {} if loaded is None else loaded, ("ctranslate2", os.path.abspath(found))
    if key not in loaded:
        length = _run_max_length(found)  # a run folder's export: as its model decodes
        loaded[key] = ct2.CTranslate2Translator(
            found, beam_size=beam, length_penalty=alpha, num_hypotheses=count, **options,
            **({} if length is None else {"max_length": length}),
        )  # fmt: skip
        return loaded[key]
    translator = copy.copy(loaded[key])  # shares its ctranslate2.Translator
    translator.beam_size, translator.length_penalty = beam, float(alpha)
    translator.num_hypotheses = count
    for name, value in options.items():
        setattr(translator, name, value)
    return translator


def _run_max_length(export):
    """The `max_length` of the run whose `ctranslate2/` folder is `export` (its
    `model/hparams.json`'s, what its preset decodes with), or None (a CTranslate2 model
    elsewhere: `CTranslate2Translator`'s default)."""
    import json

    from tfblocks.models.preset import HPARAMS_FILE

    if os.path.basename(os.path.normpath(export)) != CTRANSLATE2_DIR:
        return None
    path = os.path.join(os.path.dirname(os.path.normpath(export)), "model", HPARAMS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            length = json.load(f).get("max_length")
    except (OSError, ValueError, AttributeError):
        return None
    valid = isinstance(length, int) and not isinstance(length, bool) and length >= 2
    return length if valid else None


def _described(preset):
    """ "model FOLDER", or for a list of folders "an ensemble of N models (A, B)"."""
    if isinstance(preset, list):
        return f"an ensemble of {len(preset)} models ({', '.join(preset)})"
    return f"model {preset}"


def _strings(translator):
    """`translate(list[str], **options) -> list[str]` of a `Translator` (or a
    `CTranslate2Translator`, whose results are lists already); the options are
    `target_prefix` and `constraints`."""

    def translate(lines, **options):
        out = translator(lines, **options)
        return out if isinstance(out, list) else decoded(out)

    return translate


def _replacing(translator, n_best):
    """`translate(list[str], target_prefix=None)` of a `Translator` with its unknowns
    replaced: its `n_best` lists (`n_best`) or its translations."""

    def translate(lines, target_prefix=None):
        if n_best:
            return translator.n_best(lines, target_prefix, replace_unknowns=True)
        return decoded(translator(lines, target_prefix, replace_unknowns=True))

    return translate
