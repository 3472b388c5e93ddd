"""Tests of the SentencePiece tokenizers: id conventions, round trips, graphs and SavedModels."""

import io
import pathlib

import keras
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.text import corpus, phrasebook, tokenizers

DATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "small_parallel_enja"
EXAMPLE_JA, EXAMPLE_EN = phrasebook.RUNNING_EXAMPLE


@pytest.fixture(scope="module")
def pairs():
    return phrasebook.load_phrasebook(seed=0, size=3000)["train"]


@pytest.fixture(scope="module")
def tokenizer(pairs):
    source, target = tokenizers.train_tokenizers(pairs, vocab_size=400)
    assert source is target
    return source


def _texts(ragged_or_tensor):
    return [s.decode("utf-8") for s in ragged_or_tensor.numpy()]


def test_ids_follow_the_project_convention(tokenizer):
    ids = tokenizer.tokenize([EXAMPLE_JA, EXAMPLE_EN, ""])
    rows = ids.to_list()
    assert [row[-1] for row in rows] == [EOS_ID] * 3
    assert rows[2] == [EOS_ID]  # the empty string is just EOS
    flat = np.concatenate([np.array(r[:-1]) for r in rows[:2]])
    assert not np.isin(flat, [0, 1, 2, 3]).any()  # no pad, EOS, unknown or BOS inside
    assert ids.dtype == tf.int32 and tokenizer.vocabulary_size == 400
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    assert [processor.id_to_piece(i) for i in range(4)] == ["<pad>", "</s>", "<unk>", "<s>"]


def test_ids_match_the_model():
    import tfblocks  # the model is a later stage; only the test may look at it

    ids = (PAD_ID, EOS_ID, UNK_ID, BOS_ID)
    assert ids == (tfblocks.PAD_ID, tfblocks.EOS_ID, tfblocks.UNK_ID, tfblocks.BOS_ID)


def test_round_trip_is_exact_on_training_text(tokenizer, pairs):
    texts = [text for pair in pairs for text in pair]
    ids = tokenizer.tokenize(texts)
    assert _texts(tokenizer.detokenize(ids.to_tensor())) == texts
    assert int(tf.reduce_sum(tf.cast(ids.flat_values == UNK_ID, tf.int32))) == 0


def test_detokenize_stops_at_eos_and_skips_pad_and_bos(tokenizer):
    body = tokenizer.tokenize([EXAMPLE_JA]).to_list()[0][:-1]
    noisy = [BOS_ID, *body, EOS_ID, *body, PAD_ID]
    padded = body + [PAD_ID] * (len(noisy) - len(body))
    out = tokenizer.detokenize(tf.constant([noisy, padded], tf.int32))
    assert _texts(out) == [EXAMPLE_JA, EXAMPLE_JA]


def test_unknown_characters_map_to_unk(tokenizer):
    ids = tokenizer.tokenize(["象"]).to_list()[0]  # never in the phrasebook
    assert UNK_ID in ids and ids[-1] == EOS_ID


def test_runs_in_tf_function_and_tf_data(tokenizer):
    @tf.function
    def lengths(strings):
        return tokenizer.tokenize(strings).row_lengths()

    expected = tokenizer.tokenize([EXAMPLE_JA, EXAMPLE_EN]).row_lengths().numpy()
    np.testing.assert_array_equal(lengths(tf.constant([EXAMPLE_JA, EXAMPLE_EN])), expected)
    dataset = tf.data.Dataset.from_tensor_slices([EXAMPLE_JA, EXAMPLE_EN]).batch(2)
    dataset = dataset.map(lambda s: tokenizer.tokenize(s).row_lengths())
    np.testing.assert_array_equal(next(iter(dataset)), expected)


def test_survives_keras_clear_session(pairs):
    tokenizer = tokenizers.train_tokenizer([ja for ja, _ in pairs[:200]], vocab_size=300)
    expected = tokenizer.tokenize([EXAMPLE_JA]).to_list()
    keras.utils.clear_session()  # clears TensorFlow's kernel cache, too
    assert tokenizer.tokenize([EXAMPLE_JA]).to_list() == expected


def test_saved_model_and_proto_file_round_trip(tokenizer, tmp_path):
    expected = tokenizer.tokenize([EXAMPLE_JA, EXAMPLE_EN])
    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    assert restored.tokenize([EXAMPLE_JA, EXAMPLE_EN]).to_list() == expected.to_list()
    assert _texts(restored.detokenize(expected.to_tensor())) == [EXAMPLE_JA, EXAMPLE_EN]
    assert restored.model_proto.numpy() == tokenizer.proto

    tokenizer.save(tmp_path / "shared.model")
    loaded = tokenizers.SubwordTokenizer.load(tmp_path / "shared.model")
    assert loaded.proto == tokenizer.proto
    assert loaded.tokenize([EXAMPLE_EN]).to_list() == expected.to_list()[1:]


def test_separate_vocabularies(pairs):
    source, target = tokenizers.train_tokenizers(
        pairs[:1000], vocab_size=200, model_type="bpe", shared=False
    )
    assert source is not target and source.proto != target.proto
    # Each side only knows its own script: English letters are unknown to the Japanese side.
    assert UNK_ID in source.tokenize(["lunch"]).to_list()[0]
    assert UNK_ID not in target.tokenize(["lunch"]).to_list()[0]


def test_a_saved_model_keeps_each_tokenizers_own_sentencepiece_model(pairs, tmp_path):
    """Two tokenizers of different models in one SavedModel (separate vocabularies): each
    tokenizes and detokenizes with its own model once loaded, whichever runs first."""
    source, target = tokenizers.train_tokenizers(pairs[:300], vocab_size=150, shared=False)
    module = tf.Module()
    module.source, module.target = source, target
    tf.saved_model.save(module, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    texts = [EXAMPLE_JA, EXAMPLE_EN]
    for mine, saved in ((source, restored.source), (target, restored.target)):
        ids = mine.tokenize(texts)
        assert saved.tokenize(texts).to_list() == ids.to_list()
        assert _texts(saved.detokenize(ids.to_tensor())) == _texts(mine.detokenize(ids.to_tensor()))


def test_unknown_text_that_is_an_unused_piece_gets_its_id(tmp_path):
    """An `UNUSED` piece (another side's piece of an imported vocabulary) is the id of
    text its model leaves unknown: in a graph, `tf.data`, a SavedModel, after
    `clear_session`, and from the `sentencepiece` package's ids (`unknown_as_pieces`)."""
    from tfblocks.text.vocabulary import reordered_tokenizer

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["the cat sat", "the mat"] * 20), model_writer=model,
        vocab_size=16, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    words = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    pieces = ["<pad>", "</s>", "<unk>", "<s>", *words, "!", "▁dog"]  # unused: "!", "▁dog"
    tokenizer = reordered_tokenizer(model.getvalue(), pieces)
    texts = ["the cat!", "a dog?!"]  # "!" alone is a piece; "a", "?!" and "dog" are not
    want = [
        [pieces.index(p) if p in pieces else UNK_ID for p in processor.encode(t, out_type=str)]
        + [EOS_ID]
        for t in texts
    ]
    assert pieces.index("!") in want[0] and UNK_ID in want[1]
    assert tokenizer.tokenize(texts).to_list() == want
    assert tf.function(lambda t: tokenizer.tokenize(t).to_tensor())(texts).numpy()[0].tolist() == (
        want[0] + [PAD_ID] * (len(want[1]) - len(want[0]))
    )
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer.tokenize)
    assert next(iter(dataset)).to_list() == want
    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    assert tf.saved_model.load(str(tmp_path / "saved")).tokenize(texts).to_list() == want
    keras.utils.clear_session()
    assert tokenizer.tokenize(texts).to_list() == want
    reordered = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    assert tokenizers.unknown_as_pieces(reordered, texts) == [row[:-1] for row in want]
    assert _texts(tokenizer.detokenize(tf.constant([want[0]]))) == ["the cat!"]


def test_a_tokenizer_sample_bounds_what_the_tokenizer_trains_on():
    # A sample of 8 of the 40 pairs: 8 sentences a side, seeded; a sample of at least the
    # corpus is the corpus (both sides, in order, for a shared vocabulary).
    pairs = [(f"文{i}", f"w{i} a") for i in range(40)]
    seen = []
    real = tokenizers.train_tokenizer

    def recording(lines, *args, **kwargs):
        seen.append(list(lines))
        return real(seen[-1], *args, **kwargs)

    tokenizers.train_tokenizer = recording
    try:
        for seed in (0, 0, 1):
            tokenizers.train_tokenizers(pairs, vocab_size=40, sample=8, seed=seed, shared=False)
        tokenizers.train_tokenizers(pairs, vocab_size=60, sample=40)
    finally:
        tokenizers.train_tokenizer = real
    assert [len(lines) for lines in seen] == [8] * 6 + [80]
    assert seen[0] == seen[2] and seen[1] == seen[3] and seen[0] != seen[4]  # seeded
    assert set(seen[0]) <= {source for source, _ in pairs}  # sources, targets apart
    assert seen[-1] == [s for s, _ in pairs] + [t for _, t in pairs]
    with pytest.raises(ValueError, match="`sample` must be a positive integer, got sample=0"):
        tokenizers.train_tokenizers(pairs, vocab_size=40, sample=0)


def test_rejects_a_proto_with_other_ids():
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["abc def"] * 10), model_writer=model, vocab_size=10,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"pad, EOS, unknown, BOS = \(-1, 2, 0, 1\)"):
        tokenizers.SubwordTokenizer(model.getvalue())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lines": ["a"], "vocab_size": 4}, "vocab_size=4"),
        ({"lines": ["a"], "vocab_size": 10, "model_type": "wordpiece"}, "'wordpiece'"),
        ({"lines": "abc", "vocab_size": 10}, "single str"),
        ({"lines": ["a", 3], "vocab_size": 10}, "int: 3"),
        ({"lines": ["", " "], "vocab_size": 10}, "no non-empty line"),
        ({"lines": ["a"], "vocab_size": 10, "character_coverage": 0}, "character_coverage=0"),
        ({"lines": ["abcdefghijklmnop"], "vocab_size": 10}, "vocab_size=10 is smaller than"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        tokenizers.train_tokenizer(**kwargs)


@pytest.mark.skipif(not DATA.is_dir(), reason="small_parallel_enja is not beside the checkout")
def test_small_parallel_enja_vocabulary_and_unknown_share(record_property):
    splits = {
        s: corpus.read_parallel(DATA / f"{s}.ja", DATA / f"{s}.en") for s in ("train", "test")
    }
    assert (len(splits["train"]), len(splits["test"])) == (50_000, 500)
    tokenizer, _ = tokenizers.train_tokenizers(splits["train"], vocab_size=8000)
    assert tokenizer.vocabulary_size == 8000
    train_ja = tokenizer.tokenize([ja for ja, _ in splits["train"].pairs])
    train_en = tokenizer.tokenize([en for _, en in splits["train"].pairs])
    test_ids = tokenizer.tokenize([text for pair in splits["test"] for text in pair]).flat_values
    unknown_share = float(np.mean(test_ids.numpy() == UNK_ID))
    stats = {
        "vocabulary_size": tokenizer.vocabulary_size,
        "tokens_per_sentence_ja": float(np.mean(train_ja.row_lengths())),
        "tokens_per_sentence_en": float(np.mean(train_en.row_lengths())),
        "test_unknown_share": unknown_share,
    }
    for key, value in stats.items():
        record_property(key, value)
    print(stats)
    assert unknown_share < 0.01, stats
    assert 5 < stats["tokens_per_sentence_ja"] < 30 and 5 < stats["tokens_per_sentence_en"] < 30


def test_a_model_without_a_normalization_table_segments_alike_and_quietly(pairs, capfd):
    # An `identity` model has no compiled table, and tensorflow-text's op says so on
    # standard error for each model it loads. The op gets the model with a table that
    # rewrites nothing (`charsmaps.identity_charsmap`): the same pieces for every text
    # (SentencePiece's own Python processor is the reference), and no line.
    from sentencepiece import sentencepiece_model_pb2

    from tfblocks.models.preset import TransformerTokenizer
    from tfblocks.text import charsmaps

    lines = [side for pair in pairs[:300] for side in pair] + ["tab\there", "x\uffffy"]
    tokenizer = tokenizers.train_tokenizer(lines, vocab_size=200, normalization="identity",
                                           character_coverage=0.995)  # fmt: skip
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(tokenizer.op_proto)
    assert model.normalizer_spec.precompiled_charsmap == charsmaps.identity_charsmap()
    assert charsmaps.with_identity_charsmap(tokenizer.op_proto) == tokenizer.op_proto
    rng = np.random.default_rng(0)
    rare = ["".join(map(chr, rng.integers(1, 0x2FFFF, 20))) for _ in range(50)]
    texts = [*lines[:40], "  two  spaces\tand\na line ", "ｆｕｌｌ　ｗｉｄｔｈ", "e\u0301"]
    texts += ["a\uffff\uffff", *(t.encode("utf-8", "replace").decode("utf-8") for t in rare)]
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    expected = [[*processor.encode(text), EOS_ID] for text in texts]
    assert tokenizer.tokenize(texts).to_list() == expected
    layer = TransformerTokenizer(proto=tokenizer.proto)  # KerasHub's layer, in presets
    got = layer(tf.constant(texts))
    assert [list(map(int, row)) for row in got] == [row[:-1] for row in expected]
    assert "precompiled_charsmap" not in capfd.readouterr().err
