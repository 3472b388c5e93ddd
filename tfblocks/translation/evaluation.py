"""Translation quality: corpus BLEU and chrF (sacrebleu) and the exact-match rate.

sacrebleu (the `examples` extra) is imported here and nowhere else, so the rest of
tfblocks imports on a plain install. BLEU uses sacrebleu's default `13a`
tokenization, the WMT standard for English output, cased; chrF is sacrebleu's
character n-gram F-score (n = 6, β = 2).
"""

import sacrebleu

from tfblocks.translation.in_batches import translate_in_batches


def score(hypotheses, references):
    """`{"bleu", "chrf", "exact_match", "sentences", "bleu_signature"}` of a corpus.

    Example:

    >>> m = score(["Today's lunch is curry."], ["Today's lunch is curry."])
    >>> m["bleu"], m["chrf"], m["exact_match"]
    (100.0, 100.0, 1.0)
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"`hypotheses` and `references` must have the same length, got "
            f"{len(hypotheses)} and {len(references)}."
        )
    if not references:  # sacrebleu would fail with an IndexError
        raise ValueError(
            "`hypotheses` and `references` are empty: a corpus score needs at least one "
            "sentence, got 0."
        )
    # force=True: no "forgot to detokenize" warning for every call on an already
    # tokenized corpus (small_parallel_enja); the score is the same either way.
    bleu = sacrebleu.BLEU(tokenize="13a", force=True)
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(sacrebleu.CHRF().corpus_score(hypotheses, [references]).score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "exact_match": exact / len(references),
        "sentences": len(references),
    }


def evaluate(translator, pairs, batch_size=256, progress=None):
    """Translates `pairs`' sources; returns `(metrics, hypotheses)`.

    Metrics as `score`: `bleu`, `chrf`, `exact_match` (share of translations equal
    to the reference after stripping spaces at the ends) and `sentences`. The
    sources are translated `batch_size` at a time in order of length
    (`translate_in_batches`, which calls `progress(done, total)` after each batch);
    hypotheses come back in `pairs`' order.
    """
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]

    def translate(batch):
        return [h.decode("utf-8") for h in translator(batch).numpy()]

    hypotheses = translate_in_batches(translate, sources, batch_size, progress)
    return score(hypotheses, references), hypotheses
