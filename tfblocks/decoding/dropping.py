"""Searches whose finished sentences leave the batch (`drop_finished=True`).

The search runs in segments, each a `tf.while_loop` of static shapes (one XLA program per
batch size and cache length with `jit_compile`). A segment ends when enough sentences
are done for the batch to shrink to a smaller power of two, when the caches must grow,
or when all are done; in between, the leaving sentences' results are written and the
rest gathered. Every sentence gets the result it gets in one batch.

The driver sees only the search's pieces (`size`, `done`, `step`, `result`, `select`,
`rows_per_sentence`, `length`: a `tfblocks.decoding.base.Pieces`), never the model.
"""

from typing import NamedTuple

import tensorflow as tf

# A shrinking search never goes below this many step-function rows (4 sentences of beam
# 4, 16 of greedy): every smaller size would be one more XLA program to compile.
MIN_ROWS = 16


class DroppingState(NamedTuple):
    """Loop state of `run_dropping`."""

    loop: object  # BeamState / SequentialState of the sentences still in the batch
    context: object  # their rows of the step function's context
    origin: tf.Tensor  # [n]: their positions in the input batch
    real: tf.Tensor  # [n]: False for the copies that pad the batch to its size
    cache: tf.Tensor  # scalar: the positions the step function's caches hold now
    ids: tf.Tensor  # [B, L] (or [B, N, L]): results, written when a sentence leaves
    scores: tf.Tensor  # [B] (or [B, N])


def run_dropping(pieces, initial, context, cache_lengths, grow_state, jit_compile):
    """Runs a search's `pieces` in segments of static shapes;
    between them, writes the results of the sentences whose search ended and shrinks
    the batch to the `_shrunk_size` of the others (padded with copies of one of them,
    which never count as searching and are never written)."""
    length = pieces.length
    lengths = None if cache_lengths is None else tf.constant(cache_lengths, tf.int32)
    floor = _next_power_of_two(max(1, MIN_ROWS // pieces.rows_per_sentence))  # sentences

    def searching(loop, real):  # [n]: real sentences whose search goes on
        ended = tf.logical_or(pieces.done(loop), loop.index >= length)
        return tf.logical_and(real, tf.logical_not(ended))

    def shrinkable(loop, real):  # enough sentences ended for a smaller batch
        count = tf.reduce_sum(tf.cast(searching(loop, real), tf.int32))
        return tf.logical_or(count == 0, _shrunk_size(count, floor) < pieces.size(loop))

    def segment(loop, context, real, end):
        def cond(loop):
            return tf.logical_and(loop.index < end, tf.logical_not(shrinkable(loop, real)))

        return tf.while_loop(cond, lambda loop: (pieces.step(loop, context),), (loop,))[0]

    if jit_compile:
        segment = tf.function(segment, jit_compile=True, autograph=False)

    def body(outer):
        # A segment never runs past the caches: they grow between segments.
        end = tf.minimum(length, outer.cache)
        loop = segment(outer.loop, outer.context, outer.real, end)
        going = searching(loop, outer.real)
        ids, scores = pieces.result(loop)
        leaving = tf.where(tf.logical_and(outer.real, tf.logical_not(going)))[:, 0]
        where = tf.gather(outer.origin, leaving)[:, None]
        out_ids = tf.tensor_scatter_nd_update(outer.ids, where, tf.gather(ids, leaving))
        out_scores = tf.tensor_scatter_nd_update(outer.scores, where, tf.gather(scores, leaving))

        staying = tf.cast(tf.where(going)[:, 0], tf.int32)
        count = tf.size(staying)
        size = _shrunk_size(tf.maximum(count, 1), floor)
        unchanged = (loop, outer.context, outer.origin, tf.logical_and(outer.real, going))

        def shrink():
            pick = tf.concat([staying, tf.fill([size - count], staying[0])], axis=0)
            picked, picked_context = pieces.select(loop, outer.context, pick)
            real = tf.range(size) < count
            return picked, picked_context, tf.gather(outer.origin, pick), real

        loop, context, origin, real = tf.cond(
            tf.logical_and(count > 0, size < tf.size(going)), shrink, lambda: unchanged
        )
        cache = outer.cache
        if lengths is not None:
            grow = tf.logical_and(tf.equal(loop.index, cache), loop.index < length)
            cache = tf.where(
                tf.logical_and(grow, count > 0),
                tf.reduce_min(tf.where(lengths > cache, lengths, tf.reduce_max(lengths))),
                cache,
            )
            state = tf.cond(
                cache > outer.cache, lambda: grow_state(loop.state, cache), lambda: loop.state
            )
            loop = loop._replace(state=state)
        return (DroppingState(loop, context, origin, real, cache, out_ids, out_scores),)

    def cond(outer):
        return tf.reduce_any(searching(outer.loop, outer.real))

    initial, context = tf.nest.map_structure(tf.convert_to_tensor, (initial, context))
    batch = pieces.size(initial)
    if lengths is not None:  # a tensor max_length escapes _check_growth's check
        tf.debugging.assert_less_equal(
            tf.cast(length, tf.int32),
            lengths[-1],
            message="max_length must be at most the last of cache_lengths",
        )
    ids, scores = pieces.result(initial)  # for their shapes: [B, (N,) L] and [B, (N)]
    start = DroppingState(
        loop=initial,
        context=context,
        origin=tf.range(batch),
        real=tf.ones([batch], tf.bool),
        cache=tf.cast(length if cache_lengths is None else cache_lengths[0], tf.int32),
        ids=tf.zeros_like(ids),
        scores=tf.zeros_like(scores),
    )
    # Batch size and cache length change between iterations: only ranks are invariant.
    invariants = tf.nest.map_structure(lambda x: tf.TensorShape([None] * x.shape.rank), start)
    invariants = invariants._replace(
        cache=tf.TensorShape([]), ids=start.ids.shape, scores=start.scores.shape
    )
    final = tf.while_loop(cond, body, (start,), shape_invariants=(invariants,))[0]
    return final.ids, final.scores


def _shrunk_size(count, floor=1):
    """The batch size a search of `count` ≥ 1 sentences shrinks to: the smallest power
    of two that holds them, and at least `floor` (a power of two).

    Each size is its own XLA program (compiled on first use), so the sizes are few:
    halving at most doubles the rows a segment computes, and `floor` spares the
    programs of batches too small to be cheaper per step.

    >>> [int(_shrunk_size(n)) for n in (1, 2, 3, 5, 7, 9, 13, 17, 25, 33)]
    [1, 2, 4, 8, 8, 16, 16, 32, 32, 64]
    >>> [int(_shrunk_size(n, floor=4)) for n in (1, 3, 5)]
    [4, 4, 8]
    """
    return tf.maximum(_next_power_of_two(count), floor)


def _next_power_of_two(n):
    """The smallest power of two ≥ the int32 scalar `n` ≥ 1 (a tensor)."""
    n = n - 1
    for shift in (1, 2, 4, 8, 16):
        n = tf.bitwise.bitwise_or(n, tf.bitwise.right_shift(n, shift))
    return n + 1
