"""The SentencePiece ops of a LiteRT file segment and detokenize as the model's tokenizer.

Each test converts a small `tf.function` made of the file's own pieces
(`litert._source_ids`, `litert._texts`) into a LiteRT file and runs it with the
interpreter: the ids it gives are compared with `SubwordTokenizer.tokenize`, its strings
with `SubwordTokenizer.detokenize`.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import interpreter as litert  # the `litert` extra, part of `test`

from tests.fixtures import WHITESPACE, random_unicode_lines
from tfblocks.models import import_marian
from tfblocks.serving import litert_tokenizers
from tfblocks.serving.litert import _source_ids, _texts, convert
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.text.multilingual import tag_source
from tfblocks.text.tokenizers import kept_ids

MARIAN = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian", "shared")
TAGS = ["<2en>", "<2ja>"]


@pytest.fixture(scope="module")
def texts():
    """Phrasebook sentences of both sides, lines of rare characters (every whitespace
    character, controls, combining marks, astral characters, ...) and blank lines."""
    pairs = load_phrasebook(size=1000)["test"][:30]
    return (
        [side for pair in pairs for side in pair]
        + random_unicode_lines(80, seed=3, long_length=300)
        + ["", " ", "\t", "a\tb\r\nc", "".join(WHITESPACE), "<2en>", "x <2ja> y"]
    )


def _tokenizer(model_type, **kwargs):
    pairs = load_phrasebook(size=1000)["train"][:384]
    return train_tokenizer(
        [side for pair in pairs for side in pair], vocab_size=300, model_type=model_type,
        trainer_options={"user_defined_symbols": TAGS}, **kwargs,
    )  # fmt: skip


def _interpreter(function, tmp_path):
    from tensorflow_text import tflite_registrar

    path = tmp_path / "ops.tflite"
    path.write_bytes(convert(function))
    interpreter = litert.InterpreterWithCustomOps(
        model_path=str(path), custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
    )
    return interpreter.get_signature_runner()


def file_ids(tokenizer, texts, tmp_path, target_lang=None):
    """The source ids `[B, S]` (EOS-terminated, 0-padded) a LiteRT file makes of `texts`,
    and which rows it takes as blank."""
    prefix = litert_tokenizers.tag_ids(tokenizer, target_lang)
    longest = max(len(row) for row in tokenizer.tokenize(texts).to_list()) + len(prefix) + 1

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def ids(text):
        source, blank = _source_ids(tokenizer, text, longest, prefix)
        return {"ids": source, "blank": tf.cast(blank, tf.int32)}

    out = _interpreter(ids, tmp_path)(text=np.array(texts, object))
    rows = [[int(i) for i in row if i != 0] for row in out["ids"]]
    return rows, out["blank"].astype(bool)


def file_texts(tokenizer, ids, tmp_path):
    """The strings a LiteRT file's detokenizer makes of `ids` `[B, L]`."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")],
                 autograph=False)  # fmt: skip
    def texts(ids):
        return {"text": _texts(tokenizer, ids, kept_ids(ids, tokenizer.vocabulary_size))}

    return [t.decode("utf-8") for t in _interpreter(texts, tmp_path)(ids=ids)["text"]]


def _every_id(tokenizer):
    """A row per id of `tokenizer`'s vocabulary, then one row of them all: `[V + 1, V]`."""
    size = tokenizer.vocabulary_size
    rows = np.zeros([size + 1, size], np.int32)
    rows[np.arange(size), 0] = np.arange(size)
    rows[size] = np.arange(size)
    rows[size, 1] = 5  # not EOS, which ends a row
    return rows


def _check_segmentation_and_detokenizer(tokenizer, texts, tmp_path):
    expected = tokenizer.tokenize(texts).to_list()
    rows, blank = file_ids(tokenizer, texts, tmp_path)
    mismatched = [(t, e, r) for t, e, r in zip(texts, expected, rows, strict=True) if e != r]
    assert not mismatched, mismatched[:3]
    assert blank.tolist() == [len(row) == 1 for row in expected]
    ids = tokenizer.tokenize(texts).to_tensor()
    for batch in (ids, _every_id(tokenizer)):
        want = [t.decode("utf-8") for t in tokenizer.detokenize(batch).numpy()]
        assert file_texts(tokenizer, np.asarray(batch, np.int32), tmp_path) == want


@pytest.mark.parametrize("model_type", ["unigram", "char"])
def test_the_file_segments_and_detokenizes_as_the_tokenizer(model_type, texts, tmp_path):
    _check_segmentation_and_detokenizer(_tokenizer(model_type), texts, tmp_path)


def test_an_identity_normalized_tokenizer_keeps_tabs_and_line_breaks(texts, tmp_path):
    """SentencePiece's identity normalization keeps "\\t", "\\r", "\\n" as characters,
    where tensorflow-text's tokenizer would read them as spaces."""
    tokenizer = _tokenizer("unigram", normalization="identity")
    _check_segmentation_and_detokenizer(tokenizer, texts, tmp_path)


def test_an_imported_opus_mt_vocabulary_with_unused_pieces(texts, tmp_path):
    """OPUS-MT's joint vocabulary: each side's tokenizer holds the other side's pieces as
    UNUSED, never produced but decoded (identity normalization, as the fixture's)."""
    imported = import_marian(MARIAN)
    # Characters only the target side learnt (unused pieces of the source tokenizer),
    # alone and in runs of unknown characters.
    unknown = ["j", "jj", "jz ja", "äb", "Mjx zu", "a j b ü", "züj!", "ÜjÄ"]
    _check_segmentation_and_detokenizer(imported.source_tokenizer, texts + unknown, tmp_path)
    ids = _every_id(imported.target_tokenizer)
    want = [t.decode("utf-8") for t in imported.target_tokenizer.detokenize(ids).numpy()]
    assert file_texts(imported.target_tokenizer, ids, tmp_path) == want


@pytest.mark.parametrize("model_type", ["bpe", "word"])
def test_other_algorithms_are_refused_in_one_line(model_type):
    tokenizer = _tokenizer(model_type)
    with pytest.raises(ValueError, match=f"a {model_type} SentencePiece model") as error:
        litert_tokenizers.check_tokenizer(tokenizer, "source_tokenizer")
    assert "--tokenizer-model unigram" in str(error.value)
    assert "\n" not in str(error.value)


def test_the_target_tag_goes_in_front_as_the_translator_puts_it(texts, tmp_path):
    tokenizer = _tokenizer("unigram")
    rows, blank = file_ids(tokenizer, texts, tmp_path, target_lang="ja")
    tagged = tokenizer.tokenize([tag_source(text, "ja") for text in texts]).to_list()
    assert rows == tagged
    assert blank.tolist() == [len(row) == 1 for row in tokenizer.tokenize(texts).to_list()]
    with pytest.raises(ValueError, match=r"target_lang='fr'.*<2en>, <2ja>"):
        litert_tokenizers.tag_ids(tokenizer, "fr")
    assert litert_tokenizers.tag_ids(tokenizer, None) == []
