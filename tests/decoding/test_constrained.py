"""Lexically constrained beam search over a fake step function that makes the phrases'
ids so unlikely that a plain beam search never writes them: every finished hypothesis
holds every phrase of its sentence (in any order, or in the order given), scores its own
ids' log-probability, and a sentence without phrases gets BeamSearch's result exactly
(eager and under XLA). The partial-match state (a phrase starting inside another, repeated
ids) is checked on its own, and bad constraints are refused by name."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import fake_model, log_softmax, penalized
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.decoding import BeamSearch, ConstrainedBeamSearch, Decoder
from tfblocks.decoding import dropping as dropping_module
from tfblocks.decoding.base import NEG_INF
from tfblocks.decoding.constrained import suffix_match

EOS, PAD, BOS = tfblocks.EOS_ID, tfblocks.PAD_ID, tfblocks.BOS_ID

# 12 ids: PAD and BOS ruled out (as `Decoder` rules them out), 9, 10 and 11 rare.
VOCAB, LENGTH = 12, 10
RARE = [9, 10, 11]
OFFSET = np.zeros(VOCAB, "float32")
OFFSET[[PAD, BOS]] = NEG_INF
OFFSET[RARE] = -30.0
# Phrases, 0-padded [B, C, T]: two phrases (one of two ids); two that overlap (each
# starts inside the other); repeated ids; none.
CONSTRAINTS = np.array(
    [
        [[9, 10, 0], [11, 0, 0]],
        [[10, 11, 9], [11, 9, 10]],
        [[9, 9, 10], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 0]],
    ],
    "int32",
)


def _fake(seed=5):
    """`(step_fn, numpy_logits, state, start)` of `fake_model` with OFFSET added."""
    step_fn, numpy_logits = fake_model(VOCAB, seed)

    def offset(ids, index, state):
        logits, state = step_fn(ids, index, state)
        return logits + OFFSET, state

    batch = len(CONSTRAINTS)
    return offset, numpy_logits, np.zeros(batch, "int32"), np.full(batch, BOS, "int32")


def _own_score(numpy_logits, ids, alpha):
    """NumPy: the log-probability of `ids` (up to its EOS), over t2t's length penalty when
    it ends with EOS."""
    seq, total = [], 0.0
    for token in ids:
        if token == PAD:
            break
        total += log_softmax(numpy_logits(seq) + OFFSET)[token]
        seq.append(int(token))
        if token == EOS:
            break
    if seq[-1:] == [EOS]:
        total /= ((5.0 + len(seq)) / 6.0) ** alpha
    return total


def _phrases(row):
    """The phrases of a `CONSTRAINTS` row, as lists of ids."""
    return [[int(i) for i in phrase if i != PAD] for phrase in row if phrase[0] != PAD]


def _find(seq, phrase, start=0):
    """The first position at or after `start` where `phrase` occurs in `seq`, else -1."""
    for at in range(start, len(seq) - len(phrase) + 1):
        if seq[at : at + len(phrase)] == phrase:
            return at
    return -1


def _tokens(ids):
    """A result's ids before its EOS, and whether it has one."""
    ids = [int(i) for i in ids]
    return (ids[: ids.index(EOS)], True) if EOS in ids else ([i for i in ids if i != PAD], False)


def _holds(seq, phrases, ordered):
    if not ordered:
        return all(_find(seq, phrase) >= 0 for phrase in phrases)
    start = 0
    for phrase in phrases:
        at = _find(seq, phrase, start)
        if at < 0:
            return False
        start = at + len(phrase)
    return True


@pytest.mark.parametrize(("ordered", "stop_early"), [(False, False), (True, False), (False, True)])
def test_every_finished_hypothesis_holds_every_phrase(ordered, stop_early):
    step_fn, numpy_logits, state, start = _fake()
    plain, _ = BeamSearch(beam_size=4, stop_early=stop_early).search(step_fn, state, start, LENGTH)
    assert not np.isin(plain.numpy(), RARE).any(), plain  # a plain beam never writes them
    search = ConstrainedBeamSearch(beam_size=4, ordered=ordered, stop_early=stop_early)
    ids, scores = search.search(
        step_fn, state, start, LENGTH, num_hypotheses=4, constraints=CONSTRAINTS
    )
    ids, scores = ids.numpy(), scores.numpy()
    for row, (hypotheses, phrases) in enumerate(zip(ids, CONSTRAINTS, strict=True)):
        phrases = _phrases(phrases)
        # The best one finished (the phrases fit in LENGTH - 1 ids) ...
        if phrases:
            assert _tokens(hypotheses[0])[1], (row, hypotheses)
        for hypothesis in hypotheses:
            seq, finished = _tokens(hypothesis)
            # ... and every finished one holds every phrase (in order when ordered).
            if finished:
                assert _holds(seq, phrases, ordered), (row, ordered, seq, phrases)
    own = [[_own_score(numpy_logits, h, alpha=0.6) for h in row] for row in ids]
    assert (scores > -1e8).all(), scores
    np.testing.assert_allclose(scores, own, rtol=1e-5, atol=1e-4)
    # The 1-best is the n-best list's first.
    best_ids, best_scores = search.search(step_fn, state, start, LENGTH, constraints=CONSTRAINTS)
    np.testing.assert_array_equal(best_ids.numpy(), ids[:, 0])
    np.testing.assert_allclose(best_scores.numpy(), scores[:, 0], rtol=1e-6)
    # The sentence without phrases gets BeamSearch's translation (a sentence whose search
    # has ended keeps its hypotheses while the others search, under either rule).
    np.testing.assert_array_equal(best_ids.numpy()[3], plain.numpy()[3])


# Brute force: 6 ids (PAD and BOS ruled out, 5 unlikely), results of at most 5 ids.
SMALL_VOCAB, SMALL_LENGTH = 6, 5
SMALL_OFFSET = np.array([NEG_INF, 0.0, NEG_INF, 0.0, 0.0, -4.0], "float32")
# Per sentence: its phrases (0-padded [C, T]) and the prefix it starts with (0: none).
SMALL_CASES = [
    ([[5, 0], [0, 0]], [0, 0]),
    ([[5, 3], [0, 0]], [0, 0]),
    ([[5, 5], [0, 0]], [0, 0]),  # a repeated id
    ([[4, 5], [5, 4]], [0, 0]),  # each starts inside the other: "4 5 4" or "5 4 5"
    ([[3, 0], [5, 0]], [0, 0]),
    ([[5, 0], [3, 0]], [0, 0]),  # the same phrases the other way round (ordered differs)
    ([[5, 0], [0, 0]], [3, 4]),  # a prefix, then the phrase
    ([[4, 5], [0, 0]], [3, 4]),  # a phrase that starts inside the prefix
]


def _brute_force(numpy_logits, phrases, prefix, alpha, ordered):
    """`(ids, score)` of the best finished result of at most SMALL_LENGTH ids that starts
    with `prefix` and holds `phrases` (lists of ids), over every such sequence."""
    best = (None, -np.inf)
    for body in itertools.chain.from_iterable(
        itertools.product([3, 4, 5], repeat=n) for n in range(SMALL_LENGTH)
    ):
        seq = [*body, EOS]
        if seq[: len(prefix)] != prefix or not _holds(list(body), phrases, ordered):
            continue
        total = sum(
            log_softmax(numpy_logits(seq[:t]) + SMALL_OFFSET)[token] for t, token in enumerate(seq)
        )
        score = total / ((5.0 + len(seq)) / 6.0) ** alpha
        if score > best[1]:
            best = (seq, score)
    return best


@pytest.mark.parametrize(("seed", "alpha", "ordered"), [(0, 0.6, False), (1, 0.0, True)])
def test_the_result_is_the_best_sequence_that_holds_the_phrases(seed, alpha, ordered):
    # With 3^4 = 81 beams every live sequence is kept: the search is exhaustive, so its
    # result must be the brute force's best (phrases the search found anywhere, scored
    # with the length penalty), and it differs from the plain beam search's.
    step_fn, numpy_logits = fake_model(SMALL_VOCAB, seed)

    def offset(ids, index, state):
        logits, state = step_fn(ids, index, state)
        return logits + SMALL_OFFSET, state

    constraints = np.array([case[0] for case in SMALL_CASES], "int32")
    prefix = np.array([case[1] for case in SMALL_CASES], "int32")
    batch = len(SMALL_CASES)
    state, start = np.zeros(batch, "int32"), np.full(batch, BOS, "int32")
    search = ConstrainedBeamSearch(beam_size=81, alpha=alpha, ordered=ordered)
    ids, scores = search.search(
        offset, state, start, SMALL_LENGTH, constraints=constraints, prefix=prefix
    )
    plain, _ = BeamSearch(beam_size=81, alpha=alpha).search(offset, state, start, SMALL_LENGTH)
    differs = 0
    for row, (phrases, forced) in enumerate(SMALL_CASES):
        forced = [int(i) for i in forced if i != PAD]
        want_ids, want_score = _brute_force(numpy_logits, _phrases(phrases), forced, alpha, ordered)
        got = [int(i) for i in ids.numpy()[row] if i != PAD]
        assert got == want_ids, (row, got, want_ids)
        np.testing.assert_allclose(scores.numpy()[row], want_score, rtol=1e-5)
        differs += got != [int(i) for i in plain.numpy()[row] if i != PAD]
    assert differs >= batch // 2, (ids, plain)


@pytest.mark.parametrize("constraints", [None, np.zeros([4, 2, 3], "int32")])
def test_without_phrases_it_is_beam_search_exactly(constraints):
    step_fn, _, state, start = _fake(seed=7)
    for stop_early in (False, True):
        options = {"beam_size": 3, "alpha": 0.6, "stop_early": stop_early}
        want = BeamSearch(**options).search(step_fn, state, start, LENGTH, num_hypotheses=3)
        got = ConstrainedBeamSearch(**options).search(
            step_fn, state, start, LENGTH, num_hypotheses=3, constraints=constraints
        )
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_a_compiled_search_finds_what_the_eager_one_finds():
    step_fn, _, state, start = _fake()
    search = ConstrainedBeamSearch(beam_size=3)

    def run(constraints):
        return search.search(
            step_fn, state, start, LENGTH, num_hypotheses=3, constraints=constraints
        )

    compiled = tf.function(run, jit_compile=True, autograph=False)
    ids, scores = compiled(tf.constant(CONSTRAINTS))
    want_ids, want_scores = run(CONSTRAINTS)
    np.testing.assert_array_equal(ids.numpy(), want_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-5)


def test_the_partial_match_is_the_longest_suffix_that_begins_a_phrase():
    # Phrases: "9 10 11", "11 9 10" (starts inside the first), "9 9 9 10" (repeats).
    phrases = tf.constant([[[9, 10, 11, -1], [11, 9, 10, -1], [9, 9, 9, 10]]])
    since = tf.zeros([1, 4], tf.int32)
    seqs = tf.constant(
        [
            [
                [9, 10, 11, 9, 0, 0],  # ends "11 9": 2 of the second, 1 of the others
                [9, 9, 9, 9, 0, 0],  # ends "9 9 9": 3 of the third (not 4: no 10 yet)
                [9, 9, 9, 10, 0, 0],  # the third whole, "9 10" of the first
                [5, 11, 9, 10, 0, 0],  # the second whole
            ]
        ]
    )
    matched = suffix_match(seqs, 3, since, phrases).numpy()[0].tolist()
    assert matched == [[1, 2, 1], [1, 0, 3], [2, 0, 4], [2, 3, 0]]
    # With `since` (ordered phrases) nothing before it counts.
    matched = suffix_match(seqs, 3, tf.fill([1, 4], 3), phrases).numpy()[0].tolist()
    assert matched == [[1, 0, 1], [1, 0, 1], [0, 0, 0], [0, 0, 0]]


def test_bad_constraints_are_refused():
    step_fn, _, state, start = _fake()
    search = ConstrainedBeamSearch(beam_size=2)
    too_long = np.zeros([4, 1, 4], "int32")
    too_long[2, 0] = [11, 9, 10, 9]  # with EOS, 5 ids: more than max_length=4
    with pytest.raises(ValueError, match=r"phrase 0 of sentence 2 \(\[11, 9, 10, 9\]\) has 4 ids"):
        search.search(step_fn, state, start, 4, constraints=too_long)
    with_eos = CONSTRAINTS.copy()
    with_eos[0, 1, 1] = EOS
    with pytest.raises(ValueError, match=r"phrase 1 of sentence 0 \(\[11, 1\]\).*eos_id=1"):
        search.search(step_fn, state, start, LENGTH, constraints=with_eos)
    gap = CONSTRAINTS.copy()
    gap[0, 1] = [0, 11, 0]
    with pytest.raises(ValueError, match=r"phrase 1 of sentence 0 \(\[\]\) has ids after"):
        search.search(step_fn, state, start, LENGTH, constraints=gap)
    with pytest.raises(ValueError, match=r"`constraints` must hold integer token ids.*\(4, 6\)"):
        search.search(step_fn, state, start, LENGTH, constraints=CONSTRAINTS.reshape(4, 6))
    with pytest.raises(ValueError, match=r"`constraints` must hold a row per start id \(4\)"):
        search.search(step_fn, state, start, LENGTH, constraints=CONSTRAINTS[:2])
    with pytest.raises(ValueError, match=r"`ordered` must be True or False, got ordered=1"):
        ConstrainedBeamSearch(ordered=1)


# Through Decoder: a tiny untrained model of 20 ids, 12 tokens at most.
MODEL_VOCAB, MAX_LENGTH = 20, 12
SOURCE = np.array([[5, 9, 13, 1, 0], [7, 1, 0, 0, 0], [19, 4, 8, 12, 1], [6, 6, 1, 0, 0]], "int32")
TARGET_PHRASES = np.array(
    [
        [[17, 5, 0], [11, 0, 0]],
        [[0, 0, 0], [0, 0, 0]],
        [[8, 8, 8], [0, 0, 0]],
        [[12, 14, 0], [14, 12, 0]],
    ],
    "int32",
)


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_hparams(vocab_size=MODEL_VOCAB), seed=0)


def test_decoder_takes_constraints_with_and_without_dropping(model, eagerly, monkeypatch):
    monkeypatch.setattr(dropping_module, "MIN_ROWS", 1)  # the batch shrinks as sentences end
    search = ConstrainedBeamSearch(beam_size=3)
    results = []
    for drop_finished in (False, True):
        decoder = Decoder(model, MAX_LENGTH, jit_compile=False, drop_finished=drop_finished)
        out = decoder.decode(search, SOURCE, constraints=TARGET_PHRASES)
        ids, scores = (x.numpy() for x in out)
        for row, phrases in zip(ids, TARGET_PHRASES, strict=True):
            seq, finished = _tokens(row)
            if _phrases(phrases):
                assert finished and _holds(seq, _phrases(phrases), False), (seq, phrases)
        # Each result scores its ids' log-probability (Decoder.score), over the length
        # penalty when it finished.
        log_probs = decoder.score(SOURCE, ids).numpy().sum(-1)
        finished = (ids == EOS).any(-1)
        own = np.where(finished, penalized(log_probs, ids, 0.6), log_probs)
        np.testing.assert_allclose(scores, own, rtol=1e-5, atol=1e-4)
        results.append((ids, scores))
    # Sentences leaving the batch take their phrases along: the same translations.
    (whole_ids, whole_scores), (dropped_ids, dropped_scores) = results
    np.testing.assert_array_equal(dropped_ids, whole_ids)
    np.testing.assert_allclose(dropped_scores, whole_scores, rtol=1e-5, atol=1e-5)


def test_decoder_refuses_constraints_it_cannot_search_with(model):
    decoder = Decoder(model, MAX_LENGTH, jit_compile=False)
    with pytest.raises(ValueError, match=r"need a tfblocks\.decoding\.ConstrainedBeamSearch, got "):
        decoder.decode(BeamSearch(beam_size=3), SOURCE, constraints=TARGET_PHRASES)
    out_of_vocabulary = TARGET_PHRASES.copy()
    out_of_vocabulary[2, 1, 0] = 25
    with pytest.raises(ValueError, match=r"ids in \[0, 20\).*constraints\[2, 1, 0\]=25"):
        decoder.decode(ConstrainedBeamSearch(3), SOURCE, constraints=out_of_vocabulary)
    too_long = np.zeros([4, 1, MAX_LENGTH], "int32")
    too_long[1, 0] = 7  # 12 ids: with EOS, more than max_length=12
    with pytest.raises(ValueError, match=r"phrase 0 of sentence 1 \(\[7, 7, .*\) has 12 ids"):
        decoder.decode(ConstrainedBeamSearch(3), SOURCE, constraints=too_long)
