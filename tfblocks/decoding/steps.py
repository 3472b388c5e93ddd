"""One step of each search over its loop state: the pieces the strategies of
`tfblocks.decoding.search` are made of.

`_Sequential` (greedy and sampling: one row per sentence, a `choose(logits, index)` rule)
and `_Beam` (t2t beam search, K rows per sentence) each give `initial`, `step`, `done`,
`result`, `select`, `repeat` and `size`, which the plain loop (`SearchStrategy.search`)
and the shrinking one (`tfblocks.decoding.dropping`) drive.
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
    """What a search's loop pieces share: the step function, the ids, the length."""

    rows_per_sentence = 1  # rows of the step function per sentence (a beam search: K)

    def __init__(self, step_fn, eos_id, pad_id, length):
        self.step_fn = step_fn
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.length = length

    def logits(self, loop, context):
        """`(float32 logits, new state)` of the step function for `loop.last`."""
        if context is None:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state)
        else:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state, context)
        return tf.cast(logits, tf.float32), new_state


class _Sequential(_Pieces):
    """The pieces of greedy / sampling search over `B` rows (see `_Beam`)."""

    def __init__(self, step_fn, choose, eos_id, pad_id, length):
        super().__init__(step_fn, eos_id, pad_id, length)
        self.choose = choose

    def initial(self, start_ids, state):
        batch = tf.shape(start_ids)[0]
        return SequentialState(
            index=tf.constant(0),
            last=start_ids[:, None],
            state=state,
            ids=tf.zeros([batch, self.length], tf.int32),
            finished=tf.zeros([batch], tf.bool),
            scores=tf.zeros([batch], tf.float32),
        )

    def repeat(self, nest):
        return nest  # one row per sentence

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
        return _pad_after_eos(loop.ids, loop.index, self.eos_id, self.pad_id), loop.scores

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
    """t2t beam search's pieces over `B` sentences × `K` beams (B read from the loop)."""

    def __init__(self, step_fn, beam, alpha, eos_id, pad_id, length):
        super().__init__(step_fn, eos_id, pad_id, length)
        self.beam = beam
        self.alpha = alpha

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
        """`[B]`: the sentence's best finished score beats what any live beam can reach.

        t2t bounds a live beam by its log-probability over the length penalty of
        `max_length` and stops when the *worst* finished score beats every bound;
        comparing the *best* cannot change the returned (top) hypothesis.
        """
        best_alive = loop.alive_log_probs[:, 0] / length_penalty(self.length, self.alpha)
        flags = loop.finished_flags
        best_finished = tf.reduce_max(tf.where(flags, loop.finished_scores, NEG_INF), axis=1)
        return tf.logical_and(tf.reduce_any(flags, 1), best_finished >= best_alive)

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
        top_scores, top_index = tf.math.top_k(flat_scores, k=2 * beam)  # [B, 2K]
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
        """`(ids [B, L], scores [B])` of every sentence of `loop` (see `BeamSearch`)."""
        any_finished = tf.reduce_any(loop.finished_flags, axis=1)  # [B]
        ids = tf.where(any_finished[:, None], loop.finished_seq[:, 0], loop.alive_seq[:, 0])
        ids = _pad_after_eos(ids, loop.index, self.eos_id, self.pad_id)
        scores = tf.where(any_finished, loop.finished_scores[:, 0], loop.alive_log_probs[:, 0])
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
