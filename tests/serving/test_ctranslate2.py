"""export_ctranslate2: CTranslate2's greedy translations equal tfblocks' on a trained model."""

import json
import os

import keras
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.decoding import BeamSearch, Greedy
from tfblocks.serving import Hypothesis, Translator
from tfblocks.text import load_phrasebook, train_tokenizer

pytest.importorskip("ctranslate2")

from tfblocks.serving import ctranslate2_export
from tfblocks.serving.ctranslate2 import CTranslate2Translator
from tfblocks.serving.ctranslate2_export import build_spec, export_ctranslate2

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

MAX_LENGTH = 16


@pytest.fixture(scope="module")
def data():
    pairs = load_phrasebook(size=1000)["train"][:384]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=300)
    return pairs, tokenizer


_TRAINED = {}  # overrides -> model: a model trained once serves every test that wants it


def _trained(data, **overrides):
    """A one-layer transformer_tiny trained for a few seconds: 4 epochs, so that its greedy
    output is not trivial on any CPU (after 3, one post-LN model still said 10 things).
    Trained once per `overrides` (the tests only read it)."""
    key = tuple(sorted(overrides.items()))
    if key not in _TRAINED:
        _TRAINED[key] = _train(data, **overrides)
    return _TRAINED[key]


def _hparams(tokenizer, **overrides):
    """The HParams of `_trained`'s models (`overrides` on top)."""
    return tfblocks.hparams(
        "transformer_tiny",
        vocab_size=tokenizer.vocabulary_size,
        hidden_size=64,
        filter_size=128,
        num_encoder_layers=1,
        num_decoder_layers=1,
        **overrides,
    )


def _train(data, **overrides):
    pairs, tokenizer = data
    keras.utils.set_random_seed(0)
    hp = _hparams(tokenizer, **overrides)
    model = tfblocks.build_transformer(hp)
    tfblocks.compile_transformer(model, hp, jit_compile=False, learning_rate=1e-2)
    source = tokenizer.tokenize([s for s, _ in pairs]).to_tensor(shape=[None, MAX_LENGTH])
    target = tokenizer.tokenize([t for _, t in pairs]).to_tensor(shape=[None, MAX_LENGTH])
    model.fit({"inputs": source, "targets": target}, target, batch_size=32, epochs=4, verbose=0)
    return model


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # Pre-LN, tied embeddings and softmax
        {"norm_first": False, "shared_embedding_and_softmax_weights": False},
        {"self_attention_type": "dot_product_relative", "max_relative_position": 4, "pos": "none"},
    ],
    ids=["pre_ln_tied", "post_ln_untied", "relative"],
)
def test_greedy_translations_equal_translator(data, overrides, tmp_path):
    pairs, tokenizer = data
    model = _trained(data, **overrides)
    texts = [s for s, _ in pairs[:48]] + ["今日のランチはカレーだ。", "", "私" * 40]
    translator = Translator(
        model, tokenizer, tokenizer, max_length=MAX_LENGTH, search=Greedy(), jit_compile=False
    )
    want = translator(texts)
    want = [t.decode() for t in want.numpy()]
    path = export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    got = CTranslate2Translator(path, beam_size=1, max_length=MAX_LENGTH, intra_threads=1)(texts)
    assert len(set(want)) > 10  # the model says different things for different inputs
    assert got == want
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    assert config["decoder_start_token"] == "<s>" and config["add_source_eos"] is True


def test_n_best_and_scores_agree_between_engines(data, tmp_path):
    # Beam 4 without length penalty in both engines (a score is then the log-probability
    # of the hypothesis, EOS included, in both): the same n-best lists but for a few
    # sentences, the same scores for the same hypotheses, and every finished hypothesis'
    # score equal to `Translator.score` of its text.
    pairs, tokenizer = data
    model = _trained(data)
    texts = [s for s, _ in pairs[48:72]]
    translator = Translator(model, tokenizer, tokenizer, max_length=MAX_LENGTH,
                            search=BeamSearch(4, alpha=0.0), num_hypotheses=4,
                            jit_compile=False)  # fmt: skip
    path = export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    ct2 = CTranslate2Translator(path, beam_size=4, max_length=MAX_LENGTH, length_penalty=0.0,
                                num_hypotheses=4, intra_threads=1)  # fmt: skip
    ours, theirs = translator.n_best(texts), ct2.n_best(texts)
    same = [{h.text for h in a} == {h.text for h in b} for a, b in zip(ours, theirs, strict=True)]
    # The engines' searches differ (t2t keeps 2 * beam candidates and searches until no
    # live one can win), so a few lists differ: 23 of 24 agree on an AVX2 CPU; half is a
    # margin that other kernels' near-ties cannot cross. The scores below are exact.
    assert sum(same) >= 0.5 * len(texts), same
    for a, b in zip(ours, theirs, strict=True):
        theirs_by_text = {h.text: h.score for h in b}
        for hypothesis in a:
            if hypothesis.text in theirs_by_text:
                assert abs(hypothesis.score - theirs_by_text[hypothesis.text]) < 1e-4
    # `score` of the finished hypotheses (the search's own ids, when the tokenizer splits
    # their text the same way) is the score the search reported.
    ids, _ = translator._decoder.decode(translator.search,
                                        translator.encode_source(tf.constant(texts)),
                                        num_hypotheses=4)  # fmt: skip
    flat = [h for row in ours for h in row]
    scored = translator.score([t for t in texts for _ in range(4)], [h.text for h in flat])
    retokenized = tokenizer.tokenize([h.text for h in flat]).to_list()
    checked = 0
    for row, hypothesis, score, again in zip(ids.numpy().reshape(-1, MAX_LENGTH), flat, scored,
                                             retokenized, strict=True):  # fmt: skip
        own = [int(i) for i in row if i]
        if own[-1] == tfblocks.EOS_ID and own == again:
            assert abs(hypothesis.score - score) < 1e-4, (hypothesis, score)
            checked += 1
    assert checked >= len(texts), checked
    # CTranslate2's score_batch normalizes over <pad> and <s> too: a little lower.
    references = [t for _, t in pairs[48:72]]
    want = translator.score(texts, references, per_token=True)
    got = ct2.score(texts, references, per_token=True)
    assert [len(v) for v in got] == [len(v) for v in want]
    for a, b in zip(want, got, strict=True):
        assert (a - b > -1e-4).all() and (a - b < 0.01).all(), (a, b)
    assert ct2.score([], []).shape == (0,)
    with pytest.raises(ValueError, match="same length, got 2 sources and 1 targets"):
        ct2.score(texts[:2], references[:1])
    with pytest.raises(ValueError, match="num_hypotheses=5"):
        CTranslate2Translator(path, beam_size=4, num_hypotheses=5)
    assert ct2.n_best(["", texts[0]])[0] == [Hypothesis("", 0.0)] * 4


def test_vocabulary_and_quantized_export(data, tmp_path):
    pairs, tokenizer = data
    hp = tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size + 5)
    model = tfblocks.build_transformer(hp)
    spec = build_spec(model, tokenizer)
    vocabulary = spec._vocabularies["target"][0]
    assert vocabulary[:4] == ["<pad>", "</s>", "<unk>", "<s>"]
    assert len(vocabulary) == model.vocab_size
    assert vocabulary[-1] == f"<tfblocks_unused_{model.vocab_size - 1}>"
    path = export_ctranslate2(model, tokenizer, tmp_path / "int8", quantization="int8")
    out = CTranslate2Translator(path, beam_size=2, max_length=6)([pairs[0][0], " "])
    assert len(out) == 2 and out[1] == ""
    assert CTranslate2Translator(path)([]) == []


def test_bad_input(data, tmp_path):
    _, tokenizer = data
    model = tfblocks.build_transformer(
        tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
    )
    with pytest.raises(ValueError, match="quantization='int3'"):
        export_ctranslate2(model, tokenizer, tmp_path / "a", quantization="int3")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"`output_dir`.*full"):
        export_ctranslate2(model, tokenizer, tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["notes.txt"]
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="output_dir=''"):
        export_ctranslate2(model, tokenizer, "")
    small = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=50))
    with pytest.raises(ValueError, match="`tokenizer` has 300 pieces"):
        export_ctranslate2(small, tokenizer, tmp_path / "b")
    lm = tfblocks.build_language_model(
        tfblocks.hparams("transformer_tiny", vocab_size=300, num_encoder_layers=0)
    )
    with pytest.raises(ValueError, match="encoder–decoder"):
        export_ctranslate2(lm, tokenizer, tmp_path / "c")
    timed = tfblocks.build_transformer(
        tfblocks.hparams("transformer_relative_tiny", vocab_size=300, pos="timing")
    )
    with pytest.raises(ValueError, match="pos='none'"):
        export_ctranslate2(timed, tokenizer, tmp_path / "d")
    with pytest.raises(ValueError, match="model_dir="):
        CTranslate2Translator(tmp_path / "nothing")
    path = export_ctranslate2(model, tokenizer, tmp_path / "ok")
    with pytest.raises(ValueError, match="beam_size=0"):
        CTranslate2Translator(path, beam_size=0)
    with pytest.raises(ValueError, match="single str"):
        CTranslate2Translator(path)("今日")
    for call in (CTranslate2Translator(path), CTranslate2Translator(path).n_best):
        with pytest.raises(ValueError, match="CTranslate2 has no lexical constraints"):
            call(["今日"], constraints=[["Today"]])


def test_export_is_written_whole_and_replaces_only_its_own_output(data, tmp_path, monkeypatch):
    """A failed export leaves nothing (or the earlier export, unchanged); a second export
    replaces the first; a file added by the user makes the folder off-limits."""
    _, tokenizer = data
    model = tfblocks.build_transformer(
        tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
    )
    target = tmp_path / "ct2"

    def broken_save(path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(tokenizer, "save", broken_save)
        with pytest.raises(OSError, match="disk full"):
            export_ctranslate2(model, tokenizer, target)
    assert os.listdir(tmp_path) == []  # no half-written folder, no staging folder

    path = export_ctranslate2(model, tokenizer, target)
    first = sorted(os.listdir(path))
    assert {"model.bin", "config.json", "source.model", "target.model"} <= set(first)

    def model_bin():
        with open(os.path.join(path, "model.bin"), "rb") as f:
            return f.read()

    float32_bytes = model_bin()
    with monkeypatch.context() as patch:
        patch.setattr(tokenizer, "save", broken_save)
        with pytest.raises(OSError, match="disk full"):
            export_ctranslate2(model, tokenizer, target, quantization="int8")
    assert os.listdir(tmp_path) == ["ct2"] and sorted(os.listdir(path)) == first
    assert model_bin() == float32_bytes  # the earlier export, unchanged

    assert export_ctranslate2(model, tokenizer, target, quantization="int8") == path
    assert sorted(os.listdir(path)) == first and os.listdir(tmp_path) == ["ct2"]
    assert model_bin() != float32_bytes  # replaced
    assert len(CTranslate2Translator(path, beam_size=1, max_length=4)(["今日", "x"])) == 2

    (target / "notes.txt").write_text("mine")
    with monkeypatch.context() as patch:  # refused before the (slow) conversion starts
        patch.setattr(ctranslate2_export, "build_spec", _not_called)
        with pytest.raises(ValueError, match=r"notes\.txt.*output_dir="):
            export_ctranslate2(model, tokenizer, target)
        with pytest.raises(ValueError, match=r"output_dir='\.'"):
            export_ctranslate2(model, tokenizer, ".")
    assert (target / "notes.txt").read_text() == "mine"
    assert model_bin() != float32_bytes and os.listdir(tmp_path) == ["ct2"]


def _not_called(*args, **kwargs):
    raise AssertionError("the conversion ran before the path was checked")


def test_a_target_prefix_that_leaves_no_room_for_eos_is_refused(data, tmp_path):
    # Was: cut to its first max_length − 1 pieces, the last one left to CTranslate2.
    _, tokenizer = data
    model = tfblocks.build_transformer(
        tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
    )
    translator = CTranslate2Translator(export_ctranslate2(model, tokenizer, tmp_path / "m"),
                                       max_length=4, beam_size=2, num_hypotheses=2)  # fmt: skip
    fits, too_long = "Today", "Today's lunch is curry."
    assert len(translator.target_pieces([fits])[0]) < 4 <= len(tokenizer.tokenize([too_long])[0])
    assert translator(["今日"], target_prefix=[fits])[0].startswith(fits)
    for call in (translator, translator.n_best):
        with pytest.raises(ValueError, match=r"`target_prefix`\[1\] holds \d+ pieces, but "
                           "max_length=4 leaves room for at most 3 before EOS"):  # fmt: skip
            call(["今日", "今日"], target_prefix=[fits, too_long])
