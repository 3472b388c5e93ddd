"""Dropping finished sentences (`drop_finished`): segments, the batch shrinking between."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import (
    HASH,
    VOCAB,
    count_model_step_traces,
    fake_model,
    sources,
    traced_decode,
)
from tfblocks.decoding import BeamSearch, Decoder, Greedy
from tfblocks.decoding import dropping as dropping_module

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


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
    source = sources(np.random.default_rng(9), 7)
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
    traces = count_model_step_traces(dropping[True], whole_xla, dropping[False], whole)
    for search in (BeamSearch(beam_size=3), Greedy()):
        want_ids, want_scores = whole.decode(search, source)
        lengths = (want_ids.numpy() > 0).sum(-1)
        assert (want_ids.numpy() == tfblocks.EOS_ID).any(-1).all() and len(set(lengths)) > 2
        ids, scores = whole_xla.decode(search, source)
        np.testing.assert_array_equal(ids.numpy(), want_ids.numpy(), err_msg=repr(search))
        np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-6)
        for jit, decoder in dropping.items():
            # Without XLA in one function for the three batch sizes (one trace, not
            # three); under XLA eagerly, one program per shape either way.
            eager = functools.partial(decoder.decode, search)
            decode = eager if jit else traced_decode(decoder, search)
            one = decode(source[:1])[0]  # the one-loop branch
            # An empty batch (under XLA: the exported Translator's, tests/serving/
            # test_savedmodel.py; one more program to compile here).
            if not jit:
                assert decode(source[:0])[0].shape == (0, 10)
            fewest_rows.assign(10**6)
            ids, scores = decode(source)
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


@pytest.mark.parametrize("stop_early", [False, True])
def test_a_sentence_result_does_not_depend_on_its_batch_mates(stop_early):
    # Without drop_finished the loop runs until the last sentence is done; the sentences
    # done before keep their n-best lists (and, with stop_early, their best) unchanged,
    # so each sentence's result equals its result alone.
    vocab, batch, length, beam = 9, 6, 12, 3
    step_fn, _ = fake_model(vocab, 11)

    def context_step(ids, index, state, context):
        return step_fn(ids, index, (state + context) % HASH)

    search = BeamSearch(beam_size=beam, alpha=0.6, stop_early=stop_early)
    context = np.arange(batch, dtype="int32") * 37
    start = np.full(batch, tfblocks.BOS_ID, "int32")

    def run(rows):
        return search.search(
            context_step, np.zeros(len(rows), "int32"), start[rows], length, eos_id=1,
            context=context[rows], num_hypotheses=beam,
        )  # fmt: skip

    ids, scores = run(np.arange(batch))
    ended_at = (ids.numpy()[:, 0] > 0).sum(-1)
    assert len(set(ended_at)) > 2  # the sentences end at different steps
    for b in range(batch):
        alone_ids, alone_scores = run(np.array([b]))
        np.testing.assert_array_equal(ids.numpy()[b], alone_ids.numpy()[0], err_msg=str(b))
        np.testing.assert_allclose(scores.numpy()[b], alone_scores.numpy()[0], rtol=1e-6)
