"""Sampling: seeded, top-k, top-p, n samples with their log-probabilities."""

import keras
import numpy as np

import tfblocks
from tests.decoding.searches import VOCAB, fake_model, log_softmax, sources
from tfblocks.decoding import Decoder, Greedy, Sampling
from tfblocks.decoding import sampling as sampling_module
from tfblocks.decoding.base import NEG_INF

RNG = np.random.default_rng(21)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    keras.utils.set_random_seed(5)
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    source = sources(RNG, 3)
    decoder = Decoder(model, max_length=8, jit_compile=False)
    a, _ = decoder.decode(Sampling(temperature=2.0, seed=1), source)
    b, _ = decoder.decode(Sampling(temperature=2.0, seed=1), source)
    c, _ = decoder.decode(Sampling(temperature=2.0, seed=2), source)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    one, _ = decoder.decode(Sampling(top_k=1, seed=9), source)
    np.testing.assert_array_equal(one.numpy(), decoder.decode(Greedy(), source)[0].numpy())
    assert not np.isin(a.numpy(), [tfblocks.BOS_ID]).any()


def test_sampling_searches_on_a_fake_model():
    vocab, batch, length = 9, 6, 8
    step_fn, _ = fake_model(vocab, 3)
    start = np.full(batch, tfblocks.BOS_ID, "int32")
    state = np.zeros(batch, "int32")
    ids, _ = Greedy().search(step_fn, state, start, length, eos_id=1, pad_id=0)
    # Nucleus sampling with a tiny top_p keeps only the best token: greedy.
    nucleus, _ = Sampling(top_p=1e-6, seed=4).search(step_fn, state, start, length, 1, 0)
    np.testing.assert_array_equal(nucleus.numpy(), ids.numpy())
    a, _ = Sampling(top_p=0.9, seed=4).search(step_fn, state, start, length, 1, 0)
    b, _ = Sampling(top_p=0.9, seed=4).search(step_fn, state, start, length, 1, 0)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32"))
    kept = sampling_module._filter_top_p(keras.ops.convert_to_tensor(logits), 0.7).numpy()
    assert np.isfinite(kept[0, :2]).all() and (kept[0, 2:] <= NEG_INF).all()
    kept = sampling_module._filter_top_p(keras.ops.convert_to_tensor(logits), 0.85).numpy()
    assert (kept[0, :3] > NEG_INF).all() and kept[0, 3] <= NEG_INF


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
            total += log_softmax(numpy_logits(prefix))[token]
            prefix.append(int(token))
            if token == 1:
                break
        np.testing.assert_allclose(score, total, rtol=1e-5)
