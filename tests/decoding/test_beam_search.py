"""Beam search: t2t's semantics (against a NumPy transcription), n-best lists, the two
stopping rules, the chunked top-k."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import fake_model, log_softmax, penalized, sequence_log_prob, sources
from tfblocks.decoding import BeamSearch, Decoder, Greedy
from tfblocks.decoding import beam_search as beam_search_module
from tfblocks.decoding.base import NEG_INF

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


def t2t_beam_search(numpy_logits, batch, beam, vocab, decode_length, alpha, eos_id):
    """t2t `beam_search.beam_search` (stop_early=True), transcribed to NumPy for one model.

    INF = 1e7 as in t2t; sequences exclude the initial id; finished hypotheses are
    zero-padded. Returns the top finished sequence (else the top live one) and its score.
    """
    inf = 1e7
    alive_seq = np.zeros((batch, beam, 0), int)
    alive_lp = np.tile([0.0] + [-inf] * (beam - 1), (batch, 1))
    fin_seq = np.zeros((batch, beam, 0), int)
    fin_scores = np.full((batch, beam), -inf)
    fin_flags = np.zeros((batch, beam), bool)
    for i in range(decode_length):
        max_penalty = ((5.0 + decode_length) / 6.0) ** alpha
        lower_bound_alive = alive_lp[:, 0] / max_penalty
        lowest_finished = (fin_scores * fin_flags).min(1) + (1 - fin_flags.any(1)) * -inf
        if np.all(lowest_finished > lower_bound_alive):
            break
        logits = np.array([[numpy_logits(s) for s in row] for row in alive_seq])  # [B, K, V]
        log_probs = log_softmax(logits) + alive_lp[:, :, None]
        penalty = ((5.0 + i + 1) / 6.0) ** alpha
        scores = (log_probs / penalty).reshape(batch, -1)
        top = np.argsort(-scores, axis=1, kind="stable")[:, : 2 * beam]
        top_scores = np.take_along_axis(scores, top, 1)
        top_lp = top_scores * penalty
        origin, token = top // vocab, top % vocab
        top_seq = np.concatenate(
            [np.take_along_axis(alive_seq, origin[:, :, None], 1), token[:, :, None]], axis=2
        )
        top_finished = token == eos_id
        alive_scores = top_lp + top_finished * -inf
        keep = np.argsort(-alive_scores, axis=1, kind="stable")[:, :beam]
        alive_seq = np.take_along_axis(top_seq, keep[:, :, None], 1)
        alive_lp = np.take_along_axis(alive_scores, keep, 1)
        fin_seq = np.concatenate([fin_seq, np.zeros((batch, beam, 1), int)], axis=2)
        all_seq = np.concatenate([fin_seq, top_seq], axis=1)
        all_scores = np.concatenate([fin_scores, top_scores + (1 - top_finished) * -inf], 1)
        all_flags = np.concatenate([fin_flags, top_finished], axis=1)
        best = np.argsort(-all_scores, axis=1, kind="stable")[:, :beam]
        fin_seq = np.take_along_axis(all_seq, best[:, :, None], 1)
        fin_scores = np.take_along_axis(all_scores, best, 1)
        fin_flags = np.take_along_axis(all_flags, best, 1)
    any_finished = fin_flags.any(1)
    seq = np.where(any_finished[:, None], fin_seq[:, 0], alive_seq[:, 0])
    score = np.where(any_finished, fin_scores[:, 0], alive_lp[:, 0])
    out = np.zeros((batch, decode_length), int)
    out[:, : seq.shape[1]] = seq
    return out, score


@pytest.mark.parametrize(("seed", "alpha", "beam"), [(0, 0.6, 3), (1, 0.0, 2), (2, 1.2, 4)])
def test_beam_search_equals_t2t_transcription(seed, alpha, beam):
    vocab, batch, length = 9, 5, 7
    step_fn, numpy_logits = fake_model(vocab, seed)
    start = np.full(batch, tfblocks.BOS_ID, "int32")
    state = np.zeros(batch, "int32")
    want_ids, want_scores = t2t_beam_search(numpy_logits, batch, beam, vocab, length, alpha, 1)
    ids, scores = BeamSearch(beam_size=beam, alpha=alpha).search(
        step_fn, state, start, length, eos_id=1
    )
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-4)


def test_beam_search_without_finished_hypothesis_returns_raw_log_prob():
    # EOS is never likely enough within 3 steps: t2t returns the live beam's raw log-prob.
    vocab = 6

    def step_fn(ids, index, state):
        logits = keras.ops.one_hot((ids[:, 0] + 1) % 4 + 2, vocab) * 5.0  # never EOS (1)
        return logits - 100.0 * keras.ops.one_hot(keras.ops.ones_like(ids[:, 0]), vocab), state

    ids, scores = BeamSearch(beam_size=2, alpha=1.0).search(step_fn, (), np.array([3]), 3)
    step = np.log(np.exp(5.0) / (np.exp(5.0) + 4 + np.exp(-100.0)))
    np.testing.assert_allclose(scores.numpy(), [3 * step], rtol=1e-5)
    assert not np.isin(ids.numpy(), [1]).any()


def test_beam_of_one_without_length_penalty_is_greedy(reverser):
    # Holds whenever greedy reaches EOS: t2t beam search prefers a finished hypothesis
    # to an unfinished one, so when greedy runs out of max_length they may differ.
    source = sources(np.random.default_rng(5), 32)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    greedy_ids, greedy_scores = decoder.decode(Greedy(), source)
    assert np.all((greedy_ids.numpy() == tfblocks.EOS_ID).any(-1))
    beam_ids, beam_scores = decoder.decode(BeamSearch(beam_size=1, alpha=0.0), source)
    np.testing.assert_array_equal(beam_ids.numpy(), greedy_ids.numpy())
    np.testing.assert_allclose(beam_scores.numpy(), greedy_scores.numpy(), rtol=1e-5)


def test_trained_model_beam_never_worse_than_greedy(reverser):
    source = sources(np.random.default_rng(99), 64)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    greedy_ids, greedy_scores = decoder.decode(Greedy(), source)
    beam_ids, beam_scores = decoder.decode(BeamSearch(beam_size=4, alpha=0.6), source)
    greedy_ids, beam_ids = greedy_ids.numpy(), beam_ids.numpy()
    # The model learned its task, so the searches below are not over noise: most greedy
    # outputs are the exact reversal. (Its weights depend on the CPU's kernels, so the
    # margin is wide: 0.94 on an AVX2 CPU, an untrained model scores 0.)
    expected = [[*row[: np.argmax(row == 1)][::-1], 1] for row in source]
    exact = np.mean([list(g[: len(e)]) == e for g, e in zip(greedy_ids, expected, strict=True)])
    assert exact >= 0.5, exact
    assert np.all((greedy_ids == tfblocks.EOS_ID).any(-1))
    greedy_penalized = penalized(greedy_scores.numpy(), greedy_ids, 0.6)
    assert np.all(beam_scores.numpy() >= greedy_penalized - 1e-4)
    # The beam's score is its own sequence's log-probability, length-penalized.
    own = penalized(sequence_log_prob(reverser, source, beam_ids), beam_ids, 0.6)
    np.testing.assert_allclose(beam_scores.numpy(), own, rtol=1e-4, atol=1e-4)


def test_n_best_scores_are_the_scores_of_their_hypotheses(reverser):
    # The reverser's hypotheses all end within max_length (finished), so each row's score
    # is its log-probability (Decoder.score, one teacher-forced pass) over t2t's length
    # penalty, and with alpha=0 the log-probability itself.
    source = sources(np.random.default_rng(11), 6)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    for alpha in (0.0, 0.6):
        beam = BeamSearch(beam_size=4, alpha=alpha)
        best_ids, best_scores = decoder.decode(beam, source)
        ids, scores = decoder.decode(beam, source, num_hypotheses=3)
        ids, scores = ids.numpy(), scores.numpy()
        assert ids.shape == (6, 3, 10) and scores.shape == (6, 3)
        np.testing.assert_array_equal(ids[:, 0], best_ids.numpy())  # the 1-best comes first
        np.testing.assert_allclose(scores[:, 0], best_scores.numpy(), rtol=1e-5)
        assert (ids == tfblocks.EOS_ID).any(-1).all()
        assert all(len({tuple(h) for h in row}) == 3 for row in ids)  # three hypotheses
        assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
        log_probs = decoder.score(np.repeat(source, 3, axis=0), ids.reshape(18, 10)).numpy()
        assert (log_probs[ids.reshape(18, 10) == 0] == 0).all()  # nothing at padding
        own = penalized(log_probs.sum(-1), ids.reshape(18, 10), alpha).reshape(6, 3)
        np.testing.assert_allclose(scores, own, atol=1e-4)
    # Decoder.score is the NumPy teacher forcing of the model.
    flat = ids.reshape(18, 10)
    np.testing.assert_allclose(
        log_probs.sum(-1), sequence_log_prob(reverser, np.repeat(source, 3, 0), flat), atol=1e-4
    )


def _table_model(table):
    """A step function whose log-probabilities `table[index, last token]` (`[L, V, V]`)
    depend on the position and the last token, and that counts its (eager) steps."""
    table = np.log(np.asarray(table, "float32") + 1e-9)
    steps = []

    def step_fn(ids, index, state):
        steps.append(int(index))
        return keras.ops.take(table[int(index)], ids[:, 0], axis=0), state

    return step_fn, steps


def _probs(**p):
    """A distribution over the 5 ids (PAD 0, EOS 1, A 2, BOS 3, C 4) from keyword masses."""
    names = {"eos": 1, "a": 2, "c": 4}
    row = np.full(5, 1e-6)
    for name, mass in p.items():
        row[names[name]] = mass
    return row / row.sum()


def test_stop_early_ends_when_beam_size_hypotheses_finished():
    # Beam 2, alpha 0. Step 0 from BOS: A (0.6), EOS (0.25), C (0.15): "EOS" finishes.
    # Step 1: C -> EOS (0.9) finishes a second hypothesis, while A -> A (0.9) stays alive
    # with a log-probability above both finished ones. Step 2: A A -> EOS (0.9).
    # fairseq's rule stops after step 1 (two finished) and returns "EOS"; t2t's goes on
    # (a live beam can still win) and returns "A A EOS".
    uniform = np.tile(_probs(eos=1, a=1, c=1), (5, 1))
    table = np.stack([uniform.copy() for _ in range(4)])  # [L=4, last, next]
    table[0, tfblocks.BOS_ID] = _probs(a=0.6, eos=0.25, c=0.15)
    table[1, 2] = _probs(a=0.9, eos=0.05, c=0.05)  # after A
    table[1, 4] = _probs(eos=0.9, a=0.05, c=0.05)  # after C
    table[2, 2] = _probs(eos=0.9, a=0.05, c=0.05)  # after A A
    start = np.array([tfblocks.BOS_ID], "int32")
    results = {}
    for stop_early in (False, True):
        step_fn, steps = _table_model(table)
        beam = BeamSearch(beam_size=2, alpha=0.0, stop_early=stop_early)
        ids, scores = beam.search(step_fn, (), start, 4, eos_id=1, num_hypotheses=2)
        results[stop_early] = (ids.numpy()[0].tolist(), scores.numpy()[0], len(steps))
    (t2t_ids, t2t_scores, t2t_steps), (early_ids, early_scores, early_steps) = results.values()
    assert early_steps == 2 and early_ids == [[1, 0, 0, 0], [4, 1, 0, 0]]
    np.testing.assert_allclose(early_scores, np.log([0.25, 0.15 * 0.9]), rtol=1e-4)
    assert t2t_steps == 3 and t2t_ids == [[2, 2, 1, 0], [1, 0, 0, 0]]
    np.testing.assert_allclose(t2t_scores, np.log([0.6 * 0.9 * 0.9, 0.25]), rtol=1e-4)
    # The t2t rule stops once the best finished hypothesis beats every live beam (and,
    # for two hypotheses, two have finished): here at the same step for one or two.
    step_fn, steps = _table_model(table)
    ids, _ = BeamSearch(beam_size=2, alpha=0.0).search(step_fn, (), start, 4, eos_id=1)
    assert ids.numpy()[0].tolist() == [2, 2, 1, 0] and len(steps) == 3


def test_stop_early_differs_from_t2t_only_by_a_better_later_hypothesis(reverser):
    # Both rules run the same search until stop-early ends it (beam_size hypotheses
    # finished); t2t's goes on only while a live beam could still win. So for every model:
    # where the results are the same their scores are too, and where they differ t2t's
    # hypothesis finished after stop-early had stopped (it is longer than stop-early's)
    # and scores higher. Nothing here depends on how well the model learned.
    source = sources(np.random.default_rng(12), 16)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    t2t_ids, t2t_scores = (x.numpy() for x in decoder.decode(BeamSearch(4, 0.6), source))
    early = decoder.decode(BeamSearch(4, 0.6, stop_early=True), source)
    early_ids, early_scores = (x.numpy() for x in early)
    same = (t2t_ids == early_ids).all(-1)
    assert same.any(), same  # both rules end the same way somewhere
    np.testing.assert_allclose(early_scores[same], t2t_scores[same], rtol=1e-5)
    differ = ~same
    t2t_lengths, early_lengths = (t2t_ids != 0).sum(-1), (early_ids != 0).sum(-1)
    assert (t2t_lengths[differ] > early_lengths[differ]).all(), (t2t_ids, early_ids)
    assert (t2t_scores[differ] > early_scores[differ]).all(), (t2t_scores, early_scores)


def test_top_k_equals_tf_top_k_ties_included():
    """The chunked top-k of a beam's candidates gives tf.math.top_k's values and indices
    (ties to the lower index), for static rows long enough to be chunked and for rows of
    unknown length (a segment's trace), even shorter than k chunks."""
    rng = np.random.default_rng(3)
    long_row = 4 * 2 * beam_search_module.TOP_K_CHUNK + 77  # chunked with a static length
    unknown = tf.function(
        lambda x: beam_search_module.top_k(x, 2),
        input_signature=[tf.TensorSpec([None, None], tf.float32)],
    )
    for n in (5, 300, long_row):
        x = np.round(rng.standard_normal((3, n)) * 2).astype("float32") / 2  # many ties
        x[2] = NEG_INF
        x[2, n // 2] = 0.0
        expected = tf.math.top_k(x, 2)
        for values, indices in (beam_search_module.top_k(tf.constant(x), 2), unknown(x)):
            np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
            np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
