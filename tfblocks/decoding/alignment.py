"""Word alignments of a translation, from a decoder layer's cross-attention.

A target subword is aligned to the source subword its cross-attention weighs most, in
one decoder layer, averaged over that layer's heads; EOS and padding are neither aligned
nor aligned to. Subwords are then merged into words on both sides, a word being a
subword that starts with SentencePiece's word-start mark `▁` (U+2581) and the subwords
after it that do not (the first subword of a sentence always starts a word), so word i
of a text is its i-th whitespace-separated word. Source word i and target word j are
aligned when any of their subwords are. The result is Pharaoh format, the one of
fast_align, Moses and fairseq's `--print-alignment`: `"i-j i-j ..."`, 0-based, sorted by
i then j, without repeats ("" when nothing aligns).

The attention is that of one teacher-forced forward pass of the finished translation
(`Transformer.encode` / `Transformer.decode(return_attention_scores=True)`, the pass
`Decoder.score` runs), so it holds for any search, and for any given target. Row t of
the weights is the decoder position that predicts target subword t (its input is
subword t − 1, or BOS), as fairseq and CTranslate2 pair them.

The layer: by default the penultimate decoder layer (the last when there is one),
averaged over all heads: Garg et al. 2019 ("Jointly Learning to Align and Translate
with Transformer Models") found that the averaged heads of the penultimate layer of a
Transformer trained only to translate give better alignments than the other layers.
fairseq's `--print-alignment` averages the heads of the last layer unless asked for
another (`alignment_layer`), and CTranslate2's `return_attention` gives the layer and
heads its model stores (`alignment_layer`, by default the last, and `alignment_heads`,
by default the first head only); `export_ctranslate2` stores this module's choice.
"""

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import EOS_ID, PAD_ID
from tfblocks.models.transformer import padding_mask, shift_right

WORD_START = "\u2581"  # SentencePiece's mark of a subword that starts a word


def alignment_layer(layer, num_decoder_layers):
    """The 0-based decoder layer to align with: `layer` (an int; a negative one counts
    from the last), or for None the penultimate layer (the last when there is one)."""
    if layer is None:
        return max(num_decoder_layers - 2, 0)
    return _checks.check_index("alignment_layer", layer, num_decoder_layers, "decoder layers")


def word_starts(pieces, vocab_size):
    """A bool NumPy array `[vocab_size]`: which ids' pieces (`pieces[id]`) start a word.

    Ids beyond `pieces` (a model's unused ids) start none.
    """
    starts = np.zeros([vocab_size], bool)
    starts[: len(pieces)] = [piece.startswith(WORD_START) for piece in pieces]
    return starts


def tokenizer_word_starts(tokenizer, vocab_size):
    """`word_starts` of a `tfblocks.text.SubwordTokenizer`'s SentencePiece pieces."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    return word_starts(pieces, vocab_size)


def cross_attention(model, source_ids, target_ids, layer):
    """Decoder layer `layer`'s cross-attention of a teacher-forced pass, averaged over
    its heads: float32 `[B, T, S]`, row t the position that predicts `target_ids[:, t]`.

    Args:
        model: an encoder–decoder `tfblocks.Transformer`.
        source_ids: int `[B, S]`, EOS-terminated and 0-padded.
        target_ids: int `[B, T]`, each row a target's ids and its EOS, 0-padded.
        layer: a 0-based decoder layer (`alignment_layer`).
    """
    memory = model.encode(source_ids, training=False)  # [B, S, d]
    _, scores = model.decode(
        shift_right(target_ids),
        memory,
        padding_mask(source_ids),
        training=False,
        return_attention_scores=True,
    )
    weights = tf.cast(scores[layer]["cross_attention"], tf.float32)  # [B, H, T, S]
    return tf.reduce_mean(weights, axis=1)  # [B, T, S]


def _words(ids, starts):
    """The 0-based word of each subword of `ids` `[B, L]`, given `starts` `[V]` bool."""
    first = tf.range(tf.shape(ids)[1]) == 0  # [L]: a sentence starts a word
    start = tf.logical_or(tf.gather(starts, ids), first[None, :])  # [B, L]
    return tf.cumsum(tf.cast(start, tf.int32), axis=1) - 1  # [B, L]


def _real(ids):
    """Which ids are subwords: neither EOS nor padding, bool like `ids`."""
    return (ids != PAD_ID) & (ids != EOS_ID)


def best_source(attention, source_ids):
    """The source subword each target subword attends to most: int32 `[B, T]`, a
    position of `source_ids` `[B, S]` that is neither EOS nor padding (0 when the row
    has none), given `attention` float `[B, T, S]` (`cross_attention`).

    >>> best_source([[[0.2, 0.5, 0.3], [0.1, 0.0, 0.9]]], [[5, 6, 1]]).numpy()
    array([[1, 0]], dtype=int32)
    """
    source_real = _real(tf.cast(source_ids, tf.int32))  # [B, S]
    # Attention weights are >= 0: -1 keeps EOS and padding from ever being the argmax.
    weights = tf.where(source_real[:, None, :], tf.cast(attention, tf.float32), -1.0)
    return tf.argmax(weights, axis=-1, output_type=tf.int32)  # [B, T]


def pharaoh(attention, source_ids, target_ids, source_starts, target_starts):
    """Word alignments in Pharaoh format from subword attention: `tf.string [B]`.

    Args:
        attention: float `[B, T, S]`, row t the weights of target subword t over the
            source subwords (`cross_attention`).
        source_ids: int `[B, S]`; EOS and PAD (0) are never aligned to.
        target_ids: int `[B, T]`; EOS and PAD are never aligned.
        source_starts: bool `[V]`, which source ids start a word (`word_starts`).
        target_starts: bool `[V]`, the same for the target's ids.

    Returns:
        One string per row: `"i-j ..."`, source word i aligned to target word j, sorted
        by i then j, without repeats; `""` when the row has no real target or source
        subword.

    Example:

    >>> starts = np.array([False, False, True, True, False])  # ids 2, 3 start words
    >>> attention = [[[0.1, 0.7, 0.2, 0.0], [0.6, 0.1, 0.3, 0.0], [0.0, 0.0, 0.0, 1.0]]]
    >>> pharaoh(attention, [[3, 4, 2, 1]], [[3, 2, 1]], starts, starts).numpy()
    array([b'0-0 0-1'], dtype=object)
    """
    source_ids = tf.cast(source_ids, tf.int32)
    target_ids = tf.cast(target_ids, tf.int32)
    source_real = _real(source_ids)  # [B, S]
    target_real = _real(target_ids)  # [B, T]
    best = best_source(attention, source_ids)  # [B, T]: a source subword
    source_word = tf.gather(_words(source_ids, source_starts), best, batch_dims=1)  # [B, T]
    target_word = _words(target_ids, target_starts)  # [B, T]
    aligned = target_real & tf.reduce_any(source_real, axis=1, keepdims=True)  # [B, T]
    source_len, target_len = tf.shape(source_ids)[1], tf.shape(target_ids)[1]
    source_hot = tf.one_hot(source_word, source_len)  # [B, T, S words]
    target_hot = tf.one_hot(target_word, target_len) * tf.cast(aligned, tf.float32)[..., None]
    links = tf.einsum("bti,btj->bij", source_hot, target_hot) > 0  # [B, S words, T words]
    where = tf.where(links)  # [N, 3]: (row, i, j) in row-major order, so sorted
    text = tf.strings.join(
        [tf.strings.as_string(where[:, 1]), tf.strings.as_string(where[:, 2])], "-"
    )  # [N]
    rows = tf.RaggedTensor.from_value_rowids(text, where[:, 0], nrows=tf.shape(links, tf.int64)[0])
    return tf.strings.reduce_join(rows, axis=1, separator=" ")  # [B]


def align(model, layer, source_ids, target_ids, source_starts, target_starts):
    """`pharaoh` of `cross_attention(model, source_ids, target_ids, layer)`: the word
    alignments of targets given their sources, `tf.string [B]`."""
    attention = cross_attention(model, source_ids, target_ids, layer)
    return pharaoh(attention, source_ids, target_ids, source_starts, target_starts)
