"""Greedy search, and `Sequential`: the loop pieces of a search that picks one token a
row at every step by a rule (greedy's argmax here, `tfblocks.decoding.sampling`'s draw)."""

from typing import NamedTuple

import tensorflow as tf

from tfblocks.decoding.base import (
    Pieces,
    Search,
    dim,
    forced_tokens,
    has_prefix,
    pad_after_eos,
    write,
)


class SequentialState(NamedTuple):
    """Loop state of `Greedy` / `Sampling`."""

    index: tf.Tensor  # scalar: the position being generated
    last: tf.Tensor  # [B, 1]: the ids fed to the next step
    state: object  # the step function's nest
    ids: tf.Tensor  # [B, L]: generated ids, PAD after EOS
    finished: tf.Tensor  # [B]: EOS seen
    scores: tf.Tensor  # [B]: log-probability sums
    prefix: tf.Tensor  # [B, P]: the ids forced first (padded with pad_id); () for none


class Sequential(Pieces):
    """The pieces of greedy / sampling search over `B` rows, each step's token of a row
    given by `choose(logits [B, V], index) -> [B]` (or its prefix's token while that
    lasts); the score of a row is the sum of its tokens' log-probabilities.

    With `hypotheses=N` each sentence has N rows that search independently (N samples),
    returned sorted by score, best first. Such a search cannot drop finished sentences
    (`select` and `size` see rows, not sentences); `Sampling` never does.
    """

    def __init__(self, step_fn, choose, eos_id, pad_id, length, hypotheses=None):
        super().__init__(step_fn, eos_id, pad_id, length, hypotheses)
        self.choose = choose
        self.rows_per_sentence = hypotheses or 1

    def initial(self, start_ids, state, prefix):
        start_ids = self.repeat(start_ids)
        batch = tf.shape(start_ids)[0]
        return SequentialState(
            index=tf.constant(0),
            last=start_ids[:, None],
            state=self.repeat(state),
            ids=tf.zeros([batch, self.length], tf.int32),
            finished=tf.zeros([batch], tf.bool),
            scores=tf.zeros([batch], tf.float32),
            prefix=self.repeat(prefix),
        )

    def repeat(self, nest):
        """Each `B`-row leaf repeated once per row of a sentence (sentence-major)."""
        if self.rows_per_sentence == 1:
            return nest
        return tf.nest.map_structure(lambda x: tf.repeat(x, self.rows_per_sentence, axis=0), nest)

    def size(self, loop):
        return dim(loop.ids, 0)

    def done(self, loop):
        return loop.finished

    def step(self, loop, context):
        logits, new_state = self.logits(loop, context)  # [B, V]
        chosen = self.choose(logits, loop.index)  # [B]
        if has_prefix(loop.prefix):  # none forces nothing
            forcing, forced = forced_tokens(loop.prefix, loop.index, self.pad_id)  # [B]
            chosen = tf.where(forcing, forced, chosen)
        step_score = tf.gather(tf.nn.log_softmax(logits), chosen, batch_dims=1)  # [B]
        chosen = tf.where(loop.finished, self.pad_id, chosen)
        return SequentialState(
            index=loop.index + 1,
            last=chosen[:, None],
            state=new_state,
            ids=write(loop.ids, loop.index, chosen),
            finished=tf.logical_or(loop.finished, tf.equal(chosen, self.eos_id)),
            scores=loop.scores + tf.where(loop.finished, 0.0, step_score),
            prefix=loop.prefix,
        )

    def result(self, loop):
        ids = pad_after_eos(loop.ids, loop.index, self.eos_id, self.pad_id)  # [B·N, L]
        if self.hypotheses is None:
            return ids, loop.scores
        n = self.hypotheses
        scores = tf.reshape(loop.scores, [-1, n])  # [B, N]
        ids = tf.reshape(ids, [-1, n, dim(ids, 1)])  # [B, N, L]
        order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)  # best first
        return tf.gather(ids, order, batch_dims=1), tf.gather(scores, order, batch_dims=1)

    def select(self, loop, context, pick):
        """The rows `pick` `[n]` of `loop` and of `context`."""
        by_row = lambda nest: tf.nest.map_structure(lambda x: tf.gather(x, pick), nest)  # noqa: E731
        fields = {f: by_row(getattr(loop, f)) for f in SequentialState._fields if f != "index"}
        return SequentialState(index=loop.index, **fields), by_row(context)


class Greedy(Search):
    """Greedy search: the most likely token at every step; the score is the sum of the
    chosen tokens' log-probabilities.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):  # always prefers token (last + 1) % 5
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 10.0, state
    >>> ids, _ = Greedy().search(step_fn, (), tf.constant([2]), max_length=4, eos_id=0)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """

    def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
        def choose(logits, index):
            return tf.argmax(logits, axis=-1, output_type=tf.int32)

        return Sequential(step_fn, choose, eos_id, pad_id, length, hypotheses)
