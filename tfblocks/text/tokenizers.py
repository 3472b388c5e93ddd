"""SentencePiece subword tokenizers that run inside the TensorFlow graph.

Training uses the `sentencepiece` package; tokenizing and detokenizing use tensorflow-text's
`SentencepieceTokenizer`, so both work inside `tf.function`, `tf.data` and SavedModels, and raw
Japanese (no spaces) is split into subwords directly. Nothing here is hand-written tokenization.

Ids follow the project convention: 0 = pad, 1 = EOS, 2 = unknown, 3 = BOS. `tokenize` appends EOS
and never emits BOS (the model prepends BOS as the decoder's start symbol); `detokenize` stops at
the first EOS and skips pad and BOS. The trained model proto travels with the tokenizer: `save`
writes it to a file, and it is a variable of the `tf.Module`, so a SavedModel holding the
tokenizer holds the proto (it is never re-trained when loaded).

A model may list `UNUSED` pieces: pieces of its vocabulary that its segmentation never
produces, such as the other side's pieces of an imported joint vocabulary
(`tfblocks.text.reordered_tokenizer`). Where SentencePiece leaves a piece of text unknown
and that text is such a piece, `tokenize` gives the piece's own id, as Hugging Face's
`MarianTokenizer` looks each piece's string up in `vocab.json` (e.g. "!" that only the
source side learnt keeps its id in a target); `unknown_as_pieces` does the same for the
`sentencepiece` package's ids.
"""

import hashlib
import io
import os

import sentencepiece
import tensorflow as tf
import tensorflow_text

from tfblocks import _checks
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.text.charsmaps import with_identity_charsmap
from tfblocks.text.streamed import sample_pairs

_MODEL_TYPES = ("unigram", "bpe", "char", "word")


class SubwordTokenizer(tf.Module):
    """A trained SentencePiece model as a graph-friendly tokenizer.

    Args:
        proto: the serialized SentencePiece model (bytes), e.g. from `train_tokenizer`.
        name: name of the `tf.Module`.

    Attributes:
        vocabulary_size: number of ids, including pad, EOS, unknown and BOS.
        model_proto: a string `tf.Variable` holding `proto`, so SavedModels carry it.

    Example:

    >>> tokenizer = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 50,
    ...                             vocab_size=60)
    >>> ids = tokenizer.tokenize(["今日のランチはカレーだ。"])
    >>> int(ids[0, -1]) == EOS_ID
    True
    >>> tokenizer.detokenize(ids.to_tensor()).numpy()[0].decode()
    '今日のランチはカレーだ。'
    """

    def __init__(self, proto, name=None):
        super().__init__(name=name)
        if not isinstance(proto, bytes) or not proto:
            raise TypeError(f"`proto` must be non-empty bytes, got {type(proto).__name__}.")
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        ids = (processor.pad_id(), processor.eos_id(), processor.unk_id(), processor.bos_id())
        if ids != (PAD_ID, EOS_ID, UNK_ID, BOS_ID):
            raise ValueError(
                "`proto` must use pad=0, EOS=1, unknown=2, BOS=3 (train it with "
                f"`train_tokenizer`), got pad, EOS, unknown, BOS = {ids}."
            )
        self._proto = proto
        self._op_proto = with_identity_charsmap(proto)
        # The ops' name scope: a loaded SavedModel shares one parsed model among the
        # SentencePiece ops of one node name, so each model gets its own (its digest).
        self._op_name = f"sentencepiece_{hashlib.sha256(proto).hexdigest()[:16]}"
        self.vocabulary_size = processor.get_piece_size()
        unused = unused_pieces(processor)
        with tf.device("CPU:0"):  # string variables and tables have no accelerator kernels
            self.model_proto = tf.Variable(proto, trainable=False, name="sentencepiece_model")
            # piece → id of the unused pieces (module docstring); None when there are none.
            self.unused_pieces = None
            if unused:
                initializer = tf.lookup.KeyValueTensorInitializer(
                    list(unused), list(unused.values()), tf.string, tf.int32
                )
                self.unused_pieces = tf.lookup.StaticHashTable(initializer, UNK_ID)

    def _sentencepiece(self, out_type=tf.int32):
        # The tensorflow-text op keeps the parsed model in a kernel-owned resource. Created
        # eagerly, that resource dies with `keras.utils.clear_session()` (which clears the kernel
        # cache); created here, inside each traced function, it is part of the function's graph
        # and lives as long as the function (and any SavedModel traced from it).
        return tensorflow_text.SentencepieceTokenizer(
            model=self._op_proto, out_type=out_type, add_eos=True, name=self._op_name
        )

    @property
    def proto(self):
        """The serialized SentencePiece model (bytes)."""
        return self._proto

    @property
    def op_proto(self):
        """`proto` as tensorflow-text's SentencePiece ops load it: the same segmentation,
        with a normalization table where it has none (`tfblocks.text.charsmaps`)."""
        return self._op_proto

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """Splits a batch of strings into subword ids with EOS appended.

        Args:
            strings: 1-D string tensor (or list of str), raw text.

        Returns:
            An int32 `tf.RaggedTensor` `[batch, (length)]`, each row ending with EOS (1).
            An unknown piece whose text is an unused piece of the model has that piece's
            id (module docstring).
        """
        ids = self._sentencepiece().tokenize(strings)
        if self.unused_pieces is None:
            return ids
        # The same segmentation as strings: an unknown piece is its (normalized) text.
        pieces = self._sentencepiece(tf.string).tokenize(strings).flat_values
        flat = ids.flat_values
        flat = tf.where(flat == UNK_ID, self.unused_pieces.lookup(pieces), flat)
        return ids.with_flat_values(flat)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
    def detokenize(self, ids):
        """Turns padded id rows back into strings, stopping at EOS and skipping pad and BOS.

        Ids this vocabulary does not have (a model whose output layer is larger, e.g. one
        vocabulary size for a source and a target tokenizer) are skipped too.

        Args:
            ids: int32 `[batch, length]`; pad with 0 (for a ragged tensor, `ids.to_tensor()`).

        Returns:
            A 1-D string tensor `[batch]`.
        """
        keep = kept_ids(ids, self.vocabulary_size)
        return self._sentencepiece().detokenize(tf.ragged.boolean_mask(ids, keep))

    def save(self, path):
        """Writes the SentencePiece model proto to `path` (conventionally `*.model`)."""
        with open(path, "wb") as f:
            f.write(self._proto)

    @classmethod
    def load(cls, path):
        """Reads a tokenizer written by `save` (or any SentencePiece `.model` with our ids)."""
        with open(path, "rb") as f:
            return cls(f.read(), name=os.path.splitext(os.path.basename(os.fspath(path)))[0])


def unused_pieces(processor):
    """`{piece: id}` of the `UNUSED` pieces of a `sentencepiece.SentencePieceProcessor`."""
    size = processor.get_piece_size()
    return {processor.id_to_piece(i): i for i in range(size) if processor.is_unused(i)}


def unknown_as_pieces(processor, texts):
    """The ids `SubwordTokenizer.tokenize` gives `texts` (a list of str), without EOS,
    from the `sentencepiece` processor of its model: each unknown piece whose text is an
    unused piece has that piece's id (the module docstring). A list of lists of int.

    >>> import sentencepiece
    >>> tok = train_tokenizer(["the cat sat on the mat"] * 20, vocab_size=20)
    >>> processor = sentencepiece.SentencePieceProcessor(model_proto=tok.proto)
    >>> unknown_as_pieces(processor, ["the dog"]) == processor.encode(["the dog"])
    True
    """
    rows = processor.encode(list(texts))
    unused = unused_pieces(processor)
    if not unused:
        return rows
    unk = processor.unk_id()
    return [
        [unused.get(piece, unk) if i == unk else i for i, piece in zip(row, pieces, strict=True)]
        for row, pieces in zip(rows, processor.encode(list(texts), out_type=str), strict=True)
    ]


def kept_ids(ids, vocabulary_size):
    """Which of `ids` `[B, T]` `detokenize` turns into text: `tf.bool [B, T]`, True before
    each row's first EOS except at PAD, BOS and ids a vocabulary of `vocabulary_size`
    lacks.

    >>> kept_ids(tf.constant([[3, 5, 9, 1, 6, 0]]), 8).numpy().tolist()
    [[False, True, False, False, False, False]]
    """
    before_eos = tf.math.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1) == 0
    keep = before_eos & tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, BOS_ID)
    return keep & (ids < vocabulary_size)


def train_tokenizer(
    lines,
    vocab_size,
    model_type="unigram",
    *,
    character_coverage=1.0,
    normalization="nmt_nfkc",
    num_threads=2,
    trainer_options=None,
):
    """Trains a SentencePiece model on raw text and returns it as a `SubwordTokenizer`.

    Args:
        lines: iterable of str, one sentence each (raw Japanese needs no pre-tokenization).
        vocab_size: the largest vocabulary wanted, >= 8; a smaller one is returned when the text
            does not support that many pieces (SentencePiece's `hard_vocab_limit=False`).
        model_type: `"unigram"` (default), `"bpe"`, `"char"` or `"word"`. On the small, regular
            phrasebook `"bpe"` finds word-like pieces where unigram splits some verbs into
            single characters.
        character_coverage: share of the training characters given their own piece; the
            rarest others become unknown (id 2). 1.0 (default) keeps every character seen,
            0.9995 is SentencePiece's advice for large Japanese corpora.
        normalization: SentencePiece normalization rule; `"nmt_nfkc"` (default) makes text such as
            full-width ASCII round-trip to its NFKC form, `"identity"` keeps every text exact.
        num_threads: training threads.
        trainer_options: optional dict of further `sentencepiece.SentencePieceTrainer` options.

    Returns:
        A `SubwordTokenizer` with pad 0, EOS 1, unknown 2, BOS 3.

    Example:

    >>> tokenizer = train_tokenizer(["今日のランチはカレーだ。"] * 20, vocab_size=30)
    >>> 8 <= tokenizer.vocabulary_size <= 30
    True
    """
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 8:
        raise ValueError(f"`vocab_size` must be an int >= 8, got vocab_size={vocab_size!r}.")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"`model_type` must be one of {_MODEL_TYPES}, got {model_type!r}.")
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(
            "`character_coverage` must be in (0, 1], "
            f"got character_coverage={character_coverage!r}."
        )
    if isinstance(lines, str):
        raise TypeError("`lines` must be an iterable of strings, got a single str.")
    lines = list(lines)
    bad = [line for line in lines if not isinstance(line, str)]
    if bad:
        raise TypeError(f"`lines` must hold only str, got {type(bad[0]).__name__}: {bad[0]!r}.")
    if not any(line.strip() for line in lines):
        raise ValueError("`lines` has no non-empty line to train on.")
    options = dict(trainer_options or {})
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            normalization_rule_name=normalization,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            hard_vocab_limit=False,
            num_threads=num_threads,
            minloglevel=options.pop("minloglevel", 2),
            **options,
        )
    except RuntimeError as error:
        if "required_chars" not in str(error):
            raise
        # SentencePiece needs one piece per kept character before any subword.
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the number of distinct characters to "
            f"keep; raise `vocab_size` or lower `character_coverage`. SentencePiece: {error}"
        ) from None
    return SubwordTokenizer(model.getvalue())


def train_tokenizers(
    pairs, vocab_size, model_type="unigram", *, shared=True, sample=None, seed=0, **kwargs
):
    """Trains the source and target tokenizers of a parallel corpus.

    Args:
        pairs: iterable of `(source, target)` strings (a list, a `Corpus`, a phrasebook split).
        vocab_size: the largest vocabulary of each tokenizer (see `train_tokenizer`).
        model_type: SentencePiece model type.
        shared: one vocabulary trained on both sides (default; lets the model tie its source,
            target and softmax embeddings), or one tokenizer per side.
        sample: None (every pair), or at most this many sentences of each side: a random
            sample of `sample` pairs (seeded by `seed`), what SentencePiece's
            `input_sentence_size` does to a large corpus, so that a corpus of millions of
            pairs trains its tokenizer in bounded time and memory.
        seed: the sample's seed.
        **kwargs: further `train_tokenizer` arguments.

    Returns:
        `(source_tokenizer, target_tokenizer)`; the same object twice when `shared`.

    Example:

    >>> pairs = [("今日のランチはカレーだ。", "Today's lunch is curry.")] * 20
    >>> source, target = train_tokenizers(pairs, vocab_size=40)
    >>> source is target
    True
    """
    if not isinstance(shared, bool):
        raise TypeError(f"`shared` must be a bool, got shared={shared!r}.")
    if sample is None:
        pairs = list(pairs)
    else:
        pairs = sample_pairs(pairs, _checks.check_positive_int("sample", sample), seed)
    sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
    if shared:
        tokenizer = train_tokenizer(sources + targets, vocab_size, model_type, **kwargs)
        return tokenizer, tokenizer
    return (
        train_tokenizer(sources, vocab_size, model_type, **kwargs),
        train_tokenizer(targets, vocab_size, model_type, **kwargs),
    )
