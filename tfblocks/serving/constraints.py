"""Lexical constraints in `Translator`: each text's target phrases as strings, checked in
Python (`phrase_table`), tokenized in the graph (`encode_phrases`), and the beam search
that takes them (`constrained_search`).

A text's phrases are a list of str; in a tensor, a batch's phrases are a `tf.string`
`[B, C]` table, each row padded with "" (a blank phrase constrains nothing). A phrase is
tokenized as a target (SentencePiece, without EOS), so "curry" is the subwords the target
tokenizer gives "curry" on its own: a word that begins a word in the translation.
"""

import tensorflow as tf

from tfblocks import _checks
from tfblocks.decoding import BeamSearch, ConstrainedBeamSearch
from tfblocks.decoding.constrained import PhraseError
from tfblocks.ids import PAD_ID, UNK_ID
from tfblocks.serving.text_module import blank_lines, text_spec

# The phrases input of the `constrained` signature: `tf.string [B, C]`.
CONSTRAINTS = text_spec("constraints")


def constrained_search(search):
    """The `ConstrainedBeamSearch` that decodes with constraints for a module whose search
    is `search`: itself, or a `BeamSearch`'s options in one (without constraints it
    searches as that `BeamSearch`); a ValueError naming `search` for another search."""
    if isinstance(search, ConstrainedBeamSearch):
        return search
    if type(search) is BeamSearch:
        return ConstrainedBeamSearch(**search.get_config())
    raise ValueError(
        "`constraints` need a beam search (tfblocks.decoding.BeamSearch or "
        f"ConstrainedBeamSearch), got search={search!r}."
    )


def phrase_table(constraints, count):
    """`constraints`, a list of `count` lists of str (each text's phrases), as the
    `tf.string` `[count, C]` table (C the most phrases of a text, at least 1), else a
    ValueError naming it.

    >>> phrase_table([["curry", "lunch"], [], ["Today"]], 3).numpy().tolist()
    [[b'curry', b'lunch'], [b'', b''], [b'Today', b'']]
    """
    if isinstance(constraints, str) or not isinstance(constraints, list | tuple):
        raise ValueError(
            "`constraints` must be a list with a list of str phrases per text, got "
            f"{type(constraints).__name__}: {constraints!r:.80}."
        )
    if len(constraints) != count:
        raise ValueError(
            f"`constraints` must hold a list of phrases per text ({count}), got {len(constraints)}."
        )
    for index, phrases in enumerate(constraints):
        name = f"constraints[{index}]"
        if isinstance(phrases, str) or not isinstance(phrases, list | tuple):
            raise ValueError(
                f'`{name}` must be a list of str phrases (e.g. ["curry"]), got '
                f"{type(phrases).__name__}: {phrases!r:.80}."
            )
        for column, phrase in enumerate(phrases):
            if not isinstance(phrase, str):
                raise ValueError(
                    f"`{name}[{column}]` must be a str phrase, got {type(phrase).__name__}: "
                    f"{phrase!r:.80}."
                )
        _checks.check_unicode_texts(name, list(phrases))
    width = max([1, *(len(phrases) for phrases in constraints)])
    rows = [[*phrases, *[""] * (width - len(phrases))] for phrases in constraints]
    return tf.reshape(tf.constant(rows, tf.string), [count, width])


def phrase_batch(constraints, name):
    """In a signature's graph: its input `constraints` (called `name`) as a `tf.string`
    `[B, C]` table; another rank fails the call with an InvalidArgumentError naming it."""
    two_d = tf.equal(tf.rank(constraints), 2)
    message = f"`{name}` must be a 2-D batch of strings, a row of phrases per sentence"
    with tf.control_dependencies([tf.debugging.Assert(two_d, [message])]):
        return tf.reshape(constraints, [tf.shape(constraints)[0], -1])  # [B, C]


def encode_phrases(tokenizer, phrases, max_length):
    """The ids `[B, C, T]` (PAD-padded, no EOS, T at least 1) of the phrases `[B, C]`,
    tokenized with `tokenizer` (a target tokenizer); a blank phrase is a row of PAD. A
    phrase of `max_length` subwords or more (it cannot fit before EOS) or with `<unk>`
    among them fails the call with an InvalidArgumentError naming `constraints`."""
    flat = tf.reshape(phrases, [-1])  # [B·C]
    flat = tf.where(blank_lines(flat), "", flat)
    ids = tokenizer.tokenize(flat)[:, :-1].to_tensor(default_value=PAD_ID)  # [B·C, T]
    longest = tf.shape(ids)[1]
    message = (
        f"`constraints`: a phrase may hold at most {max_length - 1} subwords (max_length "
        "- 1, before EOS), got one of"
    )
    unknown = (
        "`constraints`: a phrase holds characters the target vocabulary lacks (tokenized "
        "to <unk>); drop or respell it"
    )
    known = tf.logical_not(tf.reduce_any(tf.equal(ids, UNK_ID)))
    checks = [
        tf.debugging.Assert(longest < max_length, [message, longest]),
        tf.debugging.Assert(known, [unknown]),
    ]
    with tf.control_dependencies(checks):
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(1 - longest, 0)]])  # [B·C, max(T, 1)]
    shape = tf.shape(phrases)
    return tf.reshape(ids, [shape[0], shape[1], -1])  # [B, C, T]


def check_phrase_table(tokenizer, table, max_length):
    """Eagerly: a `PhraseError` naming the first phrase of `table` `[B, C]` that has
    `max_length` subwords or more (before EOS), or that `tokenizer` (a target tokenizer)
    can only write with `<unk>` (its characters named): the search would meet it with
    the unknown token, which is no translation of the phrase."""
    ragged = tokenizer.tokenize(tf.reshape(table, [-1]))
    width = int(table.shape[1])
    for flat, ids in enumerate(ragged.to_list()):
        ids = ids[:-1]  # without EOS
        if not ids:
            continue
        row, column = divmod(flat, width)
        phrase = table[row, column].numpy().decode("utf-8")
        if len(ids) >= max_length:
            reason = (
                f"has {len(ids)} subwords; a phrase must fit before EOS in max_length="
                f"{max_length} (at most {max_length - 1})."
            )
        elif UNK_ID in ids:
            reason = (
                f"holds characters the target vocabulary lacks ({_unknown(tokenizer, phrase)}): "
                "the translation could only hold <unk> for them; drop or respell the phrase."
            )
        else:
            continue
        message = f"`constraints[{row}][{column}]` ({phrase!r:.60}) {reason}"
        raise PhraseError(message, row, column, phrase, reason)


def _unknown(tokenizer, phrase):
    """The characters of `phrase` that `tokenizer` writes as `<unk>`, as `'x', 'y'`."""
    characters = sorted({c for c in phrase if not c.isspace()})
    rows = tokenizer.tokenize(tf.constant(characters, tf.string)).to_list()
    lacking = [c for c, ids in zip(characters, rows, strict=True) if UNK_ID in ids]
    return ", ".join(repr(c) for c in lacking) or repr(phrase)
