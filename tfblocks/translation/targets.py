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
    from tfblocks.translation.run_folder import (
        run_direction,
        run_direction_languages,
        run_languages,
    )

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
    languages = run_direction_languages(model, direction)
    if (source_lang, target_lang) != (None, None):
        notice(f"translating {languages[0]}->{languages[1]} (the model's language tokens)")
    return direction, languages


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
