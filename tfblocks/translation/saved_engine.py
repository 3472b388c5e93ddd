"""A SavedModel as `engines.load_translate` / `load_score` run it: through its signatures
(`serving_default`, `n_best`, `prefix`, `constrained`, `align`, `score`), and the small
turns between their string tensors and the commands' lists that the engines share."""

import os

from tfblocks.translation.decoding_controls import control_flags


def check_saved_options(path, beam_size, alpha, stop_early, max_length, prefix, constraints,
                        controls=None):  # fmt: skip
    """Refuses (ValueError) what a SavedModel fixed at export (its search, max_length and
    decoding controls), and a target prefix with constraints (its `constrained`
    signature takes none)."""
    fixed = [
        f"{flag}={value}"
        for flag, value in (
            ("--beam-size", beam_size),
            ("--alpha", alpha),
            ("--stop-early", stop_early or None),
            ("--max-length", max_length),
        )
        if value is not None
    ] + [flag for flag, given in control_flags(controls).items() if given]
    if fixed:
        raise ValueError(
            f"--model={path!r} is a SavedModel: its beam size, length penalty, stopping rule, "
            f"max_length and controls were fixed at export; drop {', '.join(fixed)} or give "
            "the run folder."
        )
    if constraints and prefix:
        raise ValueError(
            f"--model={path!r} is a SavedModel: its `constrained` signature takes no target "
            "prefix; drop --target-prefix or give the run folder."
        )


def saved_translate(found, path, notice, n_best, prefix, alignments, constraints=False,
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
    serve, *serve_align = signatures(found, path, wanted, notice, loaded)
    if n_best is not None:
        exported = serve.structured_outputs["translations"].shape[1]
        if exported is not None and n_best > exported:
            raise ValueError(
                f"`--n-best` must be at most the {exported} hypotheses the SavedModel {found} "
                f"returns, got --n-best={n_best}."
            )

    def translate(lines, target_prefix=None, constraints=None):
        texts = strings_in(lines)
        if constraints is not None:
            out = serve(text=texts, constraints=phrase_table(constraints, len(lines)))
        elif prefix:
            out = serve(text=texts, target_prefix=strings_in(target_prefix))
        else:
            out = serve(text=texts)
        if n_best is None:
            return decoded(out["translation"])
        rows = zip(
            out["translations"].numpy()[:, :n_best], out["scores"].numpy()[:, :n_best], strict=True
        )
        return [
            [Hypothesis(t.decode("utf-8"), float(v)) for t, v in zip(*row, strict=True)]
            for row in rows
        ]

    if alignments:

        def align(sources, targets):
            out = serve_align[0](source=strings_in(sources), target=strings_in(targets))
            return decoded(out["alignment"])

        translate = aligned(translate, align)
    what = f"SavedModel {found}" + ("" if n_best is None else " (n_best)")
    return with_inputs(translate, prefix, constraints), what


def signature(saved, path, name, output, notice, made_by="a tfblocks.Translator export"):
    """The SavedModel `saved`'s signature `name` (with the output `output`), after
    `notice` said that the SavedModel runs its own graph; a ValueError when it has none."""
    return signatures(saved, path, {name: (output, made_by)}, notice)[0]


def signatures(saved, path, wanted, notice, loaded=None):
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


def strings_in(lines):
    import tensorflow as tf

    return tf.constant(list(lines), tf.string)


def decoded(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def aligned(translate, align):
    """`translate(list[str], **options) -> list[(translation, alignment)]` from a
    `translate` and an `align(sources, targets)` of the same model."""

    def translate_and_align(lines, **options):
        translations = list(translate(lines, **options))
        return list(zip(translations, align(list(lines), translations), strict=True))

    return translate_and_align


def with_inputs(translate, prefix, constraints):
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
