"""Decoding: cached equals uncached, beam search semantics, sampling, batch independence."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.decoding import BeamSearch, Decoder, Greedy, Sampling, beam_or_greedy
from tfblocks.decoding import dropping as dropping_module
from tfblocks.decoding import steps as steps_module

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

VOCAB = 16
RNG = np.random.default_rng(21)


def _sources(rng, n, low=4, high=VOCAB, max_len=7):
    """Random source ids ending with EOS, right-padded with 0."""
    lengths = rng.integers(2, max_len, size=n)
    out = np.zeros((n, max_len + 1), "int32")
    for row, length in enumerate(lengths):
        out[row, :length] = rng.integers(low, high, size=length)
        out[row, length] = tfblocks.EOS_ID
    return out


def uncached_greedy(model, source, max_length):
    """What the TensorFlow tutorial ships: re-run the whole model for every new token."""
    generated = np.zeros((len(source), 0), "int32")
    finished = np.zeros(len(source), bool)
    for i in range(max_length):
        targets = np.concatenate([generated, np.zeros((len(source), 1), "int32")], axis=1)
        logits = keras.ops.convert_to_numpy(model({"inputs": source, "targets": targets}))[:, i]
        logits[:, [tfblocks.PAD_ID, tfblocks.BOS_ID]] = -1e9
        token = np.where(finished, 0, logits.argmax(-1)).astype("int32")
        finished |= token == tfblocks.EOS_ID
        generated = np.concatenate([generated, token[:, None]], axis=1)
    return generated


@pytest.fixture(scope="module")
def reverser():
    """A one-layer model trained to reverse its input (about ten seconds of training).

    Shared by the tests that only decode with it. Trained without XLA: for this tiny
    model compiling the train step costs more than it saves.
    """
    keras.utils.set_random_seed(0)
    hp = tfblocks.hparams(
        "transformer_tiny",
        vocab_size=VOCAB,
        hidden_size=64,
        filter_size=128,
        num_encoder_layers=1,
        num_decoder_layers=1,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
    )
    model = tfblocks.build_transformer(hp)
    tfblocks.compile_transformer(
        model, hp, learning_rate=3e-3, jit_compile=False, steps_per_execution=16
    )
    rng = np.random.default_rng(0)
    source = _sources(rng, 4096)
    target = np.zeros_like(source)
    for row, ids in enumerate(source):
        n = int(np.argmax(ids == tfblocks.EOS_ID))
        target[row, :n] = ids[:n][::-1]
        target[row, n] = tfblocks.EOS_ID
    model.fit({"inputs": source, "targets": target}, target, batch_size=64, epochs=4, verbose=0)
    return model


# The XLA-compiled search against the reference on one architecture; the other
# architecture without XLA (compiling is the slow part; the cache logic is the same).
@pytest.mark.parametrize(
    ("overrides", "jit_compile"),
    [
        ({}, True),
        ({"norm_first": False, "shared_embedding_and_softmax_weights": False}, False),
    ],
)
def test_cached_greedy_equals_uncached_argmax(overrides, jit_compile):
    keras.utils.set_random_seed(3)
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB,
                                                        **overrides))  # fmt: skip
    source = _sources(RNG, 4)
    ids, scores = Decoder(model, max_length=9, jit_compile=jit_compile).decode(Greedy(), source)
    np.testing.assert_array_equal(ids.numpy(), uncached_greedy(model, source, 9))
    assert np.all(np.isfinite(scores.numpy())) and np.all(scores.numpy() < 0)


def test_beam_of_one_without_length_penalty_is_greedy(reverser):
    # Holds whenever greedy reaches EOS: t2t beam search prefers a finished hypothesis
    # to an unfinished one, so when greedy runs out of max_length they may differ.
    source = _sources(np.random.default_rng(5), 32)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    greedy_ids, greedy_scores = decoder.decode(Greedy(), source)
    assert np.all((greedy_ids.numpy() == tfblocks.EOS_ID).any(-1))
    beam_ids, beam_scores = decoder.decode(BeamSearch(beam_size=1, alpha=0.0), source)
    np.testing.assert_array_equal(beam_ids.numpy(), greedy_ids.numpy())
    np.testing.assert_allclose(beam_scores.numpy(), greedy_scores.numpy(), rtol=1e-5)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    keras.utils.set_random_seed(5)
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    source = _sources(RNG, 3)
    decoder = Decoder(model, max_length=8, jit_compile=False)
    a, _ = decoder.decode(Sampling(temperature=2.0, seed=1), source)
    b, _ = decoder.decode(Sampling(temperature=2.0, seed=1), source)
    c, _ = decoder.decode(Sampling(temperature=2.0, seed=2), source)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    one, _ = decoder.decode(Sampling(top_k=1, seed=9), source)
    np.testing.assert_array_equal(one.numpy(), decoder.decode(Greedy(), source)[0].numpy())
    assert not np.isin(a.numpy(), [tfblocks.BOS_ID]).any()


def test_bad_arguments():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    with pytest.raises(ValueError, match="max_length=0"):
        Decoder(model, max_length=0)
    decoder = Decoder(model, max_length=4)
    with pytest.raises(ValueError, match="beam_size=0"):
        decoder.decode(BeamSearch(beam_size=0), _sources(RNG, 1))
    with pytest.raises(ValueError, match="temperature=0"):
        decoder.decode(Sampling(temperature=0), _sources(RNG, 1))
    with pytest.raises(ValueError, match="top_k=-1"):
        decoder.decode(Sampling(top_k=-1), _sources(RNG, 1))
    with pytest.raises(ValueError, match="alpha=-1"):
        decoder.decode(BeamSearch(alpha=-1), _sources(RNG, 1))


def test_ids_must_be_integers_of_the_vocabulary_and_options_sane():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    decoder = Decoder(model, max_length=4, jit_compile=False)
    for source, words in [
        (np.array([[5.7, 1.0]]), "`source_ids` must hold integer token ids, got dtype float64"),
        ([[5, 10**6, 1]], "`source_ids` must hold ids in [0, 16) (the model's vocab_size), got "
                          "source_ids[0, 1]=1000000"),
        (np.array([[4, 1], [-5, 1]], "int64"), "source_ids[1, 0]=-5"),
        (np.array([[True]]), "dtype bool"),
        (np.array([5, 1]), "must be 2-D"),
    ]:  # fmt: skip
        with pytest.raises(ValueError) as error:
            decoder.decode(Greedy(), source)
        assert words in str(error.value), error.value
    # In a traced function the values are unknown: the dtype is still checked.
    traced = tf.function(lambda source: decoder.decode(Greedy(), source), autograph=False)
    with pytest.raises(ValueError, match="dtype float32"):
        traced.get_concrete_function(tf.TensorSpec([None, None], tf.float32))
    lm = tfblocks.build_language_model(
        tfblocks.hparams("transformer_tiny", vocab_size=VOCAB, num_encoder_layers=0)
    )
    with pytest.raises(ValueError, match=r"`prefix`.*float32"):
        Decoder(lm, max_length=4).decode(Greedy(), prefix=tf.constant([[5.0]]))
    # Sampling's options are refused when made; a top-k beyond the vocabulary before decoding.
    for make, words in [
        (lambda: Sampling(temperature=0), "temperature=0"),
        (lambda: Sampling(temperature=float("inf")), "temperature=inf"),
        (lambda: Sampling(temperature="0.5"), "temperature='0.5'"),
        (lambda: Sampling(top_p=float("nan")), "top_p=nan"),
        (lambda: Sampling(top_p=1.5), "top_p=1.5"),
        (lambda: BeamSearch(alpha=float("nan")), "alpha=nan"),
    ]:
        with pytest.raises(ValueError, match=words):
            make()
    with pytest.raises(ValueError, match=r"top_k=17 tokens but the model's vocabulary has only 16"):
        decoder.decode(Sampling(top_k=17), _sources(RNG, 1))


def test_mixed_precision_decoding_is_finite():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    ids, scores = Decoder(model, max_length=6, jit_compile=False).decode(
        BeamSearch(beam_size=3), _sources(RNG, 2)
    )
    assert ids.shape == (2, 6) and np.all(np.isfinite(scores.numpy()))


def _penalized(scores, ids, alpha):
    lengths = np.minimum((ids != 0).sum(-1), ids.shape[1])
    return scores / ((5.0 + lengths) / 6.0) ** alpha


def test_trained_model_beam_never_worse_than_greedy(reverser):
    source = _sources(np.random.default_rng(99), 64)
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
    greedy_penalized = _penalized(greedy_scores.numpy(), greedy_ids, 0.6)
    assert np.all(beam_scores.numpy() >= greedy_penalized - 1e-4)
    # The beam's score is its own sequence's log-probability, length-penalized.
    own = _penalized(sequence_log_prob(reverser, source, beam_ids), beam_ids, 0.6)
    np.testing.assert_allclose(beam_scores.numpy(), own, rtol=1e-4, atol=1e-4)


def sequence_log_prob(model, source, ids):
    """Sum of log p(token) over each row of `ids` up to its EOS, by teacher forcing."""
    logits = keras.ops.convert_to_numpy(model({"inputs": source, "targets": ids}))
    logits[..., [tfblocks.PAD_ID, tfblocks.BOS_ID]] = -1e9
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    return (picked * (ids != 0)).sum(-1)


def test_translation_does_not_depend_on_batch_mates(reverser):
    source = _sources(np.random.default_rng(7), 6)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    beam_together = decoder.decode(BeamSearch(beam_size=3), source)[0].numpy()
    greedy_together = decoder.decode(Greedy(), source)[0].numpy()
    # Alone in the batch (same padded width), and alone without any padding.
    alone_rows = [source[row : row + 1] for row in range(3)]
    alone_rows.append(source[:1, : int(np.argmax(source[0] == tfblocks.EOS_ID)) + 1])
    for row, alone in zip([0, 1, 2, 0], alone_rows, strict=True):
        np.testing.assert_array_equal(
            decoder.decode(BeamSearch(beam_size=3), alone)[0].numpy()[0], beam_together[row]
        )
        np.testing.assert_array_equal(
            decoder.decode(Greedy(), alone)[0].numpy()[0], greedy_together[row]
        )


# The searches over a step function, against a NumPy transcription of t2t --------------------

HASH = 1009  # the fake model's "context" is a running hash of the ids it was fed


def fake_model(vocab, seed):
    """Random logits that depend on the whole prefix, as a step function and in NumPy."""
    table = np.random.default_rng(seed).normal(scale=3.0, size=(HASH, vocab)).astype("float32")

    def step_fn(ids, index, state):
        state = (state * 7 + ids[:, 0] + 1) % HASH  # [N]: the state beam search must reorder
        return keras.ops.take(table, state, axis=0), state

    def numpy_logits(prefix):
        h = 0
        for token in [tfblocks.BOS_ID, *prefix]:
            h = (h * 7 + int(token) + 1) % HASH
        return table[h].astype("float64")

    return step_fn, numpy_logits


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


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
        log_probs = _log_softmax(logits) + alive_lp[:, :, None]
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


def test_greedy_and_sampling_searches_on_a_fake_model():
    vocab, batch, length = 9, 6, 8
    step_fn, numpy_logits = fake_model(vocab, 3)
    start = np.full(batch, tfblocks.BOS_ID, "int32")
    state = np.zeros(batch, "int32")
    ids, scores = Greedy().search(step_fn, state, start, length, eos_id=1, pad_id=0)
    for row, score in zip(ids.numpy(), scores.numpy(), strict=True):
        prefix, total = [], 0.0
        for _ in range(length):
            log_probs = _log_softmax(numpy_logits(prefix))
            token = int(log_probs.argmax())
            prefix.append(token)
            total += log_probs[token]
            if token == 1:
                break
        np.testing.assert_array_equal(row, prefix + [0] * (length - len(prefix)))
        np.testing.assert_allclose(score, total, rtol=1e-5)
    # Nucleus sampling with a tiny top_p keeps only the best token: greedy.
    nucleus, _ = Sampling(top_p=1e-6, seed=4).search(step_fn, state, start, length, 1, 0)
    np.testing.assert_array_equal(nucleus.numpy(), ids.numpy())
    a, _ = Sampling(top_p=0.9, seed=4).search(step_fn, state, start, length, 1, 0)
    b, _ = Sampling(top_p=0.9, seed=4).search(step_fn, state, start, length, 1, 0)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32"))
    kept = steps_module._filter_top_p(keras.ops.convert_to_tensor(logits), 0.7).numpy()
    assert np.isfinite(kept[0, :2]).all() and (kept[0, 2:] <= steps_module.NEG_INF).all()
    kept = steps_module._filter_top_p(keras.ops.convert_to_tensor(logits), 0.85).numpy()
    assert (kept[0, :3] > steps_module.NEG_INF).all() and kept[0, 3] <= steps_module.NEG_INF


def test_search_arguments_are_checked():
    step_fn, _ = fake_model(5, 0)
    start, state = np.array([3]), np.zeros(1, "int32")
    with pytest.raises(ValueError, match="top_p=0"):
        Sampling(top_p=0).search(step_fn, state, start, 4)
    with pytest.raises(ValueError, match="max_length=0"):
        Greedy().search(step_fn, state, start, 0)
    with pytest.raises(ValueError, match="eos_id=-1"):
        BeamSearch().search(step_fn, state, start, 4, eos_id=-1)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_extra_length_bounds_the_decode_length(reverser, jit_compile):
    source = _sources(np.random.default_rng(5), 3)  # [3, 8]
    decoder = Decoder(reverser, max_length=30, jit_compile=jit_compile)
    for strategy in (Greedy(), BeamSearch(beam_size=2)):
        full, _ = decoder.decode(strategy, source)
        short, _ = decoder.decode(strategy, source, extra_length=2)  # min(30, 8 + 2)
        assert full.shape == (3, 30) and short.shape == (3, 10)
        # The reverser's outputs (at most 7 ids + EOS) fit in 10: the same ids.
        np.testing.assert_array_equal(short.numpy(), full.numpy()[:, :10])
        assert not full.numpy()[:, 10:].any()
    with pytest.raises(ValueError, match="extra_length=-1"):
        decoder.decode(Greedy(), source, extra_length=-1)


# Growing caches (`cache_lengths`): the searches run one loop per cache length.


def test_searches_grow_the_state_between_loops():
    # A fake model whose state is a "cache" [N, L]: record the cache lengths each
    # traced step sees and check the results equal those of one loop over length 8.
    vocab, batch, length = 9, 3, 8
    step_fn, _ = fake_model(vocab, 5)
    seen = set()

    def recording_step(ids, index, state):  # the fake model's state in column 0
        seen.add(state.shape[1])
        logits, new = step_fn(ids, index, state[:, 0])
        return logits, keras.ops.concatenate([new[:, None], state[:, 1:]], axis=1)

    def grow(state, n):
        return keras.ops.pad(state, [[0, 0], [0, n - state.shape[1]]])

    start = np.full(batch, tfblocks.BOS_ID, "int32")
    searches = {
        "greedy": lambda state, **kw: Greedy().search(
            recording_step, state, start, length, 1, 0, **kw
        ),
        "sample": lambda state, **kw: Sampling(seed=3).search(
            recording_step, state, start, length, 1, 0, **kw
        ),
        "beam": lambda state, **kw: BeamSearch(beam_size=2).search(
            recording_step, state, start, length, eos_id=1, **kw
        ),
    }
    for name, search in searches.items():
        seen.clear()
        one_ids, one_scores = search(state=np.zeros((batch, length), "int32"))
        assert seen == {length}, name
        seen.clear()
        ids, scores = search(
            state=np.zeros((batch, 2), "int32"), cache_lengths=(2, 4, 8), grow_state=grow
        )
        assert seen == {2, 4, 8}, name  # every loop was traced with its own cache length
        np.testing.assert_array_equal(ids.numpy(), one_ids.numpy(), err_msg=name)
        np.testing.assert_allclose(scores.numpy(), one_scores.numpy(), rtol=1e-6, err_msg=name)


def test_growing_caches_give_the_same_translations(reverser):
    # Outputs of up to 8 ids cross the cache boundaries 2, 4 and 8. The growing caches,
    # with and without XLA, against one cache of max_length without XLA (compiling is the
    # slow part). Sampling draws its ids with XLA's own random numbers, so compiled
    # sampling is compared with a compiled single cache.
    source = _sources(np.random.default_rng(8), 6)
    grown = {
        jit: Decoder(reverser, max_length=10, jit_compile=jit, cache_lengths=(2, 4, 8))
        for jit in (True, False)
    }
    assert grown[True].cache_lengths == (2, 4, 8, 10)
    single = {
        jit: Decoder(reverser, max_length=10, jit_compile=jit, cache_lengths=None)
        for jit in (True, False)
    }
    traces = _count_model_step_traces(grown[True], single[True], grown[False], single[False])
    for search in (Sampling(), BeamSearch(beam_size=3), Greedy()):  # sampling drops no sentence
        reference = {False: single[False].decode(search, source)}
        reference[True] = (
            single[True].decode(search, source)
            if isinstance(search, Sampling)
            else reference[False]
        )
        for jit in (True, False):
            ids, scores = grown[jit].decode(search, source)
            want_ids, want_scores = reference[jit]
            assert (ids.numpy() == tfblocks.EOS_ID).any(-1).all()  # every output ended
            assert (ids.numpy() > 0).sum(-1).max() > 4  # and some crossed two boundaries
            np.testing.assert_array_equal(ids.numpy(), want_ids.numpy(), err_msg=repr(search))
            np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-6)
    # Under XLA the growing Decoder's three searches (four loops each, one per cache
    # length; beam and greedy rows; the first search one that drops no sentence) traced
    # the model's step once, as did the single cache's sampling; without XLA the step is
    # traced into each loop, so more than once.
    assert traces[:2] == [1, 1] and min(traces[2:]) > 1, traces


def _count_model_step_traces(*decoders):
    """A list that counts, per decoder, the traces of its model step (from now on)."""
    counts = [0] * len(decoders)

    def counting(i, graph):
        def step_graph(*args):
            counts[i] += 1
            return graph(*args)

        return step_graph

    for i, decoder in enumerate(decoders):
        decoder._model_step_graph = counting(i, decoder._model_step_graph)
    return counts


def test_cache_lengths_argument():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    assert Decoder(model, max_length=64).cache_lengths == (16, 32, 64)
    assert Decoder(model, max_length=100).cache_lengths == (16, 32, 64, 100)
    assert Decoder(model, max_length=16).cache_lengths == (16,)
    assert Decoder(model, max_length=40, cache_lengths=[8]).cache_lengths == (8, 40)
    assert Decoder(model, max_length=40, cache_lengths=None).cache_lengths is None
    for bad in ((8, 4), (0, 8), (8, 50), "fast", 8, (8.0,)):
        with pytest.raises(ValueError, match="cache_lengths="):
            Decoder(model, max_length=40, cache_lengths=bad)
    step_fn, _ = fake_model(5, 0)
    start, state = np.array([3]), np.zeros((1, 2), "int32")
    with pytest.raises(ValueError, match="at least max_length=8"):
        Greedy().search(step_fn, state, start, 8, cache_lengths=(2, 4), grow_state=abs)
    with pytest.raises(ValueError, match="grow_state=None"):
        BeamSearch().search(step_fn, state, start, 4, cache_lengths=(2, 4))
    with pytest.raises(ValueError, match="cache_lengths="):
        Sampling().search(step_fn, state, start, 4, cache_lengths=(4, 2), grow_state=abs)


# Dropping finished sentences (`drop_finished`): segments, the batch shrinking between.


def test_beam_search_drops_finished_sentences_between_segments(monkeypatch):
    # The fake model with a per-sentence `context` (an offset mixed into its hash): if
    # shrinking the batch mixed up sentences' states or contexts, results would change.
    # No floor on the batch size here (MIN_ROWS 1), so the batch shrinks down to 1.
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)
    vocab, batch, length, beam = 9, 9, 12, 2
    step_fn, _ = fake_model(vocab, 6)
    rows_seen = set()

    def context_step(ids, index, state, context):
        rows_seen.add(ids.shape[0])
        logits, new = step_fn(ids, index, (state[:, 0] + context) % HASH)
        return logits, keras.ops.concatenate([new[:, None], state[:, 1:]], axis=1)

    def grow(state, n):
        return keras.ops.pad(state, [[0, 0], [0, n - keras.ops.shape(state)[1]]])

    start = np.full(batch, tfblocks.BOS_ID, "int32")
    context = np.arange(batch, dtype="int32") * 101
    beam_search = BeamSearch(beam_size=beam, alpha=0.6)
    kwargs = {"eos_id": 1, "context": context}
    want_ids, want_scores = beam_search.search(
        context_step, np.zeros((batch, length), "int32"), start, length, **kwargs
    )
    ended_at = (want_ids.numpy() > 0).sum(-1)
    assert ended_at.min() < 6 and len(set(ended_at)) > 3  # sentences end at different steps
    for jit_compile, growth in [(False, None), (True, (2, 4, 8, 12))]:
        rows_seen.clear()
        state = np.zeros((batch, length if growth is None else 2), "int32")
        ids, scores = beam_search.search(
            context_step, state, start, length, **kwargs, cache_lengths=growth,
            grow_state=None if growth is None else grow, drop_finished=True,
            jit_compile=jit_compile,
        )  # fmt: skip
        np.testing.assert_array_equal(ids.numpy(), want_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-6)
        if not jit_compile:  # eager segments: the step saw the batch shrink, 9 -> 8 -> …
            assert {batch * beam, 8 * beam}.issubset(rows_seen) and min(rows_seen) < 6 * beam
    # Greedy search over the same fake model: rows leave as they end (with EOS), and the
    # batch ends at the size that holds the rows of the longest output, no padding copies.
    for pad_id in (0, 5):
        state = np.zeros((batch, length), "int32")
        want_ids, want_scores = Greedy().search(
            context_step, state, start, length, eos_id=1, pad_id=pad_id, context=context
        )
        rows_seen.clear()
        ids, scores = Greedy().search(
            context_step, state, start, length, eos_id=1, pad_id=pad_id, context=context,
            drop_finished=True,
        )  # fmt: skip
        np.testing.assert_array_equal(ids.numpy(), want_ids.numpy(), err_msg=str(pad_id))
        np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-6)
        if pad_id == 0:
            eos = want_ids.numpy() == 1
            lengths = np.where(eos.any(-1), eos.argmax(-1) + 1, length)  # steps until EOS
            assert len(set(lengths)) > 3
            last = int((lengths == lengths.max()).sum())  # rows still going at the end
            assert {batch, 8}.issubset(rows_seen)  # 9 -> 8 -> …
            assert min(rows_seen) == int(dropping_module._shrunk_size(last)), (rows_seen, lengths)
        else:  # PAD after EOS, also for rows that left early
            ended = np.cumsum(ids.numpy() == 1, axis=1) - (ids.numpy() == 1) > 0
            assert (ids.numpy()[ended] == pad_id).all() and ended.any()


def test_batch_sizes_of_a_shrinking_search():
    sizes = [int(dropping_module._shrunk_size(n)) for n in range(1, 50)]
    assert sorted(set(sizes)) == [1, 2, 4, 8, 16, 32, 64]  # few sizes: few XLA programs
    assert all(n <= size < 2 * n for n, size in zip(range(1, 50), sizes, strict=True))
    assert [int(dropping_module._shrunk_size(n, floor=8)) for n in (1, 7, 8, 9)] == [8, 8, 8, 16]


@pytest.mark.parametrize("beam", [1, 2, 4])
def test_a_shrinking_batch_stops_at_min_rows(beam, monkeypatch):
    # Sentence b ends (EOS, id 1) at step b + 1, so without a floor the batch would
    # shrink to its last sentence; it stops at MIN_ROWS rows (16: 4 sentences of beam 4,
    # 8 of beam 2, 16 of greedy, i.e. no shrinking of 11 sentences at all).
    batch, length = 11, 14
    rows_seen = set()

    def step(ids, index, state, context):  # context: each row's end step
        rows_seen.add(ids.shape[0])
        ended = (index + 1 >= context)[:, None]
        return keras.ops.where(ended, [[0.0, 9.0, 0.0]], [[0.0, 0.0, 9.0]]), state

    def search(drop_finished):
        rows_seen.clear()
        args = (step, np.zeros((batch, 1), "int32"), np.full(batch, 2, "int32"), length)
        kwargs = {"eos_id": 1, "context": np.arange(1, batch + 1, dtype="int32")}
        if beam == 1:
            ids, _ = Greedy().search(*args, drop_finished=drop_finished, **kwargs)
        else:
            ids, _ = BeamSearch(beam_size=beam).search(*args, drop_finished=drop_finished, **kwargs)
        return ids.numpy()

    want = search(drop_finished=False)
    np.testing.assert_array_equal((want == 1).argmax(1), np.arange(batch))  # EOS at step b + 1
    np.testing.assert_array_equal(search(drop_finished=True), want)
    floor = {1: 16, 2: 8, 4: 4}[beam]  # sentences
    assert min(rows_seen) == min(batch, floor) * beam, sorted(rows_seen)
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)
    np.testing.assert_array_equal(search(drop_finished=True), want)
    assert min(rows_seen) == beam, sorted(rows_seen)  # down to the last sentence


def test_dropping_finished_sentences_gives_the_same_translations(reverser, monkeypatch):
    # Sources of 2–6 ids: outputs end at different steps, so the batch shrinks (beam
    # search and greedy) — with no floor on the batch size: MIN_ROWS = 16 rows is 8
    # sentences of beam 3 and 16 of greedy, more than these 7, and would keep the whole
    # batch to the end. Dropping with and without XLA, and the whole batch to the end
    # with XLA, against the whole batch to the end without XLA.
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)
    source = _sources(np.random.default_rng(9), 7)
    whole, whole_xla = (
        Decoder(reverser, max_length=10, jit_compile=jit, drop_finished=False)
        for jit in (False, True)
    )
    fewest_rows = tf.Variable(10**6)  # the smallest batch a step ran on (XLA included)
    dropping = {}
    for jit in (True, False):
        dropping[jit] = Decoder(reverser, max_length=10, jit_compile=jit)
        assert dropping[jit].drop_finished  # the default
        monkeypatch.setattr(dropping[jit], "step", _recording_rows(dropping[jit], fewest_rows))
    traces = _count_model_step_traces(dropping[True], whole_xla, dropping[False], whole)
    for search in (BeamSearch(beam_size=3), Greedy()):
        want_ids, want_scores = whole.decode(search, source)
        lengths = (want_ids.numpy() > 0).sum(-1)
        assert (want_ids.numpy() == tfblocks.EOS_ID).any(-1).all() and len(set(lengths)) > 2
        ids, scores = whole_xla.decode(search, source)
        np.testing.assert_array_equal(ids.numpy(), want_ids.numpy(), err_msg=repr(search))
        np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-6)
        for jit, decoder in dropping.items():
            one = decoder.decode(search, source[:1])[0]  # the one-loop branch
            none = decoder.decode(search, source[:0])[0]
            assert none.shape == (0, 10)
            fewest_rows.assign(10**6)
            ids, scores = decoder.decode(search, source)
            # 7 sentences shrank as they ended, to 2 or fewer (the last ones end together).
            fewest, rows = int(fewest_rows.numpy()), search.rows_per_sentence
            assert fewest <= 2 * rows, (search, jit, fewest, rows)
            np.testing.assert_array_equal(one.numpy()[0], ids.numpy()[0], err_msg=repr(search))
            np.testing.assert_array_equal(ids.numpy(), want_ids.numpy(), err_msg=repr(search))
            np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-6)
    # Segments of every batch size, the one-sentence loop and the whole-batch search: under
    # XLA one trace of the model's step per Decoder; without, a trace per loop (> 1).
    assert traces[:2] == [1, 1] and min(traces[2:]) > 1, traces


def _recording_rows(decoder, fewest_rows):
    """`decoder.step`, also recording in `fewest_rows` the fewest rows it ran on."""
    step = decoder.step

    def recording_step(ids, *args, **kwargs):
        fewest_rows.assign(tf.minimum(fewest_rows, tf.shape(ids)[0]))
        return step(ids, *args, **kwargs)

    return recording_step


def test_drop_finished_argument():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    assert Decoder(model, max_length=8, drop_finished=False).drop_finished is False
    for bad in (0, 1, "yes", None):
        with pytest.raises(ValueError, match="drop_finished="):
            Decoder(model, max_length=8, drop_finished=bad)
    step_fn, _ = fake_model(5, 0)
    with pytest.raises(ValueError, match="context=None"):
        BeamSearch().search(step_fn, np.zeros(1, "int32"), np.array([3]), 4, drop_finished=True)
    with pytest.raises(ValueError, match="context=None"):
        Greedy().search(step_fn, np.zeros(1, "int32"), np.array([3]), 4, drop_finished=True)
    with pytest.raises(ValueError, match="jit_compile=None"):
        BeamSearch().search(
            step_fn, np.zeros(1, "int32"), np.array([3]), 4, context=(), jit_compile=None
        )
    with pytest.raises(ValueError, match="drop_finished=1"):
        Greedy().search(
            step_fn, np.zeros(1, "int32"), np.array([3]), 4, context=(), drop_finished=1
        )


def test_strategies_are_values_with_checked_options():
    assert BeamSearch(3, 0.6) == BeamSearch(beam_size=3, alpha=0.6) != BeamSearch(3, 0.0)
    assert repr(Sampling(top_k=5)) == "Sampling(temperature=1.0, top_k=5, top_p=1.0, seed=0)"
    assert BeamSearch(4).rows_per_sentence == 4 and Greedy().rows_per_sentence == 1
    # The seed is fed to a compiled search as a tensor: it is not part of the key.
    assert Sampling(seed=1).key() == Sampling(seed=2).key() != Sampling(top_p=0.5).key()
    assert Sampling(seed=1).replace(seed=7).seed == 7
    assert beam_or_greedy(1) == Greedy() and beam_or_greedy(5, 1.0) == BeamSearch(5, 1.0)
    for make, match in (
        (lambda: Sampling(seed=1.5), "seed=1.5"),
        (lambda: Sampling(top_p=1.5), "top_p=1.5"),
        (lambda: BeamSearch(beam_size=True), "beam_size=True"),
        (lambda: beam_or_greedy(0), "beam_size=0"),
    ):
        with pytest.raises(ValueError, match=match):
            make()
    step_fn, _ = fake_model(5, 0)
    with pytest.raises(ValueError, match="Sampling cannot drop finished sentences"):
        Sampling().search(step_fn, np.zeros(1, "int32"), np.array([3]), 4, context=(),
                          drop_finished=True)  # fmt: skip
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    with pytest.raises(ValueError, match="strategy='beam'"):
        Decoder(model, max_length=4).decode("beam", _sources(RNG, 1))


# N-best lists, scoring given targets, and the second stopping rule ---------------------------


def test_n_best_scores_are_the_scores_of_their_hypotheses(reverser):
    # The reverser's hypotheses all end within max_length (finished), so each row's score
    # is its log-probability (Decoder.score, one teacher-forced pass) over t2t's length
    # penalty, and with alpha=0 the log-probability itself.
    source = _sources(np.random.default_rng(11), 6)
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
        own = _penalized(log_probs.sum(-1), ids.reshape(18, 10), alpha).reshape(6, 3)
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
    source = _sources(np.random.default_rng(12), 16)
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


def test_sampling_returns_n_samples_with_their_log_probabilities():
    vocab, batch, length = 9, 3, 6
    step_fn, numpy_logits = fake_model(vocab, 4)
    start = np.full(batch, tfblocks.BOS_ID, "int32")
    state = np.zeros(batch, "int32")
    ids, scores = Sampling(seed=3).search(step_fn, state, start, length, 1, num_hypotheses=4)
    again, _ = Sampling(seed=3).search(step_fn, state, start, length, 1, num_hypotheses=4)
    np.testing.assert_array_equal(ids.numpy(), again.numpy())
    ids, scores = ids.numpy(), scores.numpy()
    assert ids.shape == (3, 4, 6) and (np.diff(scores, axis=1) <= 0).all()  # best first
    assert len({tuple(h) for h in ids.reshape(12, 6)}) > 3  # samples, not one copy
    for row, score in zip(ids.reshape(12, 6), scores.reshape(12), strict=True):
        prefix, total = [], 0.0
        for token in row:  # (the fake model may draw id 0 too: read up to EOS)
            total += _log_softmax(numpy_logits(prefix))[token]
            prefix.append(int(token))
            if token == 1:
                break
        np.testing.assert_allclose(score, total, rtol=1e-5)
    one, _ = Greedy().search(step_fn, state, start, length, 1, num_hypotheses=1)
    plain, _ = Greedy().search(step_fn, state, start, length, 1)
    np.testing.assert_array_equal(one.numpy()[:, 0], plain.numpy())


def test_num_hypotheses_and_score_arguments_are_checked():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    decoder = Decoder(model, max_length=4, jit_compile=False)
    source = _sources(RNG, 2)
    for strategy, n, words in [
        (BeamSearch(beam_size=4), 5, "at most 4, the hypotheses BeamSearch(beam_size=4"),
        (BeamSearch(beam_size=4), 0, "num_hypotheses=0"),
        (Greedy(), 2, "at most 1, the hypotheses Greedy() keeps, got num_hypotheses=2"),
        (Sampling(), True, "num_hypotheses=True"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            decoder.decode(strategy, source, num_hypotheses=n)
    with pytest.raises(ValueError, match="stop_early=1"):
        BeamSearch(stop_early=1)
    with pytest.raises(ValueError, match="as many rows, got 2 and 3"):
        decoder.score(source, np.ones((3, 4), "int32"))
    with pytest.raises(ValueError, match="`target_ids` must hold integer token ids"):
        decoder.score(source, np.ones((2, 4), "float32"))
    assert decoder.score(source[:0], np.ones((0, 4), "int32")).shape == (0, 4)
    lm = tfblocks.build_language_model(
        tfblocks.hparams("transformer_tiny", vocab_size=VOCAB, num_encoder_layers=0)
    )
    with pytest.raises(ValueError, match="`score` needs an encoder–decoder model"):
        Decoder(lm, max_length=4).score(source, source)


# Target prefixes ---------------------------------------------------------------------------


def test_a_target_prefix_is_forced_then_the_search_goes_on(reverser, monkeypatch):
    # Each row's prefix: the first k ids of its reversal (k = 0 forces nothing), or (row 5)
    # an id the reverser would not start with. The search continues each prefix as the
    # model would: the whole reversal. Forced ids add nothing to the score: with alpha=0 a
    # search's score is the log-probability (Decoder.score) of the ids after the prefix.
    # Dropping finished sentences (down to one row: MIN_ROWS=1; the prefix shrinks with
    # the batch) gives the same results (beam search: greedy's dropping is the same code).
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)
    source = _sources(np.random.default_rng(5), 6)
    lengths = np.argmax(source == tfblocks.EOS_ID, axis=1)
    reversal = np.zeros((6, 10), "int32")
    for row, n in enumerate(lengths):
        reversal[row, :n] = source[row, :n][::-1]
        reversal[row, n] = tfblocks.EOS_ID
    forced = [2, 0, 1, 3, 0, 1]
    prefix = np.zeros((6, 3), "int32")
    for row, k in enumerate(forced):
        prefix[row, :k] = reversal[row, :k]
    prefix[5, 0] = 4 if reversal[5, 0] != 4 else 5
    whole = Decoder(reverser, max_length=10, jit_compile=False, drop_finished=False)
    dropping = Decoder(reverser, max_length=10, jit_compile=False)
    for strategy in (Greedy(), BeamSearch(beam_size=3, alpha=0.0)):
        ids, scores = whole.decode(strategy, source, prefix=prefix)
        ids, scores = ids.numpy(), scores.numpy()
        for row, k in enumerate(forced):
            np.testing.assert_array_equal(ids[row, :k], prefix[row, :k], err_msg=repr(strategy))
        # Rows 1 and 4 (no prefix) get the reverser's own answer, the others continue theirs.
        np.testing.assert_array_equal(ids[:5], reversal[:5], err_msg=repr(strategy))
        assert ids[5, 0] == prefix[5, 0] != reversal[5, 0]
        log_probs = whole.score(source, ids).numpy()
        after = np.arange(10)[None, :] >= np.array(forced)[:, None]
        np.testing.assert_allclose(scores, (log_probs * after).sum(-1), atol=1e-4)
    dropped_ids, dropped_scores = dropping.decode(strategy, source, prefix=prefix)
    np.testing.assert_array_equal(dropped_ids.numpy(), ids)
    np.testing.assert_allclose(dropped_scores.numpy(), scores, rtol=1e-5, atol=1e-6)
    # n-best with a prefix: every hypothesis starts with it.
    n_ids, _ = whole.decode(strategy, source, prefix=prefix, num_hypotheses=2)
    for row, k in enumerate(forced):
        assert (n_ids.numpy()[row, :, :k] == prefix[row, :k]).all()
    with pytest.raises(ValueError, match="`prefix` must hold integer token ids"):
        whole.decode(Greedy(), source, prefix=prefix.astype("float32"))


def test_top_k_equals_tf_top_k_ties_included():
    """The chunked top-k of a beam's candidates gives tf.math.top_k's values and indices
    (ties to the lower index), for static rows long enough to be chunked and for rows of
    unknown length (a segment's trace), even shorter than k chunks."""
    rng = np.random.default_rng(3)
    long_row = 4 * 2 * steps_module.TOP_K_CHUNK + 77  # chunked with a static length
    unknown = tf.function(
        lambda x: steps_module.top_k(x, 2),
        input_signature=[tf.TensorSpec([None, None], tf.float32)],
    )
    for n in (5, 300, long_row):
        x = np.round(rng.standard_normal((3, n)) * 2).astype("float32") / 2  # many ties
        x[2] = steps_module.NEG_INF
        x[2, n // 2] = 0.0
        expected = tf.math.top_k(x, 2)
        for values, indices in (steps_module.top_k(tf.constant(x), 2), unknown(x)):
            np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
            np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
