"""One step of each search over its loop state: the pieces the strategies of
`tfblocks.decoding.search` are made of.

`_Sequential` (greedy and sampling: one row per sentence, or one per sample, a
`choose(logits, index)` rule) and `_Beam` (t2t beam search, K rows per sentence) each give
`initial`, `step`, `done`, `result`, `select`, `repeat` and `size`, which the plain loop
(`SearchStrategy.search`) and the shrinking one (`tfblocks.decoding.dropping`) drive.

`hypotheses`: None for one result per sentence (`ids [B, L]`, `scores [B]`), or N for
the N best (`ids [B, N, L]`, `scores [B, N]`, best first).
"""

from typing import NamedTuple

import tensorflow as tf

NEG_INF = -1e9  # a finite "minus infinity" for scores (inf - inf would give NaN)


def length_penalty(length, alpha):
    """t2t's length penalty `((5 + length) / 6) ** alpha`."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _dim(x, axis):
    """The static size of `x` along `axis` when known, else a scalar tensor."""
    size = x.shape[axis]
    return size if size is not None else tf.shape(x)[axis]


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
    n, m = _dim(x, 1), TOP_K_CHUNK
    if not tf.is_tensor(n) and n <= 4 * k * m:
        return tf.math.top_k(x, k)
    chunks = tf.maximum((n + m - 1) // m, k)  # a segment's traced n may be small
    padded = tf.pad(x, [[0, 0], [0, chunks * m - n]], constant_values=float("-inf"))
    padded = tf.reshape(padded, [_dim(x, 0), chunks, m])  # [B, C, m]
    _, best = tf.math.top_k(tf.reduce_max(padded, axis=-1), k)  # [B, k] chunks
    best = tf.sort(best, axis=-1)  # index order: ties still go to the lower index
    candidates = tf.reshape(tf.gather(padded, best, batch_dims=1), [_dim(x, 0), k * m])
    values, where = tf.math.top_k(candidates, k)  # [B, k]
    index = tf.reshape(best[:, :, None] * m + tf.range(m)[None, None], [_dim(x, 0), k * m])
    return values, tf.gather(index, where, batch_dims=1)


def _write(seqs, index, tokens):
    """Writes `tokens` `[...]` at position `index` of `seqs` `[..., L]` (zeros there)."""
    column = tf.one_hot(index, tf.shape(seqs)[-1], dtype=seqs.dtype)  # [L]
    return seqs + tokens[..., None] * column


class SequentialState(NamedTuple):
    """Loop state of `Greedy` / `Sampling`."""

    index: tf.Tensor  # scalar: the position being generated
    last: tf.Tensor  # [B, 1]: the ids fed to the next step
    state: object  # the step function's nest
    ids: tf.Tensor  # [B, L]: generated ids, PAD after EOS
    finished: tf.Tensor  # [B]: EOS seen
    scores: tf.Tensor  # [B]: log-probability sums


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


def _pad_after_eos(ids, index, eos_id, pad_id):
    """`ids` `[B, L]` with `pad_id` after each row's first EOS and from position `index`
    on (the positions a search never wrote, or zero-filled)."""
    after_eos = tf.math.cumsum(tf.cast(ids == eos_id, tf.int32), axis=1, exclusive=True) > 0
    unwritten = tf.range(_dim(ids, 1))[None, :] >= index  # [1, L]
    return tf.where(tf.logical_or(after_eos, unwritten), pad_id, ids)


class _Pieces:
    """What a search's loop pieces share: the step function, the ids, the length, and
    the number of results per sentence (`hypotheses`: None, or N for `[B, N, ...]`)."""

    rows_per_sentence = 1  # rows of the step function per sentence (a beam search: K)

    def __init__(self, step_fn, eos_id, pad_id, length, hypotheses=None):
        self.step_fn = step_fn
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.length = length
        self.hypotheses = hypotheses

    def _pad_rows(self, ids, index):
        """`_pad_after_eos` of `ids` `[B, L]` or `[B, N, L]`."""
        if ids.shape.rank == 2:
            return _pad_after_eos(ids, index, self.eos_id, self.pad_id)
        flat = tf.reshape(ids, [-1, _dim(ids, 2)])  # [B·N, L]
        padded = tf.reshape(_pad_after_eos(flat, index, self.eos_id, self.pad_id), tf.shape(ids))
        padded.set_shape(ids.shape)  # [B, N, L]
        return padded

    def logits(self, loop, context):
        """`(float32 logits, new state)` of the step function for `loop.last`."""
        if context is None:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state)
        else:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state, context)
        return tf.cast(logits, tf.float32), new_state


class _Sequential(_Pieces):
    """The pieces of greedy / sampling search over `B` rows (see `_Beam`).

    With `hypotheses=N` each sentence has N rows that search independently (N samples),
    returned sorted by score, best first. Such a search cannot drop finished sentences
    (`select` and `size` see rows, not sentences); `Sampling` never does.
    """

    def __init__(self, step_fn, choose, eos_id, pad_id, length, hypotheses=None):
        super().__init__(step_fn, eos_id, pad_id, length, hypotheses)
        self.choose = choose
        self.rows_per_sentence = hypotheses or 1

    def initial(self, start_ids, state):
        start_ids = self.repeat(start_ids)
        batch = tf.shape(start_ids)[0]
        return SequentialState(
            index=tf.constant(0),
            last=start_ids[:, None],
            state=self.repeat(state),
            ids=tf.zeros([batch, self.length], tf.int32),
            finished=tf.zeros([batch], tf.bool),
            scores=tf.zeros([batch], tf.float32),
        )

    def repeat(self, nest):
        """Each `B`-row leaf repeated once per row of a sentence (sentence-major)."""
        if self.rows_per_sentence == 1:
            return nest
        return tf.nest.map_structure(lambda x: tf.repeat(x, self.rows_per_sentence, axis=0), nest)

    def size(self, loop):
        return _dim(loop.ids, 0)

    def done(self, loop):
        return loop.finished

    def step(self, loop, context):
        logits, new_state = self.logits(loop, context)  # [B, V]
        chosen = self.choose(logits, loop.index)  # [B]
        step_score = tf.gather(tf.nn.log_softmax(logits), chosen, batch_dims=1)  # [B]
        chosen = tf.where(loop.finished, self.pad_id, chosen)
        return SequentialState(
            index=loop.index + 1,
            last=chosen[:, None],
            state=new_state,
            ids=_write(loop.ids, loop.index, chosen),
            finished=tf.logical_or(loop.finished, tf.equal(chosen, self.eos_id)),
            scores=loop.scores + tf.where(loop.finished, 0.0, step_score),
        )

    def result(self, loop):
        ids = _pad_after_eos(loop.ids, loop.index, self.eos_id, self.pad_id)  # [B·N, L]
        if self.hypotheses is None:
            return ids, loop.scores
        n = self.hypotheses
        scores = tf.reshape(loop.scores, [-1, n])  # [B, N]
        ids = tf.reshape(ids, [-1, n, _dim(ids, 1)])  # [B, N, L]
        order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)  # best first
        return tf.gather(ids, order, batch_dims=1), tf.gather(scores, order, batch_dims=1)

    def select(self, loop, context, pick):
        """The rows `pick` `[n]` of `loop` and of `context`."""
        by_row = lambda nest: tf.nest.map_structure(lambda x: tf.gather(x, pick), nest)  # noqa: E731
        fields = {f: by_row(getattr(loop, f)) for f in SequentialState._fields if f != "index"}
        return SequentialState(index=loop.index, **fields), by_row(context)


def _filter_top_p(logits, top_p):
    """Keeps the smallest set of best tokens whose probability reaches `top_p`."""
    order = tf.argsort(logits, axis=-1, direction="DESCENDING")  # [B, V]
    sorted_logits = tf.gather(logits, order, batch_dims=1)
    probs = tf.nn.softmax(sorted_logits)
    before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # mass of the better tokens
    keep_sorted = before < top_p  # the best token is always kept
    keep = tf.scatter_nd(
        tf.stack(
            [tf.broadcast_to(tf.range(tf.shape(order)[0])[:, None], tf.shape(order)), order],
            axis=-1,
        ),
        keep_sorted,
        tf.shape(order),
    )  # [B, V], back in vocabulary order
    return tf.where(keep, logits, NEG_INF)


class _Beam(_Pieces):
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

    def initial(self, start_ids, state):
        beam, batch = self.beam, _dim(start_ids, 0)
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
        )

    def size(self, loop):
        """B, the sentences in `loop`."""
        return _dim(loop.alive_seq, 0)

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

    def step(self, loop, context):
        """One step: every beam extended by one token."""
        beam, i = self.beam, loop.index
        batch = _dim(loop.alive_seq, 0)

        def regroup(x):  # [B·K, ...] -> [B, K, ...]
            return tf.reshape(x, [batch, beam, *(_dim(x, a) for a in range(1, x.shape.rank))])

        def flatten(x):  # [B, K, ...] -> [B·K, ...]
            return tf.reshape(x, [batch * beam, *(_dim(x, a) for a in range(2, x.shape.rank))])

        logits, new_state = self.logits(loop, context)  # [B·K, V]
        vocab = tf.shape(logits)[-1]
        log_probs = regroup(tf.nn.log_softmax(logits)) + loop.alive_log_probs[:, :, None]
        penalty = length_penalty(i + 1, self.alpha)
        flat_scores = tf.reshape(log_probs / penalty, [batch, -1])  # [B, K·V]
        top_scores, top_index = top_k(flat_scores, 2 * beam)  # [B, 2K]
        origin, token = top_index // vocab, top_index % vocab  # [B, 2K]
        top_seq = _write(tf.gather(loop.alive_seq, origin, batch_dims=1), i, token)  # [B, 2K, L]
        # A candidate is real unless it extends a dead beam (score near NEG_INF).
        is_eos = tf.logical_and(tf.equal(token, self.eos_id), top_scores > NEG_INF / 2)

        # The K best extensions that did not end stay alive (there are always K).
        _, keep = tf.math.top_k(tf.where(is_eos, NEG_INF, top_scores), k=beam)  # [B, K]
        parents = tf.gather(origin, keep, batch_dims=1)  # [B, K]
        reordered = tf.nest.map_structure(
            lambda x: flatten(tf.gather(regroup(x), parents, batch_dims=1)), new_state
        )

        # EOS-ended extensions compete with the finished ones for K slots.
        all_seq = tf.concat([loop.finished_seq, top_seq], axis=1)  # [B, 3K, L]
        all_scores = tf.concat(
            [loop.finished_scores, tf.where(is_eos, top_scores, NEG_INF)], axis=1
        )
        all_flags = tf.concat([loop.finished_flags, is_eos], axis=1)
        finished_scores, best = tf.math.top_k(all_scores, k=beam)  # [B, K]
        return BeamState(
            index=i + 1,
            last=flatten(tf.gather(token, keep, batch_dims=1))[:, None],  # [B·K, 1]
            state=reordered,
            alive_seq=tf.gather(top_seq, keep, batch_dims=1),
            alive_log_probs=tf.gather(top_scores * penalty, keep, batch_dims=1),
            finished_seq=tf.gather(all_seq, best, batch_dims=1),
            finished_scores=finished_scores,
            finished_flags=tf.gather(all_flags, best, batch_dims=1),
        )

    def result(self, loop):
        """`(ids [B, L], scores [B])` of every sentence of `loop`, or with `hypotheses=N`
        `(ids [B, N, L], scores [B, N])`: the finished hypotheses by length-penalized
        score, then, where fewer than N finished, the best live ones with their raw
        log-probabilities (see `BeamSearch`)."""
        n = self.hypotheses or 1
        finished = tf.reduce_sum(tf.cast(loop.finished_flags, tf.int32), axis=1)[:, None]
        slot = tf.range(n)[None, :]  # [1, N]
        # Slot j: finished j while j < finished, else live j − finished (after the K
        # finished slots of the concatenation).
        pick = tf.where(slot < finished, slot, self.beam + slot - finished)  # [B, N]
        seqs = tf.concat([loop.finished_seq, loop.alive_seq], axis=1)  # [B, 2K, L]
        scores = tf.concat([loop.finished_scores, loop.alive_log_probs], axis=1)  # [B, 2K]
        ids = self._pad_rows(tf.gather(seqs, pick, batch_dims=1), loop.index)  # [B, N, L]
        scores = tf.gather(scores, pick, batch_dims=1)  # [B, N]
        if self.hypotheses is None:
            return ids[:, 0], scores[:, 0]
        return ids, scores

    def select(self, loop, context, pick):
        """The sentences `pick` `[n]` of `loop` and their rows of `context`."""
        rows = tf.reshape(pick[:, None] * self.beam + tf.range(self.beam)[None], [-1])
        by_row = lambda nest: tf.nest.map_structure(lambda x: tf.gather(x, rows), nest)  # noqa: E731
        loop = BeamState(
            index=loop.index,
            last=tf.gather(loop.last, rows),
            state=by_row(loop.state),
            **{
                field: tf.gather(getattr(loop, field), pick)
                for field in BeamState._fields
                if field not in ("index", "last", "state")
            },
        )
        return loop, by_row(context)
