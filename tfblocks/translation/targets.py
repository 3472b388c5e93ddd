"""`--target-lang` of `tfblocks-translate` and `tfblocks-evaluate`: the language a model of
several directions (`tfblocks-train --pairs`) translates into.

Such a model reads a tag `<2xx>` in front of each source (`tfblocks.text.multilingual`);
`target_language` checks the flag against the directions the run recorded (`run_pairs`)
and `tag_lines` puts the tag in front of each line. Any language of the run may be asked
for: a direction that was never trained (e.g. fr→de after de-en, fr-en, en-de) is
zero-shot, translated all the same and reported as such.

An imported M2M-100 / NLLB run names its languages by tokens instead (`run.json`'s
`language_tokens`): `language_direction` turns `--source-lang` / `--target-lang` into the
`Translator(language_tokens=...)` of the asked direction (any of the model's codes).
"""

import os


def target_language(models, target_lang, notice):
    """The language to tag the sources with, or None (a run of one direction).

    Args:
        models: the `--model` path (or the list of them; the first's run decides).
        target_lang: the flag's value, or None.
        notice: called with a line to report (the directions trained into it, or
            zero-shot).

    Raises:
        ValueError: `--target-lang` is missing for a run of several directions, names a
            language that is none of the run's (the run's languages are listed), or
            another target than a one-direction run's. A model without a run folder
            (a SavedModel elsewhere) is tagged as the flag asks, which is said.
    """
    from tfblocks.text.corpus import check_language
    from tfblocks.text.multilingual import target_tag
    from tfblocks.translation.run_folder import (  # not for --help
        run_language_tokens,
        run_languages,
        run_pairs,
    )

    model = models if isinstance(models, str) else next(iter(models))
    if run_language_tokens(model) is not None:
        return None  # its tokens name the direction: `language_direction`
    pairs = run_pairs(model)
    if pairs is None and run_languages(model) is None:
        if target_lang is not None and _language_tokens_model(model):
            raise ValueError(
                f"--model={model!r} is an M2M-100 / NLLB SavedModel away from its run folder: "
                "it names languages by its own tokens, not by tags; give its run folder for "
                f"--target-lang, got --target-lang={target_lang!r}."
            )
        tags = model_tags(model)  # a model of several directions away from its run folder
        if tags:
            if target_lang not in tags:
                got = "without --target-lang"
                if target_lang is not None:
                    got = f"--target-lang={target_lang!r}"
                raise ValueError(
                    f"`--target-lang` must name one of the languages whose tags the vocabulary "
                    f"of --model={model!r} holds ({', '.join(tags)}; no run folder records its "
                    f"directions), got {got}."
                )
            notice(f"no run folder records the directions of {model}: each line is tagged "
                   f"{target_tag(target_lang)} as --target-lang asks")  # fmt: skip
            return target_lang
    if pairs is None:
        languages = run_languages(model)
        if target_lang is None or (languages is not None and target_lang == languages[1]):
            return None  # one direction: its sources are not tagged
        if languages is not None:
            raise ValueError(
                f"`--target-lang` chooses among the targets of a run of several directions; "
                f"--model={model!r} is a {languages[0]}->{languages[1]} run, got "
                f"--target-lang={target_lang!r}."
            )
        check_language("--target-lang", target_lang)
        notice(f"no run folder records the directions of {model}: each line is tagged "
               f"{target_tag(target_lang)} as --target-lang asks")  # fmt: skip
        return target_lang
    directions = [tuple(pair.split("-")) for pair in pairs]
    languages = sorted({language for pair in directions for language in pair})
    if target_lang is None or target_lang not in languages:
        got = "without --target-lang" if target_lang is None else f"--target-lang={target_lang!r}"
        raise ValueError(
            f"`--target-lang` must name one of the languages of --model={model!r} "
            f"({', '.join(languages)}; trained directions {', '.join(pairs)}), got {got}."
        )
    trained = [pair for pair, (_, target) in zip(pairs, directions, strict=True)
               if target == target_lang]  # fmt: skip
    if trained:
        notice(f"translating into {target_lang}: trained from {', '.join(trained)}; "
               "a source of another language is zero-shot")  # fmt: skip
    else:
        notice(f"translating into {target_lang}: zero-shot (no trained direction into it)")
    return target_lang


def language_direction(models, source_lang, target_lang, notice):
    """`(language_tokens, languages)` of an imported M2M-100 / NLLB run in the direction
    `--source-lang` / `--target-lang` ask (None each: the run's own): the
    `Translator(language_tokens=...)` pair and the `(source, target)` languages the
    commands read the texts as; None for any other run (`--source-lang` is then refused
    unless it is the run's source language).

    Raises:
        ValueError: a code the model does not have (the closest known ones named), or
            `--source-lang` for a run that is not such a model.
    """
    from tfblocks.translation.run_folder import run_languages

    model = models if isinstance(models, str) else next(iter(models))
    direction = run_direction(model, source_lang, target_lang)
    if direction is None:
        languages = run_languages(model)
        if source_lang is not None and (languages is None or source_lang != languages[0]):
            recorded = "records no languages" if languages is None else (
                f"is a {languages[0]}->{languages[1]} run")  # fmt: skip
            raise ValueError(
                f"`--source-lang` chooses the source language of an imported M2M-100 / NLLB "
                f"run; --model={model!r} {recorded}, got --source-lang={source_lang!r}."
            )
        return None
    languages = _direction_languages(model, direction)
    if (source_lang, target_lang) != (None, None):
        notice(f"translating {languages[0]}->{languages[1]} (the model's language tokens)")
    return direction, languages


def language_code(languages, kind, given, flag):
    """The model's code for the language `given` (`flag`'s value): itself, M2M-100's
    `__xx__` for `xx`, or NLLB's one code of a language written in one script (`jpn` for
    `jpn_Jpan`); a ValueError naming the closest known codes otherwise."""
    import difflib

    for code in (given, f"__{given}__"):
        if code in languages:
            return code
    scripts = sorted(code for code in languages if code.split("_")[0] == given)
    if len(scripts) == 1:
        return scripts[0]
    close = scripts or difflib.get_close_matches(given, languages, n=3) or sorted(languages)[:3]
    raise ValueError(
        f"{flag}={given!r} is not a language of this {kind} model ({len(languages)} codes); "
        f"the closest: {', '.join(close)}."
    )


def run_direction(path, source_lang=None, target_lang=None):
    """`(source_code, target_id)` of an imported M2M-100 / NLLB run (`run_language_tokens`)
    with `--source-lang` / `--target-lang` put in place of its own codes (None: the run's),
    or None for any other run; an unknown code is refused (`language_code`)."""
    from tfblocks.translation.run_folder import run_language_codes, run_language_tokens

    tokens = run_language_tokens(path)
    if tokens is None or (source_lang is None and target_lang is None):
        return tokens
    codes, kind = run_language_codes(path)
    if codes is None:
        raise ValueError(
            f"--model={os.fspath(path)!r} records no language codes (imported before "
            "tfblocks recorded them): import it again for --source-lang / --target-lang."
        )
    source = tokens[0]
    if source_lang is not None:
        source = language_code(codes, kind, source_lang, "--source-lang")
    target = tokens[1]
    if target_lang is not None:
        target = int(codes[language_code(codes, kind, target_lang, "--target-lang")])
    return source, target


def _direction_languages(path, direction):
    """`(source, target)` languages as the commands read them (BLEU's tokenizer, Japanese
    spaces) of the `direction` (`run_direction`'s) of the run at `path`, as its import
    records its own: M2M-100's `__ja__` is `ja`, NLLB's `jpn_Jpan` stays (BLEU's
    tokenizer reads its first part)."""
    from tfblocks.translation.run_folder import run_language_codes, run_languages

    codes, _ = run_language_codes(path)
    target = next((code for code, i in (codes or {}).items() if i == direction[1]), None)
    if target is None:  # a run without its codes translates in its own direction
        return run_languages(path)
    return direction[0].strip("_"), target.strip("_")


def _language_tokens_model(path):
    """Whether `path` is a SavedModel with a `languages` signature (an M2M-100 / NLLB
    export): read from its `saved_model.pb`, nothing loaded."""
    file = os.path.join(os.fspath(path), "saved_model.pb")
    if not os.path.isfile(file):
        return False
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(file, "rb") as f:
        saved.ParseFromString(f.read())
    return any("languages" in graph.signature_def for graph in saved.meta_graphs)


def model_tags(path):
    """The languages whose target tags `<2xx>` the vocabulary of the model folder `path`
    holds (a CTranslate2 export's `source.model`, a preset's or run folder's
    `tokenizer.model`), sorted; `[]` when it holds none or has no such file."""
    import os

    for name in ("source.model", "tokenizer.model", os.path.join("model", "tokenizer.model")):
        file = os.path.join(os.fspath(path), name)
        if os.path.isfile(file):
            from tfblocks.text.multilingual import vocabulary_tags

            with open(file, "rb") as f:
                return vocabulary_tags(f.read())
    return []


def tag_lines(lines, target_lang):
    """`lines` with the tag of `target_lang` in front of each non-blank one (None: as
    they are); a blank line stays blank.

    >>> tag_lines(["Guten Morgen.", ""], "en")
    ['<2en> Guten Morgen.', '']
    """
    if target_lang is None:
        return lines
    from tfblocks.text.multilingual import tag_source

    return [tag_source(line, target_lang) if line.strip() else line for line in lines]
