"""Translating many lines in batches, sorted by length: one home for evaluation and the CLIs.

A batch decodes until its longest translation ends, and its sources are padded to
its longest source, so batches of sentences of similar length waste less work: the
lines are translated in order of length and the translations returned in the input's
order (what CTranslate2's file translation does too). Translations do not depend on
their batch mates (padding is masked; `Translator`'s default `extra_length=None`), so
the order changes the speed only.
"""


def translate_in_batches(
    translate, lines, batch_size, progress=None, sort_by_length=True, length=len
):
    """Translations of `lines`, in their order, `batch_size` lines per `translate` call.

    Args:
        translate: `translate(list[str]) -> list[str]` (same length, same order), or
            any function of a batch of items returning one result per item (an n-best
            list, a score of a (source, target) pair).
        lines: the sentences (or items).
        batch_size: lines per call (positive int).
        progress: optional `progress(done, total)`, called after every batch.
        sort_by_length: batch the lines in order of `length`; False keeps the input
            order.
        length: an item's length (default: its characters).

    Example:

    >>> translate_in_batches(lambda b: [s.upper() for s in b], ["ab", "c", "def"], 2)
    ['AB', 'C', 'DEF']
    """
    from tfblocks import _checks

    _checks.check_positive_int("batch_size", batch_size)
    lines = list(lines)
    order = list(range(len(lines)))
    if sort_by_length:
        order.sort(key=lambda i: length(lines[i]))
    out = [None] * len(lines)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        translations = list(translate([lines[i] for i in chosen]))
        if len(translations) != len(chosen):
            raise ValueError(
                f"`translate` returned {len(translations)} translations for {len(chosen)} lines."
            )
        for i, translation in zip(chosen, translations, strict=True):
            out[i] = translation
        if progress is not None:
            progress(min(start + batch_size, len(order)), len(order))
    return out
