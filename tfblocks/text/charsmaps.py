"""SentencePiece's compiled normalization tables (`precompiled_charsmap`), made here.

A SentencePiece model normalizes text through a table compiled into the model (a trie of
the sequences to rewrite, then their replacements). Only SentencePiece's trainer writes
the format, from a file of rules, so `compiled_charsmap` trains a throwaway model on
such a file and keeps its table. `with_identity_charsmap` gives a model without a table
(identity normalization) one that rewrites nothing: the same normalization, where
tensorflow-text's SentencePiece op would otherwise print "precompiled_charsmap is empty"
on standard error for every model it loads (imported OPUS-MT models are often so).
"""

import functools
import io
import os
import struct
import tempfile


@functools.cache
def compiled_charsmap(rules):
    """The compiled table of `rules`, a tuple of `(source, replacement)` str pairs (each
    a sequence of characters, the two different), that rewrites each source and keeps
    everything else (bytes)."""
    import sentencepiece

    lines = "".join(
        f"{' '.join(f'{ord(c):X}' for c in source)}\t{' '.join(f'{ord(c):X}' for c in target)}\n"
        for source, target in rules
    )
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rules.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.write(lines)
        written = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(["a b"] * 4), model_writer=written, vocab_size=8,
            model_type="char", hard_vocab_limit=False, normalization_rule_tsv=path,
            minloglevel=2,
        )  # fmt: skip
    return _model(written.getvalue()).normalizer_spec.precompiled_charsmap


# A noncharacter whose rule the identity table holds, written as itself.
_KEPT = "\uffff"


@functools.cache
def identity_charsmap():
    """A compiled table that rewrites nothing: one rule, `_KEPT` to itself (the trainer
    refuses a rule that keeps its source, so the table is compiled with another
    replacement of the same length in bytes, which is then overwritten)."""
    table = compiled_charsmap(((_KEPT, "\ufffd"),))
    (trie,) = struct.unpack("<I", table[:4])
    replacements = table[4 + trie :]
    if replacements != "\ufffd".encode("utf-8") + b"\0":
        raise RuntimeError(f"unexpected SentencePiece table layout: {replacements!r}")
    return table[: 4 + trie] + _KEPT.encode("utf-8") + b"\0"


def with_identity_charsmap(proto):
    """`proto` (a serialized SentencePiece model) as is, or, where it has no compiled
    table (identity normalization), with `identity_charsmap()`: the same segmentation of
    every text."""
    model = _model(proto)
    if model.normalizer_spec.precompiled_charsmap:
        return proto
    model.normalizer_spec.precompiled_charsmap = identity_charsmap()
    return model.SerializeToString()


def _model(proto):
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return model
