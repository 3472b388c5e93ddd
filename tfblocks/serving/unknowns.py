"""Unknown-word replacement: a translation's `<unk>` becomes the source word it is aligned to.

A target subword with the unknown id (`tfblocks.ids.UNK_ID`: what a model emits for
something its target vocabulary cannot spell, such as a product name's characters) is
replaced by the source text its cross-attention weighs most: the source subword chosen
as `Translator.align` chooses it (`tfblocks.decoding.alignment`: one decoder layer,
its heads averaged, in a teacher-forced pass of the finished translation), then widened
to its source word, copied as the source writes it (before SentencePiece's
normalization):

- the whitespace-separated source word that holds the aligned subword ("Zyx" whole,
  though SentencePiece splits it into `<unk>`, `y`, `x`);
- in a word written without spaces (one holding a character of the CJK, kana, Thai,
  Lao, Khmer or Myanmar blocks: a Japanese sentence is one such word), the aligned
  subword's own surface instead (for the lone `▁` that starts a sentence, which has
  none, the next subword's).

The rest of the translation is decoded by the target tokenizer's SentencePiece model,
as `Translator` decodes it, so a translation without an unknown subword is unchanged.
"""

import re

import numpy as np
import tensorflow as tf

from tfblocks.decoding import alignment
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# A character of a script written without spaces between words.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3000-\u9fff\uf900-\ufaff\uff00-\uffef"
    "\U00020000-\U0003ffff]"
)


def aligned_sources(model, layer, source_ids, ids):
    """The source subword each hypothesis subword is aligned to: int32 `[B, K, L]`.

    Args:
        model: an encoder–decoder `tfblocks.Transformer`.
        layer: the 0-based decoder layer to align with (`alignment.alignment_layer`).
        source_ids: int `[B, S]`, EOS-terminated and 0-padded.
        ids: int `[B, K, L]`, K hypotheses of each source (EOS-terminated, 0-padded).
    """
    shape = tf.shape(ids)
    flat = tf.reshape(ids, [-1, shape[2]])  # [B·K, L]
    sources = tf.repeat(source_ids, shape[1], axis=0)  # [B·K, S]
    attention = alignment.cross_attention(model, sources, flat, layer)  # [B·K, L, S]
    return tf.reshape(alignment.best_source(attention, sources), shape)  # [B, K, L]


def source_words(text, starts, ends):
    """The replacement of each source subword of `text` (module docstring): a list of
    str, given the subwords' UTF-8 byte offsets in `text` (`starts`, `ends`).

    >>> source_words("I like Zyx.", [0, 1, 6, 7, 8, 9, 10], [0, 1, 6, 7, 8, 9, 11])[3:6]
    ['Zyx.', 'Zyx.', 'Zyx.']
    >>> source_words("今日はカレー", [0, 0, 6, 9], [0, 6, 9, 18])
    ['今日', '今日', 'は', 'カレー']
    """
    data = text.encode("utf-8")
    chars = lambda offset: len(data[:offset].decode("utf-8", "ignore"))  # noqa: E731
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    surfaces = [
        data[s:e].decode("utf-8", "replace").strip() for s, e in zip(starts, ends, strict=True)
    ]
    out = []
    for index, start in enumerate(starts):
        begin = chars(start)
        # The word holding the subword (or, for the space before a word, that word).
        word = next((w for w in words if w[1] > begin), words[-1] if words else (0, 0))
        word = text[word[0] : word[1]]
        if _UNSPACED.search(word):
            word = next((s for s in surfaces[index:] if s), "")
        out.append(word)
    return out


def replace(texts, translations, ids, aligned, source_tokenizer, target_tokenizer):
    """The translations with each unknown subword replaced (module docstring).

    Args:
        texts: the B source texts (str).
        translations: `[B][K]` str, the hypotheses as the target tokenizer decodes them.
        ids: int `[B, K, L]`, their subwords (EOS-terminated, 0-padded).
        aligned: int `[B, K, L]`, each subword's source subword (`aligned_sources`).
        source_tokenizer, target_tokenizer: `tfblocks.text.SubwordTokenizer`s.

    Returns:
        `[B][K]` str: a hypothesis without an unknown subword as it was.
    """
    import sentencepiece
    import tensorflow_text

    ids, aligned = np.asarray(ids), np.asarray(aligned)
    target = sentencepiece.SentencePieceProcessor(model_proto=target_tokenizer.proto)
    splitter = tensorflow_text.SentencepieceTokenizer(model=source_tokenizer.op_proto)
    _, starts, ends = splitter.tokenize_with_offsets(tf.constant(list(texts), tf.string))
    out = []
    for row, text in enumerate(texts):
        words = None  # found on the row's first unknown subword
        hypotheses = []
        for k, translation in enumerate(translations[row]):
            pieces, unknown = [], False
            for position, id_ in enumerate(ids[row, k].tolist()):
                if id_ == EOS_ID:
                    break
                if id_ in (PAD_ID, BOS_ID) or id_ >= target.get_piece_size():
                    continue  # as `SubwordTokenizer.detokenize` skips them
                if id_ == UNK_ID and text.strip():
                    if words is None:
                        words = source_words(text, starts[row].numpy(), ends[row].numpy())
                    pieces.append(words[aligned[row, k, position]])
                    unknown = True
                else:
                    pieces.append(target.id_to_piece(id_))
            # A piece that is not in the vocabulary is decoded as it is written.
            hypotheses.append(target.decode_pieces(pieces) if unknown else translation)
        out.append(hypotheses)
    return out
