"""Decoder: cached equals uncached, ids and options checked, growing caches, extra_length,
batch independence, target prefixes."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import (
    VOCAB,
    count_model_step_traces,
    fake_model,
    sources,
    traced_decode,
)
from tfblocks.decoding import BeamSearch, Decoder, Greedy, Sampling
from tfblocks.decoding import dropping as dropping_module

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

RNG = np.random.default_rng(21)


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
    source = sources(RNG, 4)
    ids, scores = Decoder(model, max_length=9, jit_compile=jit_compile).decode(Greedy(), source)
    np.testing.assert_array_equal(ids.numpy(), uncached_greedy(model, source, 9))
    assert np.all(np.isfinite(scores.numpy())) and np.all(scores.numpy() < 0)


def test_bad_arguments():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    with pytest.raises(ValueError, match="max_length=0"):
        Decoder(model, max_length=0)
    decoder = Decoder(model, max_length=4)
    with pytest.raises(ValueError, match="beam_size=0"):
        decoder.decode(BeamSearch(beam_size=0), sources(RNG, 1))
    with pytest.raises(ValueError, match="temperature=0"):
        decoder.decode(Sampling(temperature=0), sources(RNG, 1))
    with pytest.raises(ValueError, match="top_k=-1"):
        decoder.decode(Sampling(top_k=-1), sources(RNG, 1))
    with pytest.raises(ValueError, match="alpha=-1"):
        decoder.decode(BeamSearch(alpha=-1), sources(RNG, 1))


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
        decoder.decode(Sampling(top_k=17), sources(RNG, 1))


def test_mixed_precision_decoding_is_finite():
    keras.config.set_dtype_policy("mixed_bfloat16")
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=VOCAB, num_encoder_layers=1, num_decoder_layers=1
    )  # one block a side traces half the graph: the dtypes are the same in every block
    model = tfblocks.build_transformer(hp)
    ids, scores = Decoder(model, max_length=6, jit_compile=False).decode(
        BeamSearch(beam_size=3), sources(RNG, 2)
    )
    assert ids.shape == (2, 6) and np.all(np.isfinite(scores.numpy()))


def test_translation_does_not_depend_on_batch_mates(reverser):
    source = sources(np.random.default_rng(7), 6)
    decoder = Decoder(reverser, max_length=10, jit_compile=False)
    # One trace per search for the batches of every size and width below.
    beam = traced_decode(decoder, BeamSearch(beam_size=3))
    greedy = traced_decode(decoder, Greedy())
    beam_together, greedy_together = beam(source)[0].numpy(), greedy(source)[0].numpy()
    # Alone in the batch (same padded width), and alone without any padding.
    alone_rows = [source[row : row + 1] for row in range(3)]
    alone_rows.append(source[:1, : int(np.argmax(source[0] == tfblocks.EOS_ID)) + 1])
    for row, alone in zip([0, 1, 2, 0], alone_rows, strict=True):
        np.testing.assert_array_equal(beam(alone)[0].numpy()[0], beam_together[row])
        np.testing.assert_array_equal(greedy(alone)[0].numpy()[0], greedy_together[row])


def test_extra_length_bounds_the_decode_length(reverser):
    # The bound with and without XLA against one full-length search without XLA
    # (compiling is the slow part; under XLA the bound is a tensor of static value).
    source = sources(np.random.default_rng(5), 3)  # [3, 8]
    decoders = {jit: Decoder(reverser, max_length=30, jit_compile=jit) for jit in (True, False)}
    for search in (Greedy(), BeamSearch(beam_size=2)):
        full, _ = decoders[False].decode(search, source)
        assert full.shape == (3, 30) and not full.numpy()[:, 10:].any()
        for jit, decoder in decoders.items():
            short, _ = decoder.decode(search, source, extra_length=2)  # min(30, 8 + 2)
            assert short.shape == (3, 10), (search, jit)
            # The reverser's outputs (at most 7 ids + EOS) fit in 10: the same ids.
            np.testing.assert_array_equal(short.numpy(), full.numpy()[:, :10], err_msg=repr(search))
    for decoder in decoders.values():
        with pytest.raises(ValueError, match="extra_length=-1"):
            decoder.decode(Greedy(), source, extra_length=-1)


def test_growing_caches_give_the_same_translations(reverser):
    # Outputs of up to 8 ids cross the cache boundaries 2 and 4: the caches grow twice,
    # the second time to the max_length that the Decoder appends. The growing caches,
    # with and without XLA, against one cache of max_length without XLA (compiling is the
    # slow part). Sampling draws its ids with XLA's own random numbers, so compiled
    # sampling is compared with a compiled single cache.
    source = sources(np.random.default_rng(8), 6)
    grown = {
        jit: Decoder(reverser, max_length=10, jit_compile=jit, cache_lengths=(2, 4))
        for jit in (True, False)
    }
    assert grown[True].cache_lengths == (2, 4, 10)
    single = {
        jit: Decoder(reverser, max_length=10, jit_compile=jit, cache_lengths=None)
        for jit in (True, False)
    }
    traces = count_model_step_traces(grown[True], single[True], grown[False], single[False])
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
    # Under XLA the growing Decoder's three searches (three loops each, one per cache
    # length; beam and greedy rows; the first search one that drops no sentence) traced
    # the model's step once, as did the single cache's sampling; without XLA the step is
    # traced into each loop, so more than once.
    assert traces[:2] == [1, 1] and min(traces[2:]) > 1, traces


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


def test_num_hypotheses_and_score_arguments_are_checked():
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    decoder = Decoder(model, max_length=4, jit_compile=False)
    source = sources(RNG, 2)
    for search, n, words in [
        (BeamSearch(beam_size=4), 5, "at most 4, the hypotheses BeamSearch(beam_size=4"),
        (BeamSearch(beam_size=4), 0, "num_hypotheses=0"),
        (Greedy(), 2, "at most 1, the hypotheses Greedy() keeps, got num_hypotheses=2"),
        (Sampling(), True, "num_hypotheses=True"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            decoder.decode(search, source, num_hypotheses=n)
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


def test_a_target_prefix_is_forced_then_the_search_goes_on(reverser, monkeypatch):
    # Each row's prefix: the first k ids of its reversal (k = 0 forces nothing), or (row 5)
    # an id the reverser would not start with. The search continues each prefix as the
    # model would: the whole reversal. Forced ids count in the score: with alpha=0 a
    # search's score is the log-probability (Decoder.score) of all its ids.
    # Dropping finished sentences (down to one row: MIN_ROWS=1; the prefix shrinks with
    # the batch) gives the same results (beam search: greedy's dropping is the same code).
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)
    source = sources(np.random.default_rng(5), 6)
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
    for search in (Greedy(), BeamSearch(beam_size=3, alpha=0.0)):
        ids, scores = whole.decode(search, source, prefix=prefix)
        ids, scores = ids.numpy(), scores.numpy()
        for row, k in enumerate(forced):
            np.testing.assert_array_equal(ids[row, :k], prefix[row, :k], err_msg=repr(search))
        # Rows 1 and 4 (no prefix) get the reverser's own answer, the others continue theirs.
        np.testing.assert_array_equal(ids[:5], reversal[:5], err_msg=repr(search))
        assert ids[5, 0] == prefix[5, 0] != reversal[5, 0]
        log_probs = whole.score(source, ids).numpy()
        np.testing.assert_allclose(scores, log_probs.sum(-1), atol=1e-4)
    dropped_ids, dropped_scores = dropping.decode(search, source, prefix=prefix)
    np.testing.assert_array_equal(dropped_ids.numpy(), ids)
    np.testing.assert_allclose(dropped_scores.numpy(), scores, rtol=1e-5, atol=1e-6)
    # n-best with a prefix: every hypothesis starts with it.
    n_ids, _ = whole.decode(search, source, prefix=prefix, num_hypotheses=2)
    for row, k in enumerate(forced):
        assert (n_ids.numpy()[row, :, :k] == prefix[row, :k]).all()
    with pytest.raises(ValueError, match="`prefix` must hold integer token ids"):
        whole.decode(Greedy(), source, prefix=prefix.astype("float32"))
