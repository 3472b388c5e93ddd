"""Decoding controls (`tfblocks.decoding.Controls`): a minimum length, no `<unk>`, a
maximum length relative to each source, in every search, with and without XLA, and
CTranslate2's options of the same meaning giving the same greedy ids.

The model is a tiny random Transformer with a final logits bias that makes EOS, then
`<unk>`, then one ordinary token the likeliest (`_biased`): untouched, it ends every
translation at once; its biased order makes each rule show, whatever the random weights.
"""

import numpy as np
import pytest

from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.decoding import BeamSearch, ConstrainedBeamSearch, Controls, Decoder, Greedy, Sampling
from tfblocks.decoding.controls import MAX_LENGTH_EXTRA, ratio_limit
from tfblocks.ids import EOS_ID, UNK_ID

VOCAB = 40
MAX_LENGTH = 24
LOOP = 7  # the ordinary token the bias favours
# Sources of 2, 5 and 9 subwords (EOS last, 0-padded).
SOURCES = np.array(
    [[5, 6, 1, 0, 0, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 1, 0, 0, 0, 0],
     [5, 6, 7, 8, 9, 10, 11, 12, 13, 1]], "int32",
)  # fmt: skip
WORDS = [2, 5, 9]
SEARCHES = {
    "greedy": Greedy(),
    "beam": BeamSearch(beam_size=3),
    "sampling": Sampling(top_k=2, seed=5),
}


def _biased(eos, unk, loop, vocab=VOCAB):
    """A tiny random model whose logits get `eos`, `unk` and `loop` added at EOS, `<unk>`
    and `LOOP`."""
    model = tiny_model(tiny_hparams(vocab_size=vocab, final_logits_bias=True), seed=3)
    bias = np.zeros([vocab], "float32")
    bias[[EOS_ID, UNK_ID, LOOP]] = eos, unk, loop
    model.logits_bias.bias.assign(bias)
    return model


@pytest.fixture(scope="module")
def ending():
    """EOS first, then `<unk>`, then `LOOP`: ends at once unless told otherwise."""
    return _biased(90.0, 60.0, 30.0)


@pytest.fixture(scope="module")
def looping():
    """`LOOP` first: never ends by itself."""
    return _biased(0.0, 0.0, 60.0)


def _lengths(ids):
    """Tokens before EOS of each row (all of them when it has none)."""
    rows = np.asarray(ids).tolist()
    return [row.index(EOS_ID) if EOS_ID in row else len(row) for row in rows]


def _has_repeat(row, n):
    """Whether the tokens before EOS of `row` hold an n-gram twice."""
    tokens = row[: _lengths([row])[0]]
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


# Each rule alone with greedy search; the rules together with sampling, beam search and
# beam search compiled with XLA (static shapes a segment: the history grows with the
# caches). Without XLA a search is one graph for all shapes.
CASES = [("greedy", False), ("sampling", False), ("beam", False), ("beam", True)]


@pytest.mark.parametrize(("name", "jit_compile"), CASES, ids=[f"{n}-{j}" for n, j in CASES])
def test_each_rule_holds_in_every_search(ending, looping, name, jit_compile):
    search = SEARCHES[name]

    def decode(model, controls, cache_lengths="auto"):
        decoder = Decoder(model, MAX_LENGTH, jit_compile=jit_compile, controls=controls,
                          cache_lengths=cache_lengths)  # fmt: skip
        return decoder.decode(search, SOURCES)[0].numpy()

    if name != "greedy" or jit_compile:  # the rules together: two decoders, not nine
        ids = decode(ending, Controls(min_length=4, disallow_unk=True))
        assert _lengths(ids) == [4, 4, 4] and (ids[:, :4] == LOOP).all()
        rows = decode(looping, Controls(max_length_ratio=2.0, no_repeat_ngram_size=3)).tolist()
        assert _lengths(rows) == [14, 20, 24] and not any(_has_repeat(row, 3) for row in rows)
        return
    assert _lengths(decode(ending, None)) == [0, 0, 0]  # the bias ends it at once
    ids = decode(ending, Controls(min_length=4))
    assert _lengths(ids) == [4, 4, 4] and (ids[:, :4] == UNK_ID).all()  # <unk>, the next best
    ids = decode(ending, Controls(min_length=4, disallow_unk=True))
    assert _lengths(ids) == [4, 4, 4] and (ids[:, :4] == LOOP).all()  # then LOOP
    assert not (ids == UNK_ID).any()
    rows = decode(looping, None).tolist()
    assert _lengths(rows) == [MAX_LENGTH] * 3 and all(_has_repeat(row, 2) for row in rows)
    ids = decode(looping, Controls(max_length_ratio=2.0))  # the last: 2 × 9 + 10 > 24
    assert _lengths(ids) == [ratio_limit(2.0, w) for w in WORDS[:2]] + [MAX_LENGTH] == [14, 20, 24]
    assert (ids[np.arange(2), _lengths(ids)[:2]] == EOS_ID).all()  # EOS forced there
    for n in (1, 3):
        rows = decode(looping, Controls(no_repeat_ngram_size=n)).tolist()
        assert not any(_has_repeat(row, n) for row in rows), (n, rows)
        assert all(row[:n] == [LOOP] * n for row in rows), rows  # up to the first repeat
    # A penalty of 1e6 makes any token already there less likely than any other.
    rows = decode(looping, Controls(repetition_penalty=1e6)).tolist()
    assert all(row[0] == LOOP and LOOP not in row[1:] for row in rows), rows
    trigrams = Controls(no_repeat_ngram_size=3)  # through the caches' growth and without it
    assert (decode(looping, trigrams, None) == decode(looping, trigrams)).all()


def test_a_sentences_limit_does_not_depend_on_its_batch_mates(looping):
    decoder = Decoder(looping, MAX_LENGTH, jit_compile=False,
                      controls=Controls(max_length_ratio=1.0))  # fmt: skip
    together = decoder.decode(Greedy(), SOURCES)[0].numpy()
    for row, source in enumerate(SOURCES):
        alone = decoder.decode(Greedy(), source[None, : WORDS[row] + 1])[0].numpy()
        width = alone.shape[1]
        np.testing.assert_array_equal(alone[0], together[row, :width])
        assert (together[row, width:] == 0).all()


def test_constrained_search_keeps_its_phrases_and_the_rules(ending):
    decoder = Decoder(ending, MAX_LENGTH, jit_compile=False,
                      controls=Controls(min_length=5, disallow_unk=True))  # fmt: skip
    phrases = np.array([[[9, 10]], [[11, 0]], [[0, 0]]], "int32")  # [B, C, T], 0-padded
    ids = decoder.decode(ConstrainedBeamSearch(beam_size=2), SOURCES, constraints=phrases)[0]
    rows = ids.numpy().tolist()
    assert all(length >= 5 for length in _lengths(rows)) and not (ids.numpy() == UNK_ID).any()
    assert rows[0][rows[0].index(9) + 1] == 10 and 11 in rows[1]


def test_controls_are_checked_and_need_a_source_for_a_ratio():
    for bad, words in [
        ({"min_length": -1}, "min_length"), ({"min_length": 2.5}, "min_length"),
        ({"disallow_unk": "yes"}, "disallow_unk"), ({"max_length_ratio": 0}, "max_length_ratio"),
        ({"max_length_ratio": float("inf")}, "max_length_ratio"),
        ({"no_repeat_ngram_size": -2}, "no_repeat_ngram_size"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            Controls(**bad)
    from tfblocks.models import build_language_model

    language_model = build_language_model(tiny_hparams(vocab_size=VOCAB, num_encoder_layers=0))
    with pytest.raises(ValueError, match="decoder-only language model has none"):
        Decoder(language_model, 8, controls=Controls(max_length_ratio=1.0))
    with pytest.raises(ValueError, match=r"tfblocks\.decoding\.Controls or None"):
        Decoder(language_model, 8, controls={"min_length": 2})
    assert MAX_LENGTH_EXTRA == 10 and ratio_limit(1.5, 3) == 14


def test_ctranslate2_applies_the_same_rules_as_tensorflow(tmp_path):
    pytest.importorskip("ctranslate2")
    from tfblocks.serving import CTranslate2Translator, Translator, export_ctranslate2
    from tfblocks.text import load_phrasebook, train_tokenizer

    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    ending = _biased(90.0, 60.0, 30.0, vocab=tokenizer.vocabulary_size)
    path = export_ctranslate2(ending, tokenizer, str(tmp_path / "ct2"))
    texts = ["今日のランチはカレーだ。", "私は学生です。"]
    for controls in (
        Controls(), Controls(min_length=3), Controls(min_length=3, disallow_unk=True),
        Controls(min_length=6, no_repeat_ngram_size=2),
        Controls(min_length=6, repetition_penalty=3.0),
    ):  # fmt: skip
        ours = Translator(ending, tokenizer, tokenizer, 12, search=Greedy(), jit_compile=False,
                          controls=controls)  # fmt: skip
        theirs = CTranslate2Translator(path, beam_size=1, max_length=12, **_ct2_options(controls))
        got = [text.decode("utf-8") for text in ours(texts).numpy()]
        assert got == theirs(texts), controls
        assert (got == ["", ""]) == (controls.min_length == 0), got


def _ct2_options(controls):
    names = ("min_length", "disallow_unk", "no_repeat_ngram_size", "repetition_penalty")
    return {name: getattr(controls, name) for name in names}


def test_the_savedmodel_keeps_the_controls(tmp_path):
    import tensorflow as tf

    from tfblocks.serving import Translator
    from tfblocks.text import load_phrasebook, train_tokenizer

    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    ending = _biased(90.0, 60.0, 30.0, vocab=tokenizer.vocabulary_size)
    controls = Controls(min_length=5, no_repeat_ngram_size=2)
    translator = Translator(ending, tokenizer, tokenizer, 12, search=Greedy(), jit_compile=False,
                            controls=controls)  # fmt: skip
    texts = tf.constant(["今日のランチはカレーだ。", "私は学生です。"])
    want = translator(texts).numpy().tolist()
    assert all(want)  # five tokens at least: no empty translation
    served = tf.saved_model.load(translator.export(str(tmp_path / "export")))
    assert served.signatures["serving_default"](text=texts)["translation"].numpy().tolist() == want
