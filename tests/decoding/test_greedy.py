"""Greedy search over a step function."""

import numpy as np

import tfblocks
from tests.decoding.searches import fake_model, log_softmax
from tfblocks.decoding import Greedy


def test_greedy_search_on_a_fake_model():
    vocab, batch, length = 9, 6, 8
    step_fn, numpy_logits = fake_model(vocab, 3)
    start = np.full(batch, tfblocks.BOS_ID, "int32")
    state = np.zeros(batch, "int32")
    ids, scores = Greedy().search(step_fn, state, start, length, eos_id=1, pad_id=0)
    for row, score in zip(ids.numpy(), scores.numpy(), strict=True):
        prefix, total = [], 0.0
        for _ in range(length):
            log_probs = log_softmax(numpy_logits(prefix))
            token = int(log_probs.argmax())
            prefix.append(token)
            total += log_probs[token]
            if token == 1:
                break
        np.testing.assert_array_equal(row, prefix + [0] * (length - len(prefix)))
        np.testing.assert_allclose(score, total, rtol=1e-5)
    one, _ = Greedy().search(step_fn, state, start, length, 1, num_hypotheses=1)
    np.testing.assert_array_equal(one.numpy()[:, 0], ids.numpy())
