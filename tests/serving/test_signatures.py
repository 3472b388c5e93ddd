"""The SavedModel's signatures take 1-D string batches only: a loaded signature checks
the dtype of its inputs but not their shape, so each signature refuses another rank
itself, with an error that names the input."""

import keras
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.decoding import BeamSearch
from tfblocks.serving import Translator
from tfblocks.text import train_tokenizer
from tfblocks.translation import engines

pytestmark = pytest.mark.heavy  # an export: scheduled first

SENTENCE, TARGET = "今日のランチはカレーだ。", "Today's lunch is curry."


@pytest.fixture(scope="module")
def exported(translator, tmp_path_factory):
    """The path of `translator`'s export."""
    return translator.export(tmp_path_factory.mktemp("export") / "translator")


@pytest.fixture(scope="module")
def translator():
    """A tiny Translator (beam 2, no XLA, max_length 8, with the `align` and `constrained`
    signatures)."""
    tokenizer = train_tokenizer([SENTENCE, TARGET] * 20, vocab_size=40)
    keras.utils.set_random_seed(0)  # module fixtures run before conftest's per-test seed
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, hidden_size=16,
        filter_size=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
    )  # fmt: skip
    return Translator(
        tfblocks.build_transformer(hp), tokenizer, tokenizer, max_length=8,
        search=BeamSearch(2), jit_compile=False, alignments=True, constrained=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(str(exported))


def test_signatures_refuse_other_ranks_naming_the_input(loaded):
    column = tf.constant([[SENTENCE], [SENTENCE]])  # [2, 1]: was read as 2 x 2 translations
    scalar = tf.constant(SENTENCE)
    batch = tf.constant([SENTENCE, SENTENCE])
    for signature, inputs, bad in [
        ("serving_default", {"text": column}, "text"),
        ("serving_default", {"text": scalar}, "text"),
        ("score", {"source": batch, "target": column}, "target"),
        ("score", {"source": scalar, "target": batch}, "source"),
        ("prefix", {"text": batch, "target_prefix": column}, "target_prefix"),
        ("align", {"source": column, "target": batch}, "source"),
        ("constrained", {"text": column, "constraints": tf.constant([["a"], ["b"]])}, "text"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            loaded.signatures[signature](**inputs)
        assert f"`{bad}` must be a 1-D batch of strings" in error.value.message, (
            signature,
            error.value.message[-2000:],
        )
    # A batch is served as before.
    out = loaded.signatures["serving_default"](text=tf.constant([SENTENCE, ""]))
    assert out["translation"].shape == [2] and out["translation"].numpy()[1] == b""
    scored = loaded.signatures["score"](source=batch, target=tf.constant([TARGET, TARGET]))
    assert scored["score"].shape == [2]


def test_score_refuses_a_target_over_its_bound_naming_it(loaded):
    from tfblocks.serving.signatures import MAX_SCORE_LENGTH

    fits = " ".join(["curry"] * 20)
    too_long = " ".join(["curry"] * (MAX_SCORE_LENGTH + 1))  # a subword or more a word, and EOS
    scored = loaded.signatures["score"](source=tf.constant([SENTENCE]), target=tf.constant([fits]))
    assert scored["length"].numpy()[0] > 20  # scored whole, beyond max_length 8
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=f"at most {MAX_SCORE_LENGTH} subwords"
    ):
        loaded.signatures["score"](source=tf.constant([SENTENCE]), target=tf.constant([too_long]))


def test_the_constrained_signature_takes_phrases_as_strings(loaded):
    constrained = loaded.signatures["constrained"]
    out = constrained(text=tf.constant([SENTENCE, ""]), constraints=tf.constant([["curry"], [""]]))
    assert b"curry" in out["translation"].numpy()[0] and out["translation"].numpy()[1] == b""
    assert out["translations"].shape == [2, 1] and out["score"].numpy()[1] == 0.0
    for constraints, words in [
        (tf.constant(["curry"]), "`constraints` must be a 2-D batch of strings"),
        (tf.constant([["curry " * 8]]), "`constraints`: a phrase may hold at most 7 subwords"),
        (
            tf.constant([["🍛"]]),
            "`constraints`: a phrase holds characters the target vocabulary lacks",
        ),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=words):
            constrained(text=tf.constant([SENTENCE]), constraints=constraints)


def test_tfblocks_translate_constraints_use_the_constrained_signature(exported):
    translate, _ = engines.load_translate(exported, constraints=True, notice=lambda _: None)
    out = translate([(SENTENCE, ["curry"]), ("", []), (SENTENCE, [])])
    assert "curry" in out[0] and out[1] == "" and len(out) == 3, out
    with pytest.raises(ValueError, match="`constrained` signature takes no target prefix"):
        engines.load_translate(exported, constraints=True, prefix=True)


def test_the_prefix_signature_refuses_a_prefix_that_leaves_no_room_for_eos(loaded):
    # Was: cut to its first max_length − 1 subwords, the last one left to the search.
    prefix = loaded.signatures["prefix"]
    out = prefix(text=tf.constant([SENTENCE]), target_prefix=tf.constant(["Today"]))
    assert out["translation"].numpy()[0].startswith(b"Today")
    words = r"`prefix` holds \d+ ids, but max_length=8 leaves room for at most 7 before EOS"
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        prefix(text=tf.constant([SENTENCE]), target_prefix=tf.constant([TARGET + " " + TARGET]))


def test_a_phrase_that_cannot_fit_after_the_target_prefix_is_refused(translator):
    # "Today" is 6 subwords of this tokenizer and "curry" 6 more: 1 fits before EOS.
    with pytest.raises(ValueError, match=r"needs 6 ids after the prefix's 6, but max_length=8"):
        translator([SENTENCE], target_prefix=["Today"], constraints=[["curry"]])
    out = translator([SENTENCE], target_prefix=["Today"], constraints=[["Today"]])
    assert out.numpy()[0].startswith(b"Today")
