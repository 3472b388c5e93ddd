"""A SentencePiece model given another vocabulary order: how imported models' tokenizers
become `SubwordTokenizer`s.

An imported model (e.g. OPUS-MT) numbers its tokens with its own vocabulary (`vocab.json`:
piece → id) and splits text with a SentencePiece model whose ids are not the model's. Rather
than a lookup table beside the tokenizer, `reordered_tokenizer` writes a new SentencePiece
model whose piece `i` *is* the model's token `i`: the same pieces with the same scores (so
the same segmentation), listed in the model's order, with tfblocks' special ids (`<pad>` 0,
`</s>` 1, `<unk>` 2, `<s>` 3). The piece→id mapping then lives in the SentencePiece model
itself, so everything that carries a `SubwordTokenizer` (presets, run folders, the
strings-in SavedModel, CTranslate2 exports) carries it, and serving still needs only
TensorFlow and tensorflow-text.

Pieces of the vocabulary that this SentencePiece model does not produce (the other side's
pieces in a shared vocabulary) are kept as `UNUSED` pieces: never produced by the
segmentation, still decoded, and the id of text the model leaves unknown that is one of
them (`SubwordTokenizer.tokenize`, as Hugging Face's `MarianTokenizer` looks pieces up).
Target-language tags such as `>>fra<<` become user-defined pieces, so they stay one piece
(written at the start of a sentence and followed by a space, as OPUS-MT expects them).
"""

import re

import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.text.tokenizers import SubwordTokenizer

TAG = re.compile(r"^>>.+<<$")  # a target-language tag of multilingual OPUS-MT models
_SPECIAL = {PAD_ID: "pad", EOS_ID: "eos", UNK_ID: "unk", BOS_ID: "bos"}
_Piece = sentencepiece_model_pb2.ModelProto.SentencePiece


def reordered_tokenizer(proto, pieces, name=None, tags=None, control=()):
    """A `SubwordTokenizer` whose id `i` is the piece `pieces[i]`.

    Args:
        proto: a serialized SentencePiece model (bytes), e.g. OPUS-MT's `source.spm`.
        pieces: the new vocabulary, one piece string per id; ids 0–3 are tfblocks' pad,
            EOS, unknown and BOS (`PAD_ID`, `EOS_ID`, `UNK_ID`, `BOS_ID`) whatever their
            strings. Pieces that `proto` lacks are kept unused, tags `>>xx<<` as one piece.
        name: name of the tokenizer's `tf.Module`.
        tags: the pieces to keep as tags (one piece, written at the start of a text and
            followed by a space: M2M-100's `__de__`, NLLB's `deu_Latn` on the source
            side); None: those of the form `>>xx<<`.
        control: pieces that text never turns into and that decode to nothing (a
            language token the decoder is made to start with, on the target side).

    Returns:
        A `SubwordTokenizer` with `len(pieces)` ids.

    Raises:
        ValueError: fewer than 5 pieces, or a piece twice.

    Example:

    >>> import sentencepiece, io
    >>> model = io.BytesIO()
    >>> sentencepiece.SentencePieceTrainer.train(
    ...     sentence_iterator=iter(["the cat sat", "the mat"] * 20), model_writer=model,
    ...     vocab_size=16, hard_vocab_limit=False, minloglevel=2)
    >>> processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    >>> words = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    >>> pieces = ["<pad>", "</s>", "<unk>", "<s>", ">>fra<<", *reversed(words)]
    >>> tokenizer = reordered_tokenizer(model.getvalue(), pieces)
    >>> ids = tokenizer.tokenize([">>fra<< the cat"]).to_list()[0]
    >>> [pieces[i] for i in ids] == [">>fra<<", *processor.encode("the cat", out_type=str), "</s>"]
    True
    """
    pieces = [str(piece) for piece in pieces]
    tags, control = None if tags is None else set(tags), set(control)
    if len(pieces) <= BOS_ID + 1:
        raise ValueError(f"`pieces` must hold more than {BOS_ID + 1} pieces, got {len(pieces)}.")
    seen = {}
    for i, piece in enumerate(pieces):
        if piece in seen:
            raise ValueError(f"`pieces` holds {piece!r} twice: ids {seen[piece]} and {i}.")
        seen[piece] = i
    original = sentencepiece_model_pb2.ModelProto()
    original.ParseFromString(proto)
    known = {p.piece: p for p in original.pieces if p.type in (_Piece.NORMAL, _Piece.USER_DEFINED)}
    prefix = "▁" if original.normalizer_spec.add_dummy_prefix else ""

    model = sentencepiece_model_pb2.ModelProto()
    model.CopyFrom(original)
    del model.pieces[:]
    if "self_test_data" in model.DESCRIPTOR.fields_by_name:  # expects the old ids
        model.ClearField("self_test_data")
    for i, piece in enumerate(pieces):
        if i in _SPECIAL:
            kind = _Piece.UNKNOWN if i == UNK_ID else _Piece.CONTROL
            setattr(model.trainer_spec, f"{_SPECIAL[i]}_id", i)
            setattr(model.trainer_spec, f"{_SPECIAL[i]}_piece", piece)
            model.pieces.add(piece=piece, score=0.0, type=kind)
        elif piece in control:
            model.pieces.add(piece=piece, score=0.0, type=_Piece.CONTROL)
        elif piece in known:
            model.pieces.add(piece=piece, score=known[piece].score, type=known[piece].type)
        elif TAG.match(piece) if tags is None else piece in tags:
            # After SentencePiece's dummy prefix "▁", so that ">>fra<< text" starts with it.
            model.pieces.add(piece=prefix + piece, score=0.0, type=_Piece.USER_DEFINED)
        else:
            model.pieces.add(piece=piece, score=0.0, type=_Piece.UNUSED)
    serialized = model.SerializeToString()
    sentencepiece.SentencePieceProcessor(model_proto=serialized)  # refuses a broken model
    return SubwordTokenizer(serialized, name=name)
