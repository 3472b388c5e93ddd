"""t2t beam search (`BeamSearch`), its loop body (`_Beam`) and its length penalty.

`BeamSearch` follows t2t `beam_search.py`: each step keeps the 2·beam best extensions,
the `beam` best non-EOS ones stay alive, EOS-ended ones compete for `beam` finished slots
with score `log p / ((5 + length) / 6) ** alpha`; when no hypothesis finished, the best
live one is returned with its raw log-probability (as t2t does). Departure: t2t stops
when the *worst* finished score beats the best a live beam can reach; here the search
stops when the *best* finished score does, which cannot change the returned (top)
hypothesis and saves steps (for N hypotheses, once N have finished too).
`BeamSearch(stop_early=True)` replaces that test by fairseq's and CTranslate2's rule: a
sentence's search ends as soon as `beam_size` hypotheses have finished. A sentence whose
search has ended keeps its hypotheses while the loop goes on for others (`keep_done`), so
its result does not depend on its batch mates.

A candidate whose log-probability is at or below `DEAD` (it took a token the step ruled
out, or extends a beam that did: the K − 1 empty beams of the first step, the other
tokens of a forced prefix) is dead: it never finishes, and kept alive (when fewer than K
live candidates exist) it stays dead and is never returned. While a sentence's prefix is
forced its forced path is its one live hypothesis; the beam widens after the prefix.
"""

from typing import NamedTuple

import tensorflow as tf

from tfblocks import _checks
from tfblocks.decoding.base import (
    DEAD,
    NEG_INF,
    Pieces,
    Search,
    dim,
    forced_tokens,
    has_prefix,
    write,
)


def length_penalty(length, alpha):
    """t2t's length penalty `((5 + length) / 6) ** alpha`."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


# `top_k` over rows longer than this many chunks' worth reads chunk maxima first.
TOP_K_CHUNK = 128


def top_k(x, k):
    """`tf.math.top_k(x, k)` of float32 `x` `[B, n]`: the same values and indices (ties to
    the lower index), faster for long rows (a beam's `K·V` candidates).

    XLA's CPU TopK walks every element through a heap; here the row is cut into chunks of
    `TOP_K_CHUNK` (padded with -inf to at least k chunks), the k chunks with the largest
    maxima (ties to the lower chunk) are taken in index order, and the top k of their
    elements are the row's: an element outside them has k chunk maxima ranked before it.
    """
    n, m = dim(x, 1), TOP_K_CHUNK
    if not tf.is_tensor(n) and n <= 4 * k * m:
        return tf.math.top_k(x, k)
    chunks = tf.maximum((n + m - 1) // m, k)  # a segment's traced n may be small
    padded = tf.pad(x, [[0, 0], [0, chunks * m - n]], constant_values=float("-inf"))
    padded = tf.reshape(padded, [dim(x, 0), chunks, m])  # [B, C, m]
    _, best = tf.math.top_k(tf.reduce_max(padded, axis=-1), k)  # [B, k] chunks
    best = tf.sort(best, axis=-1)  # index order: ties still go to the lower index
    candidates = tf.reshape(tf.gather(padded, best, batch_dims=1), [dim(x, 0), k * m])
    values, where = tf.math.top_k(candidates, k)  # [B, k]
    index = tf.reshape(best[:, :, None] * m + tf.range(m)[None, None], [dim(x, 0), k * m])
    return values, tf.gather(index, where, batch_dims=1)


def _force(log_probs, index, prefix, pad_id):
    """`log_probs` `[B, K, V]` of position `index` with every token but the forced one at
    `NEG_INF` in the sentences whose `prefix` `[B, P]` reaches `index` (`forced_tokens`):
    the forced one keeps its log-probability."""
    if not has_prefix(prefix):  # none: nothing to force
        return log_probs
    forcing, token = forced_tokens(prefix, index, pad_id)  # [B], [B]
    vocab = tf.range(tf.shape(log_probs)[-1])  # [V]
    other = tf.not_equal(vocab[None, None, :], token[:, None, None])  # [B, 1, V]
    return tf.where(tf.logical_and(forcing[:, None, None], other), NEG_INF, log_probs)


class BeamState(NamedTuple):
    """Loop state of `BeamSearch` (B sentences × K beams)."""

    index: tf.Tensor  # scalar
    last: tf.Tensor  # [B·K, 1]
    state: object  # the step function's nest, B·K rows
    alive_seq: tf.Tensor  # [B, K, L]
    alive_log_probs: tf.Tensor  # [B, K]
    finished_seq: tf.Tensor  # [B, K, L]
    finished_scores: tf.Tensor  # [B, K], length-penalized
    finished_flags: tf.Tensor  # [B, K]
    prefix: tf.Tensor  # [B, P]: the ids forced first (padded with pad_id); () for none


class _Beam(Pieces):
    """t2t beam search's pieces over `B` sentences × `K` beams (B read from the loop).

    `stop_early`: a sentence is done once K hypotheses have finished (fairseq's and
    CTranslate2's rule) instead of t2t's bound test (see `done`).
    """

    def __init__(
        self, step_fn, beam, alpha, eos_id, pad_id, length, hypotheses=None, stop_early=False
    ):
        super().__init__(step_fn, eos_id, pad_id, length, hypotheses)
        self.beam = beam
        self.alpha = alpha
        self.stop_early = stop_early

    @property
    def rows_per_sentence(self):
        return self.beam

    def initial(self, start_ids, state, prefix):
        beam, batch = self.beam, dim(start_ids, 0)
        first = tf.concat([[0.0], tf.fill([beam - 1], NEG_INF)], axis=0)  # only beam 0 is live
        return BeamState(
            index=tf.constant(0),
            last=tf.repeat(start_ids, beam)[:, None],
            state=self.repeat(state),
            alive_seq=tf.zeros([batch, beam, self.length], tf.int32),
            alive_log_probs=tf.tile(first[None], [batch, 1]),
            finished_seq=tf.zeros([batch, beam, self.length], tf.int32),
            finished_scores=tf.fill([batch, beam], NEG_INF),
            finished_flags=tf.zeros([batch, beam], tf.bool),
            prefix=prefix,
        )

    def size(self, loop):
        """B, the sentences in `loop`."""
        return dim(loop.alive_seq, 0)

    def repeat(self, nest):
        """Each `B`-row leaf repeated `K` times along axis 0 (sentence-major)."""
        return tf.nest.map_structure(lambda x: tf.repeat(x, self.beam, axis=0), nest)

    def done(self, loop):
        """`[B]`: the sentence's best finished score beats what any live beam can reach,
        and N hypotheses have finished (N = `hypotheses`, 1 by default); with
        `stop_early`, all K finished slots are filled (K hypotheses have finished).

        t2t bounds a live beam by its log-probability over the length penalty of
        `max_length` and stops when the *worst* finished score beats every bound;
        comparing the *best* cannot change the returned (top) hypothesis. Waiting for
        the N-th best to beat the bound too would make all N final but lengthens most
        searches; waiting for N finished ones costs little and keeps unfinished
        hypotheses out of an n-best list.
        """
        flags = loop.finished_flags  # [B, K]: the finished slots are sorted, filled first
        if self.stop_early:
            return tf.reduce_all(flags, axis=1)
        n = self.hypotheses or 1
        best_alive = loop.alive_log_probs[:, 0] / length_penalty(self.length, self.alpha)
        final = tf.logical_and(flags[:, 0], loop.finished_scores[:, 0] >= best_alive)
        return tf.logical_and(final, flags[:, n - 1])

    def keep_done(self, loop, new):
        """`new` (the loop state after a step) with every sentence that was done in
        `loop` unchanged: a sentence's hypotheses and scores do not depend on how long
        its batch mates keep the loop going, as when `drop_finished` takes it out (else
        its n-best list, and with `stop_early` its best, could still change)."""
        done = self.done(loop)  # [B]

        def keep(old, value):
            where = tf.reshape(done, [-1] + [1] * (value.shape.rank - 1))
            return tf.where(where, old, value)

        by_sentence = [f for f in new._fields if f not in ("index", "last", "state", "prefix")]
        return new._replace(**{f: keep(getattr(loop, f), getattr(new, f)) for f in by_sentence})

    def regroup(self, loop, x):
        """`x` `[B·K, ...]` as `[B, K, ...]` (B: the sentences in `loop`)."""
        shape = [self.size(loop), self.beam, *(dim(x, a) for a in range(1, x.shape.rank))]
        return tf.reshape(x, shape)

    def flatten(self, loop, x):
        """`x` `[B, K, ...]` as `[B·K, ...]`."""
        shape = [self.size(loop) * self.beam, *(dim(x, a) for a in range(2, x.shape.rank))]
        return tf.reshape(x, shape)

    def step_log_probs(self, loop, context):
        """`(log_probs [B, K, V], new state)`: the step function's log-probabilities of
        the next token (the prefix's forced where it lasts) and its new state."""
        logits, new_state = self.logits(loop, context)  # [B·K, V]
        log_probs = self.regroup(loop, tf.nn.log_softmax(logits))
        return _force(log_probs, loop.index, loop.prefix, self.pad_id), new_state

    def reorder(self, loop, state, parents):
        """The rows `parents` `[B, K]` (beams of each sentence) of `state`'s nest."""
        return tf.nest.map_structure(
            lambda x: self.flatten(loop, tf.gather(self.regroup(loop, x), parents, batch_dims=1)),
            state,
        )

    def finish(self, loop, seqs, scores, is_eos):
        """`(finished_seq, finished_scores, finished_flags)`: the K best of the finished
        hypotheses and of the candidates `seqs` `[B, M, L]` that ended (`is_eos` `[B, M]`,
        length-penalized `scores`)."""
        all_seq = tf.concat([loop.finished_seq, seqs], axis=1)  # [B, K + M, L]
        all_scores = tf.concat([loop.finished_scores, tf.where(is_eos, scores, NEG_INF)], axis=1)
        all_flags = tf.concat([loop.finished_flags, is_eos], axis=1)
        finished_scores, best = tf.math.top_k(all_scores, k=self.beam)  # [B, K]
        return (
            tf.gather(all_seq, best, batch_dims=1),
            finished_scores,
            tf.gather(all_flags, best, batch_dims=1),
        )

    def step(self, loop, context):
        """One step: every beam extended by one token (its prefix's, while that lasts)."""
        beam, i = self.beam, loop.index
        batch = dim(loop.alive_seq, 0)
        step_log_probs, new_state = self.step_log_probs(loop, context)  # [B, K, V]
        vocab = tf.shape(step_log_probs)[-1]
        log_probs = step_log_probs + loop.alive_log_probs[:, :, None]  # [B, K, V]
        penalty = length_penalty(i + 1, self.alpha)
        flat_scores = tf.reshape(log_probs / penalty, [batch, -1])  # [B, K·V]
        top_scores, top_index = top_k(flat_scores, 2 * beam)  # [B, 2K]
        top_log_probs = top_scores * penalty  # [B, 2K]
        origin, token = top_index // vocab, top_index % vocab  # [B, 2K]
        top_seq = write(tf.gather(loop.alive_seq, origin, batch_dims=1), i, token)  # [B, 2K, L]
        # Only a live candidate finishes, judged by its log-probability: a dead one's
        # length-penalized score rises above DEAD once the penalty exceeds 2.
        is_eos = tf.logical_and(tf.equal(token, self.eos_id), top_log_probs > DEAD)

        # The K best extensions that did not end stay alive (there are always K): one
        # that ended fills a slot only where fewer than K others can, and dead (as t2t's).
        _, keep = tf.math.top_k(tf.where(is_eos, NEG_INF, top_scores), k=beam)  # [B, K]
        alive_log_probs = tf.where(is_eos, NEG_INF, top_log_probs)  # [B, 2K]
        parents = tf.gather(origin, keep, batch_dims=1)  # [B, K]
        # EOS-ended extensions compete with the finished ones for K slots.
        finished_seq, finished_scores, finished_flags = self.finish(
            loop, top_seq, top_scores, is_eos
        )
        new = BeamState(
            index=i + 1,
            last=self.flatten(loop, tf.gather(token, keep, batch_dims=1))[:, None],  # [B·K, 1]
            state=self.reorder(loop, new_state, parents),
            alive_seq=tf.gather(top_seq, keep, batch_dims=1),
            alive_log_probs=tf.gather(alive_log_probs, keep, batch_dims=1),
            finished_seq=finished_seq,
            finished_scores=finished_scores,
            finished_flags=finished_flags,
            prefix=loop.prefix,
        )
        return self.keep_done(loop, new)

    def result(self, loop):
        """`(ids [B, L], scores [B])` of every sentence of `loop`, or with `hypotheses=N`
        `(ids [B, N, L], scores [B, N])`: the finished hypotheses by length-penalized
        score, then, where fewer than N finished, the best live ones with their raw
        log-probabilities (see `BeamSearch`); where fewer than N hypotheses are live
        or finished, the missing ones are empty (PAD) and score `-inf`."""
        n = self.hypotheses or 1
        finished = tf.reduce_sum(tf.cast(loop.finished_flags, tf.int32), axis=1)[:, None]
        slot = tf.range(n)[None, :]  # [1, N]
        # Slot j: finished j while j < finished, else live j − finished (after the K
        # finished slots of the concatenation).
        pick = tf.where(slot < finished, slot, self.beam + slot - finished)  # [B, N]
        seqs = tf.concat([loop.finished_seq, loop.alive_seq], axis=1)  # [B, 2K, L]
        scores = tf.concat([loop.finished_scores, loop.alive_log_probs], axis=1)  # [B, 2K]
        ids = self.pad_rows(tf.gather(seqs, pick, batch_dims=1), loop.index)  # [B, N, L]
        scores = tf.gather(scores, pick, batch_dims=1)  # [B, N]
        # A dead beam is picked only where fewer than N live ones exist (a vocabulary
        # smaller than the beam; a prefix always leaves the search a free step).
        missing = scores <= DEAD  # finished scores are live: their penalty is at least 1
        ids = tf.where(missing[:, :, None], self.pad_id, ids)
        scores = tf.where(missing, float("-inf"), scores)
        if self.hypotheses is None:
            return ids[:, 0], scores[:, 0]
        return ids, scores

    def select(self, loop, context, pick):
        """The sentences `pick` `[n]` of `loop` and their rows of `context` (any loop
        state whose fields after `index`, `last` and `state` are by sentence)."""
        rows = tf.reshape(pick[:, None] * self.beam + tf.range(self.beam)[None], [-1])
        by_row = lambda nest: tf.nest.map_structure(lambda x: tf.gather(x, rows), nest)  # noqa: E731
        by_sentence = lambda nest: tf.nest.map_structure(lambda x: tf.gather(x, pick), nest)  # noqa: E731
        loop = type(loop)(
            index=loop.index,
            last=tf.gather(loop.last, rows),
            state=by_row(loop.state),
            **{
                field: by_sentence(getattr(loop, field))  # the prefix may be () (none)
                for field in loop._fields
                if field not in ("index", "last", "state")
            },
        )
        return loop, by_row(context)


class BeamSearch(Search):
    """t2t beam search (see the module docstring).

    The score of a sentence is the best finished hypothesis' length-penalized
    `log p / ((5 + length) / 6) ** alpha` (length: the tokens generated, EOS included;
    with `alpha=0` the log-probability itself), or, where none finished, the best live
    one's raw log-probability. With `num_hypotheses=N` (at most K) the N best come
    back: the finished hypotheses by score, then, where fewer than N finished before
    `max_length`, the best live ones with their raw log-probabilities. With a `prefix`
    (see `Search.search`) a sentence's only hypothesis is its forced path until
    the prefix ends (a prefix is shorter than `max_length`, so the beam widens before the
    search ends); where fewer than N hypotheses exist when the search ends (a vocabulary
    smaller than the beam), the missing ones are empty (PAD) with score `-inf`.

    When a sentence's search ends: by default (t2t's rule) when its best finished score
    beats what any live beam can still reach (its log-probability over the length
    penalty of `max_length`, so a smaller `max_length` ends the search sooner) and, for
    N hypotheses, N have finished: the first is final, the others the best found by
    then. With `stop_early=True` (fairseq's and CTranslate2's rule) as soon as K
    hypotheses have finished, whatever the live beams could still reach: often sooner,
    sometimes later (when fewer than K finish), and the result can differ from t2t's
    rule.

    Args:
        beam_size: K, the hypotheses kept per sentence.
        alpha: length-penalty exponent (0 = no penalty).
        stop_early: end a sentence's search once K hypotheses have finished.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 10.0, state
    >>> ids, _ = BeamSearch(beam_size=2).search(step_fn, (), tf.constant([2]), 4, eos_id=0)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """

    def __init__(self, beam_size=4, alpha=0.6, stop_early=False):
        self.beam_size = _checks.check_positive_int("beam_size", beam_size)
        self.alpha = _checks.check_non_negative_float("alpha", alpha)
        self.stop_early = _checks.check_bool("stop_early", stop_early)

    @property
    def rows_per_sentence(self):
        return self.beam_size

    @property
    def max_hypotheses(self):
        return self.beam_size

    def get_config(self):
        return {"beam_size": self.beam_size, "alpha": self.alpha, "stop_early": self.stop_early}

    def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
        return _Beam(
            step_fn, self.beam_size, self.alpha, eos_id, pad_id, length, hypotheses,
            self.stop_early,
        )  # fmt: skip
