"""What every search shares: checked arguments, growing state, strategies as values."""

import keras
import numpy as np
import pytest

import tfblocks
from tests.decoding.searches import VOCAB, fake_model, sources
from tfblocks.decoding import BeamSearch, Decoder, Greedy, Sampling

RNG = np.random.default_rng(21)


def test_search_arguments_are_checked():
    step_fn, _ = fake_model(5, 0)
    start, state = np.array([3]), np.zeros(1, "int32")
    with pytest.raises(ValueError, match="top_p=0"):
        Sampling(top_p=0).search(step_fn, state, start, 4)
    with pytest.raises(ValueError, match="max_length=0"):
        Greedy().search(step_fn, state, start, 0)
    with pytest.raises(ValueError, match="eos_id=-1"):
        BeamSearch().search(step_fn, state, start, 4, eos_id=-1)


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


def test_strategies_are_values_with_checked_options():
    assert BeamSearch(3, 0.6) == BeamSearch(beam_size=3, alpha=0.6) != BeamSearch(3, 0.0)
    assert repr(Sampling(top_k=5)) == "Sampling(temperature=1.0, top_k=5, top_p=1.0, seed=0)"
    assert BeamSearch(4).rows_per_sentence == 4 and Greedy().rows_per_sentence == 1
    # The seed is fed to a compiled search as a tensor: it is not part of the key.
    assert Sampling(seed=1).key() == Sampling(seed=2).key() != Sampling(top_p=0.5).key()
    assert Sampling(seed=1).replace(seed=7).seed == 7
    for make, match in (
        (lambda: Sampling(seed=1.5), "seed=1.5"),
        (lambda: Sampling(top_p=1.5), "top_p=1.5"),
        (lambda: BeamSearch(beam_size=True), "beam_size=True"),
    ):
        with pytest.raises(ValueError, match=match):
            make()
    step_fn, _ = fake_model(5, 0)
    with pytest.raises(ValueError, match="Sampling cannot drop finished sentences"):
        Sampling().search(step_fn, np.zeros(1, "int32"), np.array([3]), 4, context=(),
                          drop_finished=True)  # fmt: skip
    model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=VOCAB))
    with pytest.raises(ValueError, match="search='beam'"):
        Decoder(model, max_length=4).decode("beam", sources(RNG, 1))
