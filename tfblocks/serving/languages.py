"""Language tokens: how `Translator` names the direction of a model that writes its
languages as tokens (M2M-100, NLLB-200: `tfblocks.models.m2m100`).

`Translator(language_tokens=(source_code, target_id))` writes the source language's code
before each text and forces the target language's token first; `languages` (every code
and its id) adds a `LanguageTable`, which turns codes given per text into those two in
the graph (the SavedModel's `languages` signature).
"""

import numpy as np
import tensorflow as tf

from tfblocks._checks import short_repr
from tfblocks.ids import BOS_ID


def language_tokens_of(language_tokens, vocab_size):
    """`(source_code, forced_start)` of `Translator(language_tokens=...)`: `(None, None)`
    for None; else a ValueError naming it unless a str code and an id of the model."""
    if language_tokens is None:
        return None, None
    if not isinstance(language_tokens, tuple | list) or len(language_tokens) != 2:
        raise ValueError(
            "`language_tokens` must be (source_code, target_id), e.g. ('eng_Latn', 207), got "
            f"language_tokens={language_tokens!r}."
        )
    code, target = language_tokens
    if not isinstance(code, str) or not code or code != code.strip() or " " in code:
        raise ValueError(f"`language_tokens`' source code must be one word, got {code!r}.")
    if isinstance(target, bool) or not isinstance(target, int | np.integer):
        raise ValueError(f"`language_tokens`' target id must be an int, got {target!r}.")
    if not BOS_ID < int(target) < vocab_size:
        raise ValueError(
            f"`language_tokens`' target id must be a language token's, above the special ids "
            f"(0–{BOS_ID}) and below the model's vocab_size={vocab_size}, got {target}."
        )
    return code, int(target)


class LanguageTable(tf.Module):
    """The codes of a model that names languages by tokens (`Translator(languages=...)`)
    in the graph: `lookup(codes, name)` gives each code's `(code as the model writes it,
    token id)`, a failed call naming `name` for a code the model does not have."""

    def __init__(self, languages, vocab_size):
        super().__init__(name="languages")
        if not isinstance(languages, dict) or not languages:
            raise ValueError(
                "`languages` must map each language code of the model to its token's id "
                f"(e.g. {{'deu_Latn': 256042}}), got languages={short_repr(languages)}."
            )
        codes, ids = [], []
        for code, token in languages.items():
            if not isinstance(code, str) or not code or code.split() != [code]:
                raise ValueError(f"`languages` holds a code that is not one word: {code!r}.")
            if isinstance(token, bool) or not isinstance(token, int | np.integer):
                raise ValueError(f"`languages`' id of {code!r} must be an int, got {token!r}.")
            if not BOS_ID < int(token) < vocab_size:
                raise ValueError(
                    f"`languages`' id of {code!r} must be a language token's, above the "
                    f"special ids (0–{BOS_ID}) and below vocab_size={vocab_size}, got {token}."
                )
            codes.append(code)
            ids.append(int(token))
        self.codes = tuple(codes)
        self.token_ids = tuple(ids)
        keys, rows = list(codes), list(range(len(codes)))
        for row, code in enumerate(codes):  # M2M-100's `__de__` also as `de`
            plain = code.strip("_")
            if plain != code and plain not in languages:
                keys.append(plain)
                rows.append(row)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys), tf.constant(rows, tf.int64)),
            default_value=-1,
        )
        self._codes = tf.constant(codes)
        self._ids = tf.constant(ids, tf.int32)

    def id_of(self, code):
        """The token id of `code` (a str, as the model writes it or M2M-100's plain
        form), or None when the model has no such code."""
        row = int(self.table.lookup(tf.constant(code)))
        return None if row < 0 else int(self._ids[row])

    def lookup(self, codes, name):
        """`(codes [B] as the model writes them, token ids [B])` of the string batch
        `codes` (the input called `name`)."""
        rows = self.table.lookup(codes)
        known = tf.debugging.assert_non_negative(
            rows, message=f"`{name}` must hold language codes of the model (e.g. "
            f"{self.codes[0]!r}); one is not"
        )  # fmt: skip
        with tf.control_dependencies([known]):
            rows = tf.identity(rows)
        return tf.gather(self._codes, rows), tf.gather(self._ids, rows)


def unknown_code(name, code, codes):
    """The error message of a language code `code` (argument `name`) that is none of
    `codes`: the closest ones named."""
    import difflib

    close = difflib.get_close_matches(str(code), codes, n=3) or sorted(codes)[:3]
    return (
        f"`{name}` must be a language code of the model ({len(codes)} codes), got "
        f"{name}={code!r}; the closest: {', '.join(close)}."
    )


def language_table(languages, source_code, forced_start, vocab_size):
    """`LanguageTable` of `Translator(languages=...)`, or None; refused (ValueError)
    without `language_tokens`."""
    if languages is None:
        return None
    if forced_start is None:
        raise ValueError(
            "`languages` (every code of an M2M-100 / NLLB model) needs `language_tokens`, "
            "the translator's own direction; got languages without it."
        )
    table = LanguageTable(languages, vocab_size)
    if forced_start not in table.token_ids or source_code not in table.codes:
        raise ValueError(
            f"`language_tokens` ({source_code!r}, {forced_start}) must be among `languages`' "
            "codes and ids: give the codes of the same model."
        )
    return table


def with_source_code(texts, code):
    """`texts` (`[B]` strings) with the source language's `code` (a str, or `[B]` codes)
    written before each, as the model reads a source: `"eng_Latn Hello."`."""
    return tf.strings.join([code, texts], separator=" ")


class LanguageTokenized:
    """A tokenizer whose ids carry a language token, for training an M2M-100 / NLLB model
    on one direction (`tfblocks-train --init-from` such a run): a source tokenizer's
    `tokenize` writes the source `code` before each text (`with_source_code`), a target
    tokenizer's puts the target language's `first_id` before the ids, the token the
    translation is forced to start with. Anything else is the wrapped tokenizer's.

    Args:
        tokenizer: the `SubwordTokenizer` of that side.
        code: the source language's code (a source tokenizer), or None.
        first_id: the target language token's id (a target tokenizer), or None.
    """

    def __init__(self, tokenizer, code=None, first_id=None):
        if (code is None) == (first_id is None):
            raise ValueError(
                "`LanguageTokenized` needs a source `code` or a target `first_id`, one of "
                f"them, got code={code!r}, first_id={first_id!r}."
            )
        self.tokenizer, self.code, self.first_id = tokenizer, code, first_id

    def tokenize(self, texts):
        """Ragged ids `[N, (n)]` of the strings `texts`, EOS-terminated, the language token
        first."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if self.code is not None:
            return self.tokenizer.tokenize(with_source_code(texts, self.code))
        ids = self.tokenizer.tokenize(texts)
        first = tf.fill([tf.shape(texts)[0], 1], tf.cast(self.first_id, ids.dtype))
        return tf.concat([tf.RaggedTensor.from_tensor(first), ids], axis=1)

    def __getattr__(self, name):  # only for what the instance lacks
        if name == "tokenizer" or name.startswith("__"):  # not made yet, or copy's probes
            raise AttributeError(name)
        return getattr(self.tokenizer, name)
