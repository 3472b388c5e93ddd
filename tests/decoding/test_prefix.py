"""A forced prefix: every result starts with it, its tokens count in the score as the
scoring path counts them, and a beam search keeps no other hypothesis of a sentence until
the prefix ends (no junk finished hypothesis scored near NEG_INF, in 1-best or n-best).

Against a NumPy reference over a fake step function (beam, greedy, sampling, XLA), and
through `Decoder` on tiny untrained models (one and an ensemble, with finished sentences
leaving the batch), against `Decoder.score`."""

import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import fake_model, log_softmax, penalized
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.decoding import (
    BeamSearch,
    ConstrainedBeamSearch,
    Decoder,
    Ensemble,
    Greedy,
    Sampling,
)
from tfblocks.decoding import dropping as dropping_module
from tfblocks.decoding.base import NEG_INF

EOS, PAD, BOS = tfblocks.EOS_ID, tfblocks.PAD_ID, tfblocks.BOS_ID

# The fake step function: 12 ids, PAD and BOS ruled out as `Decoder` rules them out.
FAKE_VOCAB, LENGTH = 12, 10
NEVER = np.zeros(FAKE_VOCAB, "float32")
NEVER[[PAD, BOS]] = NEG_INF
# Prefixes of 6, 2, 0 and 4 ids (no EOS), 0-padded.
PREFIX = np.array(
    [[5, 6, 7, 8, 9, 10], [4, 4, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [11, 5, 7, 9, 0, 0]], "int32"
)


def _fake(seed=3):
    """`(step_fn, numpy_logits, state, start)` of `fake_model` with PAD and BOS ruled out,
    for the rows of PREFIX."""
    step_fn, numpy_logits = fake_model(FAKE_VOCAB, seed)

    def allowed(ids, index, state):
        logits, state = step_fn(ids, index, state)
        return logits + NEVER, state

    batch = len(PREFIX)
    return allowed, numpy_logits, np.zeros(batch, "int32"), np.full(batch, BOS, "int32")


def _reference(numpy_logits, ids, alpha=None):
    """NumPy: the log-probability of `ids` (up to its EOS; PAD after it), over t2t's length
    penalty when it ends with EOS and `alpha` is given."""
    seq, total = [], 0.0
    for token in ids:
        if token == PAD:
            break
        total += log_softmax(numpy_logits(seq) + NEVER)[token]
        seq.append(int(token))
        if token == EOS:
            break
    if alpha is not None and seq[-1:] == [EOS]:
        total /= ((5.0 + len(seq)) / 6.0) ** alpha
    return total


def _check_results(ids, scores, prefix, own, finished_first=True):
    """`ids [B, N, L]` and `scores [B, N]`: every hypothesis starts with its sentence's
    prefix, is a real one (no score near NEG_INF), differs from the others and scores `own`
    (its log-probability as the scoring path gives it); in t2t's order (finished ones
    first), each group best first, or (`finished_first=False`) best first."""
    lengths = (prefix != PAD).sum(1)
    for row, n in enumerate(lengths):
        assert (ids[row, :, :n] == prefix[row, :n]).all(), (row, ids[row])
        assert len({tuple(h) for h in ids[row]}) == ids.shape[1], ids[row]
    assert (scores > -1e8).all(), scores
    np.testing.assert_allclose(scores, own, rtol=1e-5, atol=1e-4)
    finished = (ids == EOS).any(-1)  # [B, N]
    for row_finished, row_scores in zip(finished, scores, strict=True):
        groups = (row_finished, ~row_finished)
        if finished_first:
            assert (np.diff(row_finished.astype(int)) <= 0).all(), finished
        else:
            groups = (np.ones_like(row_finished),)
        for group in groups:
            assert (np.diff(row_scores[group]) <= 1e-6).all(), scores


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_keeps_only_the_forced_path_while_a_prefix_lasts(alpha):
    # With alpha=2 the length penalty passes 2 at the 4th forced position: a search that
    # kept the forced position's other tokens as NEG_INF candidates scored them above
    # NEG_INF / 2 there and finished them.
    step_fn, numpy_logits, state, start = _fake()
    beam = BeamSearch(beam_size=3, alpha=alpha)
    ids, scores = beam.search(step_fn, state, start, LENGTH, num_hypotheses=3, prefix=PREFIX)
    ids, scores = ids.numpy(), scores.numpy()
    own = [[_reference(numpy_logits, h, alpha) for h in row] for row in ids]
    _check_results(ids, scores, PREFIX, own)
    best_ids, best_scores = beam.search(step_fn, state, start, LENGTH, prefix=PREFIX)
    np.testing.assert_array_equal(best_ids.numpy(), ids[:, 0])
    np.testing.assert_allclose(best_scores.numpy(), scores[:, 0], rtol=1e-6)


def test_greedy_and_sampling_force_the_prefix_and_count_it():
    step_fn, numpy_logits, state, start = _fake()
    for search, n in ((Greedy(), None), (Sampling(seed=2), 2)):
        ids, scores = search.search(step_fn, state, start, LENGTH, num_hypotheses=n, prefix=PREFIX)
        ids, scores = ids.numpy(), scores.numpy()
        if n is None:
            ids, scores = ids[:, None], scores[:, None]
        own = [[_reference(numpy_logits, h) for h in row] for row in ids]
        if n is None:
            _check_results(ids, scores, PREFIX, own, finished_first=False)
        else:  # two samples may be the same
            lengths = (PREFIX != PAD).sum(1)
            assert all((ids[r, :, :k] == PREFIX[r, :k]).all() for r, k in enumerate(lengths))
            np.testing.assert_allclose(scores, own, rtol=1e-5, atol=1e-4)
            assert (np.diff(scores, axis=1) <= 1e-6).all(), scores


# A prefix of LENGTH ids (no room for EOS) and one of LENGTH − 1 ids, in the fake vocabulary.
FULL = np.arange(LENGTH, dtype="int32")[None] % 8 + 4  # [1, LENGTH]: ids 4 … 11
NO_ROOM = r"`prefix` holds 10 ids, but max_length=10 leaves room for at most 9 before EOS"


@pytest.mark.parametrize(
    "search", [Greedy(), Sampling(seed=2), BeamSearch(beam_size=3), ConstrainedBeamSearch(3)]
)
def test_a_prefix_that_leaves_no_room_for_eos_is_refused_a_shorter_one_kept_whole(search):
    # Was: beam search cut such a prefix silently (and the serving side cut it to
    # max_length − 1 ids, so the search replaced its last forced subword).
    step_fn, numpy_logits, _, _ = _fake()
    state, start = np.zeros(1, "int32"), np.full(1, BOS, "int32")
    n = min(search.max_hypotheses or 3, 3)
    with pytest.raises(ValueError, match=NO_ROOM):
        search.search(step_fn, state, start, LENGTH, num_hypotheses=n, prefix=FULL)
    ids, scores = search.search(
        step_fn, state, start, LENGTH, num_hypotheses=n, prefix=FULL[:, :-1]
    )
    ids, scores = np.reshape(ids.numpy(), [-1, LENGTH]), np.reshape(scores.numpy(), [-1])
    assert (ids[:, : LENGTH - 1] == FULL[0, :-1]).all(), ids  # every hypothesis keeps it whole
    own = [_reference(numpy_logits, h, search.get_config().get("alpha")) for h in ids]
    np.testing.assert_allclose(scores, own, rtol=1e-5, atol=1e-4)


def test_a_phrase_that_cannot_fit_after_the_prefix_is_refused():
    step_fn, _, _, _ = _fake()
    state, start = np.zeros(1, "int32"), np.full(1, BOS, "int32")
    prefix = FULL[:, :6]  # 4 5 6 7 8 9: 3 ids fit after it before EOS
    search = ConstrainedBeamSearch(beam_size=3)
    for phrase in ([10, 11, 4, 5], [9, 10, 11, 4, 5]):  # 4 ids after it (the second overlaps)
        with pytest.raises(
            ValueError,
            match=r"phrase 0 of sentence 0 .* needs 4 ids after the "
            r"prefix's 6, but max_length=10 leaves room for 3 before EOS",
        ):
            search.search(step_fn, state, start, LENGTH, prefix=prefix, constraints=[[phrase]])
    # Phrases that fit: after the prefix, overlapping its end, or inside it (however long).
    for phrase in ([10, 11, 4], [8, 9, 10, 11, 4], [5, 6, 7, 8, 9]):
        ids, _ = search.search(step_fn, state, start, LENGTH, prefix=prefix, constraints=[[phrase]])
        row = ids.numpy()[0].tolist()
        assert row[:6] == prefix[0].tolist() and EOS in row, row
        assert any(row[i : i + len(phrase)] == phrase for i in range(LENGTH)), (phrase, row)


def test_a_compiled_search_forces_as_the_eager_one():
    step_fn, _, state, start = _fake()
    beam = BeamSearch(beam_size=3, alpha=0.6)

    def search(prefix):
        return beam.search(step_fn, state, start, LENGTH, num_hypotheses=3, prefix=prefix)

    compiled = tf.function(search, jit_compile=True, autograph=False)
    ids, scores = compiled(tf.constant(PREFIX))
    want_ids, want_scores = search(PREFIX)
    np.testing.assert_array_equal(ids.numpy(), want_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-5)


def test_a_bad_prefix_is_refused():
    step_fn, _, state, start = _fake()
    with pytest.raises(ValueError, match=r"`prefix` must hold integer token ids.*float32"):
        Greedy().search(step_fn, state, start, LENGTH, prefix=PREFIX.astype("float32"))
    with pytest.raises(ValueError, match=r"`prefix` must hold a row per start id \(4\)"):
        BeamSearch(2).search(step_fn, state, start, LENGTH, prefix=PREFIX[:2])


# Through Decoder: tiny untrained models of 20 ids, 12 tokens at most.
VOCAB, MAX_LENGTH = 20, 12
SOURCE = np.array([[5, 9, 13, 1, 0], [7, 1, 0, 0, 0], [19, 4, 8, 12, 1], [6, 6, 1, 0, 0]], "int32")
# 8 forced ids in row 0: with alpha=1 the length penalty passes 2 at the 8th.
TARGET_PREFIX = np.array(
    [
        [4, 9, 17, 5, 11, 8, 16, 6],
        [12, 7, 10, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [18, 5, 14, 9, 7, 0, 0, 0],
    ],
    "int32",
)


@pytest.fixture(scope="module")
def models():
    hp = tiny_hparams(vocab_size=VOCAB)
    return tiny_model(hp, seed=0), tiny_model(hp, seed=1)


def test_decoder_prefixes_in_beam_n_best_ensembles_and_dropping(models, eagerly, monkeypatch):
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)  # the batch shrinks as sentences end
    a, b = models
    beam = BeamSearch(beam_size=3, alpha=1.0)
    for model in (a, Ensemble([a, b])):
        whole = Decoder(model, MAX_LENGTH, jit_compile=False, drop_finished=False)
        dropping = Decoder(model, MAX_LENGTH, jit_compile=False)
        best = []
        for decoder in (whole, dropping):
            out = decoder.decode(beam, SOURCE, prefix=TARGET_PREFIX, num_hypotheses=3)
            ids, scores = (x.numpy() for x in out)
            # Each hypothesis scores its ids' log-probability (Decoder.score), over the
            # length penalty when it finished.
            flat = ids.reshape(-1, MAX_LENGTH)
            log_probs = whole.score(np.repeat(SOURCE, 3, axis=0), flat).numpy().sum(-1)
            finished = (flat == EOS).any(-1)
            own = np.where(finished, penalized(log_probs, flat, 1.0), log_probs).reshape(4, 3)
            _check_results(ids, scores, TARGET_PREFIX, own)
            # The 1-best is the n-best list's first.
            out = decoder.decode(beam, SOURCE, prefix=TARGET_PREFIX)
            best_ids, best_scores = (x.numpy() for x in out)
            np.testing.assert_array_equal(best_ids, ids[:, 0])
            np.testing.assert_allclose(best_scores, scores[:, 0], rtol=1e-5, atol=1e-5)
            best.append((best_ids, best_scores))
        # Sentences leaving the batch take their prefixes along: the same translations.
        (whole_ids, whole_scores), (dropped_ids, dropped_scores) = best
        np.testing.assert_array_equal(dropped_ids, whole_ids)
        np.testing.assert_allclose(dropped_scores, whole_scores, rtol=1e-5, atol=1e-5)
        # Greedy: the prefix, then the model's choices; the score is Decoder.score's.
        greedy_ids, greedy_scores = whole.decode(Greedy(), SOURCE, prefix=TARGET_PREFIX)
        greedy_ids, greedy_scores = greedy_ids.numpy()[:, None], greedy_scores.numpy()[:, None]
        own = whole.score(SOURCE, greedy_ids[:, 0]).numpy().sum(-1)[:, None]
        _check_results(greedy_ids, greedy_scores, TARGET_PREFIX, own, finished_first=False)


def test_decoder_refuses_a_prefix_that_leaves_no_room_for_eos(models):
    model, _ = models
    decoder = Decoder(model, MAX_LENGTH, jit_compile=False)
    full = np.arange(MAX_LENGTH, dtype="int32")[None] % 16 + 4  # [1, MAX_LENGTH]
    no_room = r"`prefix` holds 12 ids, but max_length=12 leaves room for at most 11 before EOS"
    for search in (Greedy(), Sampling(seed=1), BeamSearch(beam_size=2)):
        with pytest.raises(ValueError, match=no_room):
            decoder.decode(search, SOURCE[:1], prefix=full)
    # t2t's extra_length makes the search shorter than max_length: 5 source ids + 2.
    with pytest.raises(ValueError, match=r"`prefix` holds 8 ids, but max_length=7 leaves"):
        decoder.decode(BeamSearch(beam_size=2), SOURCE, prefix=TARGET_PREFIX, extra_length=2)
    # Traced (a SavedModel's signature, values unknown) with an XLA-compiled search: an
    # assertion that runs before the compiled search (where XLA would drop it).
    compiled = Decoder(model, MAX_LENGTH, jit_compile=True)
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec], autograph=False)
    def translate(source, prefix):
        return compiled.decode(BeamSearch(beam_size=2), source, prefix=prefix)

    with pytest.raises(tf.errors.InvalidArgumentError, match=no_room):
        translate(SOURCE[:1], full)
