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

from tfblocks.translation.run_folder import CTRANSLATE2_DIR, run_beam_size, run_language_tokens
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
    """
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
            translator = _ct2_translator(found, beam, alpha, count, loaded)
            what = f"CTranslate2 model {found} (beam {beam})"
        else:
            search = _search(beam, alpha, stop_early, search, constraints)
            jit_compile = xla is None or use_xla(xla, lines)
            args = (found, max_length, search[0], count, language_tokens)
            translator, length = _preset_translator(*args, loaded=loaded, jit_compile=jit_compile)
            compiled = "" if jit_compile else ", no XLA"
            what = f"{_described(found)} ({search[1]}, max_length {length}{compiled})"
        translate = translator.n_best if n_best is not None else _strings(translator)
        if replace_unknowns:
            translate = _replacing(translator, n_best is not None)
        if alignments:
            translate = _aligned(translate, translator.align)
        return _with_inputs(translate, prefix, constraints), what
    fixed = [
        f"{flag}={value}"
        for flag, value in (
            ("--beam-size", beam_size),
            ("--alpha", alpha),
            ("--stop-early", stop_early or None),
            ("--max-length", max_length),
        )
        if value is not None
    ]
    if fixed:
        raise ValueError(
            f"--model={path!r} is a SavedModel: its beam size, length penalty, stopping rule "
            f"and max_length were fixed at export; drop {', '.join(fixed)} or give the run "
            "folder."
        )
    if constraints and prefix:
        raise ValueError(
            f"--model={path!r} is a SavedModel: its `constrained` signature takes no target "
            "prefix; drop --target-prefix or give the run folder."
        )
    options = (n_best, prefix, alignments, constraints)
    return _saved_translate(found, path, notice, *options, loaded=loaded)


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


def _saved_translate(found, path, notice, n_best, prefix, alignments, constraints=False,
                     loaded=None):  # fmt: skip
    """`load_translate`'s `(translate, description)` of the SavedModel `found`, through
    the signatures its options need (the SavedModel loaded once, or taken from `loaded`)."""
    from tfblocks.serving import Hypothesis
    from tfblocks.serving.constraints import phrase_table

    if constraints:
        main = ("constrained", "translations", "Translator(constrained=True)'s export")
    elif prefix:
        main = ("prefix", "translations", "a newer tfblocks")
    elif n_best is None:
        main = ("serving_default", "translation", "a tfblocks.Translator export")
    else:
        main = ("n_best", "translations", "Translator(num_hypotheses=K)'s export")
    wanted = {main[0]: main[1:]}
    if alignments:
        wanted["align"] = ("alignment", "Translator(alignments=True)'s export")
    serve, *serve_align = _signatures(found, path, wanted, notice, loaded)
    if n_best is not None:
        exported = serve.structured_outputs["translations"].shape[1]
        if exported is not None and n_best > exported:
            raise ValueError(
                f"`--n-best` must be at most the {exported} hypotheses the SavedModel {found} "
                f"returns, got --n-best={n_best}."
            )

    def translate(lines, target_prefix=None, constraints=None):
        texts = _strings_in(lines)
        if constraints is not None:
            out = serve(text=texts, constraints=phrase_table(constraints, len(lines)))
        elif prefix:
            out = serve(text=texts, target_prefix=_strings_in(target_prefix))
        else:
            out = serve(text=texts)
        if n_best is None:
            return _decoded(out["translation"])
        rows = zip(
            out["translations"].numpy()[:, :n_best], out["scores"].numpy()[:, :n_best], strict=True
        )
        return [
            [Hypothesis(t.decode("utf-8"), float(v)) for t, v in zip(*row, strict=True)]
            for row in rows
        ]

    if alignments:

        def align(sources, targets):
            out = serve_align[0](source=_strings_in(sources), target=_strings_in(targets))
            return _decoded(out["alignment"])

        translate = _aligned(translate, align)
    what = f"SavedModel {found}" + ("" if n_best is None else " (n_best)")
    return _with_inputs(translate, prefix, constraints), what


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
    NLLB run's in the direction of `language_tokens` (as `load_translate`)."""
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
                       loaded=None, jit_compile=True):  # fmt: skip
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
    )  # fmt: skip
    return translator, length


def _ct2_translator(found, beam, alpha, count, loaded=None):
    """The `CTranslate2Translator` of the model folder `found` with these search options;
    with `loaded` (`load_translate`'s), a copy of the one kept there (one loaded model:
    the search options are read at each call), kept there the first time."""
    import copy

    from tfblocks.serving import ctranslate2 as ct2  # the optional extra

    loaded, key = {} if loaded is None else loaded, ("ctranslate2", os.path.abspath(found))
    if key not in loaded:
        loaded[key] = ct2.CTranslate2Translator(
            found, beam_size=beam, length_penalty=alpha, num_hypotheses=count
        )
        return loaded[key]
    translator = copy.copy(loaded[key])  # shares its ctranslate2.Translator
    translator.beam_size, translator.length_penalty = beam, float(alpha)
    translator.num_hypotheses = count
    return translator


def _described(preset):
    """ "model FOLDER", or for a list of folders "an ensemble of N models (A, B)"."""
    if isinstance(preset, list):
        return f"an ensemble of {len(preset)} models ({', '.join(preset)})"
    return f"model {preset}"


def _signature(saved, path, name, output, notice, made_by="a tfblocks.Translator export"):
    """The SavedModel `saved`'s signature `name` (with the output `output`), after
    `notice` said that the SavedModel runs its own graph; a ValueError when it has none."""
    return _signatures(saved, path, {name: (output, made_by)}, notice)[0]


def _signatures(saved, path, wanted, notice, loaded=None):
    """`_signature` of each `{name: (output, made_by)}` of `wanted`, a list, the SavedModel
    loaded once (kept in, or taken from, `loaded`: `load_translate`'s)."""
    import tensorflow as tf

    loaded, key = {} if loaded is None else loaded, ("saved", os.path.abspath(saved))
    if key not in loaded:
        notice(f"loading the SavedModel {saved} (it runs its own graph: use only models you "
               "trust)")  # fmt: skip
        loaded[key] = tf.saved_model.load(saved)
    signatures = loaded[key].signatures
    found = []
    for name, (output, made_by) in wanted.items():
        serve = signatures.get(name)
        if serve is None or output not in serve.structured_outputs:
            raise ValueError(
                f"--model={path!r}: the SavedModel {saved} has no `{name}` signature with a "
                f"`{output}` output ({made_by} has one)."
            )
        found.append(serve)
    return found


def _strings_in(lines):
    import tensorflow as tf

    return tf.constant(list(lines), tf.string)


def _decoded(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def _strings(translator):
    """`translate(list[str], **options) -> list[str]` of a `Translator` (or a
    `CTranslate2Translator`, whose results are lists already); the options are
    `target_prefix` and `constraints`."""

    def translate(lines, **options):
        out = translator(lines, **options)
        return out if isinstance(out, list) else _decoded(out)

    return translate


def _replacing(translator, n_best):
    """`translate(list[str], target_prefix=None)` of a `Translator` with its unknowns
    replaced: its `n_best` lists (`n_best`) or its translations."""

    def translate(lines, target_prefix=None):
        if n_best:
            return translator.n_best(lines, target_prefix, replace_unknowns=True)
        return _decoded(translator(lines, target_prefix, replace_unknowns=True))

    return translate


def _aligned(translate, align):
    """`translate(list[str], **options) -> list[(translation, alignment)]` from a
    `translate` and an `align(sources, targets)` of the same model."""

    def translate_and_align(lines, **options):
        translations = list(translate(lines, **options))
        return list(zip(translations, align(list(lines), translations), strict=True))

    return translate_and_align


def _with_inputs(translate, prefix, constraints):
    """`translate(texts, target_prefix=..., constraints=...)` as a function of tuples
    `(text, target prefix, phrases)` holding the inputs given (`prefix`, `constraints`),
    in that order, or of texts when neither is."""
    names = [name for name, given in (("target_prefix", prefix), ("constraints", constraints))
             if given]  # fmt: skip
    if not names:
        return translate

    def translate_tuples(items):
        texts = [item[0] for item in items]
        options = {name: [list(item[1 + i]) if name == "constraints" else item[1 + i]
                          for item in items] for i, name in enumerate(names)}  # fmt: skip
        return translate(texts, **options)

    return translate_tuples
