"""The SentencePiece models a LiteRT file tokenizes and detokenizes with.

A LiteRT file runs tensorflow-text's `FastSentencepieceTokenizer` (the only SentencePiece
ops LiteRT has without TensorFlow's Flex delegate). It implements SentencePiece's unigram
algorithm only and reads a model's pieces and normalizer itself, not through
SentencePiece. `litert_proto` gives it a copy of the tokenizer's model on which it
segments and detokenizes exactly as `SubwordTokenizer` does (tested on the phrasebook,
on lines of rare characters and on an imported OPUS-MT vocabulary):

- `UNUSED` pieces (an imported joint vocabulary's other side), which the fast tokenizer
  refuses: never produced in tokenizing (`CONTROL`), except where a run of unknown
  characters is such a piece, which `tokenize` gives its id (`_source_model`,
  `merge_unknown_runs`); decoded as their text in detokenizing (`NORMAL`);
- tabs and line breaks: the fast tokenizer reads "\\t", "\\r" and "\\n" as spaces where
  SentencePiece reads only " ". A model that normalizes them to " " (`nmt_nfkc`,
  tfblocks' default) needs nothing; one that keeps them (`identity`) is given a
  normalization that writes each as a private-use character, and its pieces likewise,
  so that they stay characters of their own;
- `<unk>` is written as the model's surface for it (`litert._texts` keeps its space at
  the start of a text, as SentencePiece does).

`check_tokenizer` refuses what no copy can fix: a model of another algorithm (`bpe`,
`word`: BPE applies its merges in a learnt order, which no unigram lattice reproduces; a
`char` model segments alike and is kept), byte-fallback pieces, and a normalization
table of another kind than `nmt_nfkc`'s that keeps tabs or line breaks.
"""

from tfblocks.ids import PAD_ID, UNK_ID
from tfblocks.text.charsmaps import compiled_charsmap
from tfblocks.text.multilingual import target_tag, vocabulary_tags

# The model types whose segmentation the fast tokenizer reproduces.
MODEL_TYPES = ("unigram", "char")
# The characters the fast tokenizer reads as spaces besides " ".
_SPACES = ("\t", "\n", "\r")
_PRIVATE = 0x10FF00  # + the character's code: its private-use stand-in


def _model(tokenizer):
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(tokenizer.proto)
    return model


def _type_name(model):
    spec = model.trainer_spec
    return spec.ModelType.Name(spec.model_type).lower()


def _kept_spaces(tokenizer):
    """Which of `_SPACES` the tokenizer's normalization keeps (does not make a space)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    return tuple(c for c in _SPACES if c in processor.normalize(f"a{c}b"))


def check_tokenizer(tokenizer, name="tokenizer"):
    """Refuses (ValueError, one line naming `name`) a tokenizer whose segmentation or
    pieces a LiteRT file cannot reproduce (see the module docstring)."""
    model = _model(tokenizer)
    kind = _type_name(model)
    if kind not in MODEL_TYPES:
        raise ValueError(
            f"A LiteRT file tokenizes with tensorflow-text's FastSentencepieceTokenizer, which "
            f"implements SentencePiece's unigram algorithm only: the {name} is a {kind} "
            "SentencePiece model, which it would segment differently; train the model with "
            "--tokenizer-model unigram (model_type='unigram')."
        )
    pieces = model.SentencePiece
    known = {pieces.NORMAL, pieces.UNKNOWN, pieces.CONTROL, pieces.USER_DEFINED, pieces.UNUSED}
    for piece in model.pieces:
        if piece.type not in known:
            raise ValueError(
                f"A LiteRT file cannot hold the {name}'s {pieces.Type.Name(piece.type)} piece "
                f"{piece.piece!r} (tensorflow-text's FastSentencepieceTokenizer has no byte "
                "fallback); train the tokenizer without byte_fallback."
            )
    if model.normalizer_spec.precompiled_charsmap and _kept_spaces(tokenizer):
        raise ValueError(
            f"The {name}'s normalization ({model.normalizer_spec.name!r}) keeps tabs or line "
            "breaks, which a LiteRT file's tokenizer reads as spaces; train the tokenizer "
            "with normalization 'nmt_nfkc' or 'identity'."
        )


def _source_model(tokenizer):
    """`(model, unknown)`: the SentencePiece model (a `ModelProto`) a LiteRT file
    tokenizes with, and the ids of the unused pieces it produces for unknown text."""
    model = _model(tokenizer)
    pieces = model.SentencePiece
    kept = _kept_spaces(tokenizer)
    if kept:  # an identity normalization (`check_tokenizer` refuses another kind)
        stand_in = {ord(c): chr(_PRIVATE + ord(c)) for c in kept}
        model.normalizer_spec.precompiled_charsmap = compiled_charsmap(
            tuple((c, chr(_PRIVATE + ord(c))) for c in kept)
        )
        for piece in model.pieces:
            piece.piece = piece.piece.translate(stand_in)
    # `SubwordTokenizer.tokenize` gives a run of unknown characters the id of the unused
    # piece that is its text. The fast tokenizer gets the unused pieces made only of
    # unknown characters (no piece of one character of their own: in no other piece
    # either, as SentencePiece trains) as pieces of the lowest score, which it prefers to
    # <unk> and which leave its penalty for <unk> as it was; `merge_unknown_runs` makes a
    # run of several such pieces, or of them and <unk>, one <unk> again.
    usable = (pieces.NORMAL, pieces.USER_DEFINED)
    single = {p.piece for p in model.pieces if p.type in usable and len(p.piece) == 1}
    lowest = min([0.0] + [p.score for p in model.pieces if p.type in usable])
    unknown = []
    for index, piece in enumerate(model.pieces):
        if piece.type != pieces.UNUSED:
            continue
        if all(c not in single for c in piece.piece):
            piece.type, piece.score = pieces.NORMAL, lowest
            unknown.append(index)
        else:
            piece.type = pieces.CONTROL  # never produced: the fast tokenizer skips it
    return model, unknown


def unknown_ids(tokenizer):
    """The ids of the unused pieces a LiteRT file's source tokenizer produces where
    SentencePiece leaves text unknown (see `_source_model`); `[]` for a tokenizer
    without unused pieces, as tfblocks trains them."""
    return _source_model(tokenizer)[1]


def litert_proto(tokenizer, side):
    """The SentencePiece model (bytes) a LiteRT file's `FastSentencepieceTokenizer` is
    made from for `tokenizer`: for `side` `"source"` (tokenizing; then
    `merge_unknown_runs` with `unknown_ids`) or `"target"` (detokenizing); a ValueError
    for what `check_tokenizer` refuses."""
    check_tokenizer(tokenizer, f"{side} tokenizer")
    if side == "source":
        return _source_model(tokenizer)[0].SerializeToString()
    model = _model(tokenizer)
    pieces = model.SentencePiece
    for piece in model.pieces:
        if piece.type == pieces.UNUSED:
            piece.type = pieces.NORMAL  # decoded as their text, as SentencePiece does
    # Written as SentencePiece writes them: <unk> as its surface (the fast detokenizer
    # has a fixed one), and BOS, never detokenized, as " " (`litert._texts` puts it in
    # front of a text that starts with <unk>). Spaces, not "▁": no other piece holds one.
    spec = model.trainer_spec
    for index, text in ((spec.unk_id, spec.unk_surface), (spec.bos_id, " ")):
        model.pieces[index].piece, model.pieces[index].type = text, pieces.NORMAL
    return model.SerializeToString()


def merge_unknown_runs(values, splits, unknown, vocabulary_size):
    """Tokens `(values [N], row splits [B + 1])` of the fast tokenizer with each run of
    two or more tokens in a row that are <unk> or of `unknown` (ids) made one <unk>, as
    SentencePiece leaves a run of unknown characters that is no piece; built-in ops."""
    import numpy as np
    import tensorflow as tf

    if not unknown:
        return values, splits
    table = np.zeros([vocabulary_size], np.int32)
    table[[UNK_ID, *unknown]] = 1  # [V] 1 where a token is unknown text
    size = tf.size(values)
    tokens = tf.concat([values, [PAD_ID]], axis=0)  # [N + 1]: a last token of no row
    flag = tf.gather(tf.constant(table), tokens) > 0  # [N + 1]
    ones = tf.ones_like(splits[:-1])
    starts = tf.scatter_nd(splits[:-1, None], ones, [size + 1]) > 0  # [N + 1] rows' first tokens
    previous = tf.concat([[False], flag[:-1]], axis=0) & flag & ~starts  # [N + 1] continues a run
    following = tf.concat([previous[1:], [False]], axis=0)  # [N + 1] a run continues after it
    merged = tf.where(previous | following, UNK_ID, tokens)[:size]  # [N]
    keep = ~previous[:size]  # [N] the first token of each run stays
    counts = tf.concat([[0], tf.cumsum(tf.cast(keep, tf.int32))], axis=0)  # [N + 1]
    return tf.boolean_mask(merged, keep), tf.gather(counts, splits)


def fast_tokenizer(tokenizer, side):
    """A `tensorflow_text.FastSentencepieceTokenizer` of `litert_proto(tokenizer, side)`;
    made inside the traced function, whose constant its converted model then is."""
    import tensorflow_text

    return tensorflow_text.FastSentencepieceTokenizer(litert_proto(tokenizer, side))


def tag_ids(tokenizer, target_lang):
    """The ids `Translator.encode_source` puts in front of a source to translate into
    `target_lang` (those of its tag `<2xx>` and the space after it), a list; `[]` for
    None. A ValueError naming the tokenizer's tags when the tag is not one of its pieces.
    """
    if target_lang is None:
        return []
    tag = target_tag(target_lang)
    languages = vocabulary_tags(tokenizer.proto)
    if target_lang not in languages:
        tags = ", ".join(target_tag(language) for language in languages)
        raise ValueError(
            f"target_lang={target_lang!r}: the model's vocabulary has no tag {tag} (its "
            f"tags: {tags or 'none, a model of one direction'})."
        )
    return tokenizer.tokenize([f"{tag} "]).to_list()[0][:-1]  # without EOS
