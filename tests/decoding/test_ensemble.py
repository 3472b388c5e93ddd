"""`tfblocks.Ensemble`: the mean of its members' log-probabilities, through every search,
`Decoder.score`, a forced prefix and one exported SavedModel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.decoding import BeamSearch, Decoder, Ensemble, Greedy, Sampling
from tfblocks.serving import Generator, Translator
from tfblocks.text import train_tokenizer

pytestmark = pytest.mark.heavy  # exports a SavedModel: scheduled first

MAX_LENGTH = 6
SOURCE = np.array([[5, 6, 7, 8, 9, 1], [12, 4, 1, 0, 0, 0], [20, 21, 22, 1, 0, 0]], "int32")
TEXTS = ["Today's lunch is curry.", "curry", "lunch is today"]


@pytest.fixture(scope="module")
def parts():
    """A tokenizer and two tiny untrained models of its vocabulary (seeds 0 and 1), and a
    copy of the first (other variables, the same values)."""
    tokenizer = train_tokenizer(TEXTS * 20, vocab_size=40)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size)
    a, b = tiny_model(hp, seed=0), tiny_model(hp, seed=1)
    copy = tiny_model(hp, weights=a.get_weights())
    return tokenizer, a, b, copy


def _decode(model, search, drop_finished=True, **kwargs):
    decoder = Decoder(model, MAX_LENGTH, jit_compile=False, drop_finished=drop_finished)
    ids, scores = decoder.decode(search, **kwargs)
    return ids.numpy(), scores.numpy()


def _reference(models, source, target):
    """NumPy: the log-probabilities `[B, T, V]` after `target[:, :t]` under the mean of the
    members' log-softmax (uncached forward passes), PAD and BOS excluded, renormalized."""
    members = []
    for model in models:
        logits = keras.ops.convert_to_numpy(model({"inputs": source, "targets": target}))
        members.append(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))
    mean = np.mean(members, axis=0)  # [B, T, V]
    mean[..., [tfblocks.PAD_ID, tfblocks.BOS_ID]] = -np.inf
    return mean - np.log(np.exp(mean).sum(-1, keepdims=True))


def _picked(log_probs, target):
    """`log_probs[b, t, target[b, t]]`, 0 at padding: `[B, T]`."""
    picked = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
    return np.where(target != 0, picked, 0.0)


def test_an_ensemble_of_one_model_or_of_its_copies_decodes_as_the_model(parts, eagerly):
    _, a, _, copy = parts
    searches = [
        (Greedy(), {}),
        (BeamSearch(beam_size=3, alpha=0.6), {"num_hypotheses": 3}),
        (Sampling(temperature=0.9, seed=5), {"num_hypotheses": 2}),
    ]
    common = {"source_ids": SOURCE, "drop_finished": False}  # dropping: the next test
    for search, kwargs in searches:
        want_ids, want_scores = _decode(a, search, **common, **kwargs)
        for members in ([a], [a, copy]) if search != searches[2][0] else ([a, copy],):
            ids, scores = _decode(Ensemble(members), search, **common, **kwargs)
            np.testing.assert_array_equal(ids, want_ids, err_msg=f"{search} {len(members)}")
            np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
        if search == searches[0][0]:
            target = want_ids
    np.testing.assert_allclose(
        Decoder(Ensemble([a, copy]), MAX_LENGTH).score(SOURCE, target),
        Decoder(a, MAX_LENGTH).score(SOURCE, target), rtol=1e-5, atol=1e-6,
    )  # fmt: skip


def test_two_models_decode_with_the_mean_of_their_log_probabilities(parts, eagerly):
    _, a, b, _ = parts
    ensemble = Ensemble([a, b])
    decoder = Decoder(ensemble, MAX_LENGTH, jit_compile=False)
    # The first cached step: the members' mean log-softmax, as the reference computes it.
    step_fn, state = decoder.step_function(SOURCE)
    logits, _ = step_fn(np.full([3, 1], tfblocks.BOS_ID, "int32"), 0, state)
    step = tf.nn.log_softmax(logits).numpy()  # [B, V]
    want = _reference([a, b], SOURCE, np.ones([3, 1], "int32"))[:, 0]  # [B, V]
    allowed = [tfblocks.EOS_ID, tfblocks.UNK_ID, *range(4, ensemble.vocab_size)]
    np.testing.assert_allclose(step[:, allowed], want[:, allowed], rtol=1e-5, atol=1e-5)
    # Greedy picks the reference's argmax at every step until EOS; its scores are the
    # reference's log-probabilities of its ids.
    ids, scores = _decode(ensemble, Greedy(), source_ids=SOURCE)
    full = _reference([a, b], SOURCE, ids)
    searching = np.cumsum(ids == tfblocks.EOS_ID, axis=1) - (ids == tfblocks.EOS_ID) == 0
    assert (ids == full.argmax(-1))[searching].all()
    own = _picked(full, ids)
    np.testing.assert_allclose(scores, own.sum(1), rtol=1e-4, atol=1e-4)
    # `score` is the reference, and differs from either member's.
    log_probs = decoder.score(SOURCE, ids).numpy()
    np.testing.assert_allclose(log_probs, own, rtol=1e-5, atol=1e-5)
    for member in (a, b):
        alone = Decoder(member, MAX_LENGTH, jit_compile=False).score(SOURCE, ids).numpy()
        assert np.abs(alone - log_probs).max() > 1e-2
    # A beam's score (alpha=0) is the sum of `score` over its hypothesis, for each of the
    # n best.
    beam = BeamSearch(beam_size=3, alpha=0.0)
    ids, scores = _decode(ensemble, beam, source_ids=SOURCE, num_hypotheses=3)  # [3, 3, L]
    rows = decoder.score(np.repeat(SOURCE, 3, axis=0), ids.reshape(9, -1)).numpy()
    np.testing.assert_allclose(scores.reshape(9), rows.sum(1), rtol=1e-4, atol=1e-4)


def test_decoder_only_members_and_a_forced_prefix(eagerly):
    hp = tiny_hparams(vocab_size=30, num_encoder_layers=0)
    keras.utils.set_random_seed(2)
    lm, other = tfblocks.build_language_model(hp), tfblocks.build_language_model(hp)
    prefix = np.array([[5, 6, 7], [8, 0, 0]], "int32")
    want = _decode(lm, Greedy(), prefix=prefix)
    got = _decode(Ensemble([lm]), Greedy(), prefix=prefix)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    ids, _ = _decode(Ensemble([lm, other]), BeamSearch(beam_size=2), prefix=prefix)
    np.testing.assert_array_equal(ids[:, :3] * (prefix != 0), prefix)
    tokenizer = train_tokenizer(TEXTS * 20, vocab_size=30)
    generator = Generator(Ensemble([lm, other]), tokenizer, max_length=MAX_LENGTH)
    assert generator(["Today's lunch", ""]).shape == (2,)


def test_members_are_checked(parts):
    tokenizer, a, _, _ = parts
    wider = tiny_model(tiny_hparams(vocab_size=50))
    lm = tfblocks.build_language_model(tiny_hparams(vocab_size=a.vocab_size, num_encoder_layers=0))
    vocabularies = f"'{a.name}' vocab_size={a.vocab_size}, .*'{wider.name}' vocab_size=50"
    for models, words in [
        ([a, wider], f"must share one target vocabulary .*{vocabularies}"),
        ([a, lm], f"all encoder–decoders .*'{lm.name}' decoder-only"),
        (a, "must be a list of trained models, got Transformer"),
        ([], "at least one model"),
        ([a, "b"], r"`models\[1\]` must be a tfblocks.Transformer .*got str"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            Ensemble(models)
    with pytest.raises(ValueError, match="`hidden` of an ensemble must be a list with one"):
        Ensemble([a, a]).logits(tf.zeros([1, 1, 32]))
    with pytest.raises(ValueError, match="`model` must be an encoder–decoder"):
        Translator(Ensemble([lm]), tokenizer, tokenizer)
    # Alignments read one model's cross-attention: an ensemble has none to offer.
    with pytest.raises(ValueError, match="An Ensemble has no one cross-attention"):
        Translator(Ensemble([a, a]), tokenizer, tokenizer, alignments=True)
    with pytest.raises(ValueError, match="align with a Translator of one of its models"):
        Translator(Ensemble([a, a]), tokenizer, tokenizer).align(["a"], ["b"])


def test_exported_as_one_saved_model(parts, tmp_path):
    tokenizer, a, b, _ = parts
    # Greedy, one loop (no dropping, one cache length): the least to trace in the export.
    options = {"max_length": MAX_LENGTH, "search": Greedy(), "jit_compile": False,
               "drop_finished": False, "cache_lengths": None}  # fmt: skip
    translator = Translator(Ensemble([a, b]), tokenizer, tokenizer, **options)
    tf.config.run_functions_eagerly(True)  # the in-memory answers, without tracing
    try:
        want = translator(TEXTS).numpy()
        want_scores = translator.score(TEXTS, TEXTS)
    finally:
        tf.config.run_functions_eagerly(False)
    path = translator.export(tmp_path / "ensemble")
    # Both members' weights, each once, are in it.
    assert len(translator._signature_variables) == len(a.variables) + len(b.variables)
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_array_equal(out["translation"].numpy(), want)
    scored = loaded.signatures["score"](source=tf.constant(TEXTS), target=tf.constant(TEXTS))
    np.testing.assert_allclose(scored["score"].numpy(), want_scores, rtol=1e-5)
