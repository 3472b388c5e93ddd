"""Search over a step function: greedy, sampling (temperature, top-k, top-p), t2t beam search.

The searches know nothing of the model. Each takes a
`step_fn(ids, index, state) -> (logits, state)`: given the `[N, 1]` int32 ids of
position `index` and an opaque nest of tensors `state` (e.g. a K/V cache), it returns
float32 logits `[N, vocab]` for the next position and the updated state. The loops
are `tf.while_loop`s over static shapes, so they compile with XLA; their loop state
is a named tuple. With `cache_lengths` a search runs one loop per cache length and
grows the step function's caches in between (`grow_state`), so a batch whose outputs
are short never works on caches sized for the longest possible one. With
`drop_finished`, greedy and beam search let the sentences whose search has ended leave the batch
between loops (the step function then reads per-sentence tensors from a `context`
that shrinks with the batch). `Decoder` builds
the step function of a `tfblocks.Transformer` (encoder run once, cross-attention k/v
computed once, self-attention k/v cached, caches grown 16, 32, 64, …) and is what
`Translator` and `Generator` use.

Hand-written because no library searches with t2t's semantics over an
encoder–decoder cache: keras-hub's samplers drive a decoder-only cache callback and
have no t2t length penalty or 2·beam candidate set. `beam_search` follows t2t
`beam_search.py`: each step keeps the 2·beam best extensions, the `beam` best
non-EOS ones stay alive, EOS-ended ones compete for `beam` finished slots with score
`log p / ((5 + length) / 6) ** alpha`; when no hypothesis finished, the best live one
is returned with its raw log-probability (as t2t does). Departure: t2t stops when the
*worst* finished score beats the best a live beam can reach; here the search stops
when the *best* finished score does, which cannot change the returned (top)
hypothesis and saves steps.

Departure from t2t in `Decoder`: PAD and BOS are never generated (their logits are
masked), so the padding mask of the decoder inputs can never hide a generated token.
"""

from typing import NamedTuple

import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import EOS_ID, PAD_ID

NEG_INF = -1e9  # a finite "minus infinity" for scores (inf - inf would give NaN)
# A search that drops finished sentences never shrinks below this many step-function
# rows (4 sentences of beam 4, 16 of greedy): every smaller size would be one more XLA
# program to compile, and the floor cost no measurable throughput (benchmarks/RESULTS.md,
# "Fewer XLA programs when finished sentences leave the batch").
MIN_ROWS = 16


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
    """Loop state of `greedy_search` / `sample_search`."""

    index: tf.Tensor  # scalar: the position being generated
    last: tf.Tensor  # [B, 1]: the ids fed to the next step
    state: object  # the step function's nest
    ids: tf.Tensor  # [B, L]: generated ids, PAD after EOS
    finished: tf.Tensor  # [B]: EOS seen
    scores: tf.Tensor  # [B]: log-probability sums


class BeamState(NamedTuple):
    """Loop state of `beam_search` (B sentences × K beams)."""

    index: tf.Tensor  # scalar
    last: tf.Tensor  # [B·K, 1]
    state: object  # the step function's nest, B·K rows
    alive_seq: tf.Tensor  # [B, K, L]
    alive_log_probs: tf.Tensor  # [B, K]
    finished_seq: tf.Tensor  # [B, K, L]
    finished_scores: tf.Tensor  # [B, K], length-penalized
    finished_flags: tf.Tensor  # [B, K]


def _check_search_args(max_length, eos_id, pad_id):
    if not tf.is_tensor(max_length):  # a scalar tensor (e.g. from a source's shape) is taken as is
        _checks.check_positive_int("max_length", max_length)
    _checks.check_non_negative_int("eos_id", eos_id)
    _checks.check_non_negative_int("pad_id", pad_id)


def _pad_after_eos(ids, index, eos_id, pad_id):
    """`ids` `[B, L]` with `pad_id` after each row's first EOS and from position `index`
    on (the positions a search never wrote, or zero-filled)."""
    after_eos = tf.math.cumsum(tf.cast(ids == eos_id, tf.int32), axis=1, exclusive=True) > 0
    unwritten = tf.range(_dim(ids, 1))[None, :] >= index  # [1, L]
    return tf.where(tf.logical_or(after_eos, unwritten), pad_id, ids)


def _check_dropping(drop_finished, context, jit_compile):
    _checks.check_bool("drop_finished", drop_finished)
    _checks.check_bool("jit_compile", jit_compile)
    if drop_finished and context is None:
        raise ValueError(
            "`drop_finished` needs the step function's per-sentence tensors as `context` "
            "(a closed-over tensor cannot shrink with the batch), got context=None."
        )


def _check_growth(cache_lengths, grow_state, max_length):
    """`cache_lengths` as a tuple of increasing ints (or None), checked with `grow_state`."""
    if cache_lengths is None:
        return None
    lengths = _checks.check_increasing_ints("cache_lengths", cache_lengths)
    if grow_state is None:
        raise ValueError("`cache_lengths` needs a `grow_state` function, got grow_state=None.")
    if not tf.is_tensor(max_length) and lengths[-1] < max_length:
        raise ValueError(
            f"The last of `cache_lengths` must be at least max_length={max_length}, got "
            f"cache_lengths={cache_lengths!r}."
        )
    return lengths


def _while(cond, body, initial, cache_lengths, grow_state):
    """`tf.while_loop(cond, body)`, in one loop per cache length when `cache_lengths` is given.

    The state starts with caches of `cache_lengths[0]` slots; the k-th loop runs while
    `index < cache_lengths[k]`, then `grow_state(state, cache_lengths[k + 1])` enlarges
    the caches for the next one (static shapes in each loop, so every loop compiles
    with XLA). The last loop runs until `cond` ends the search, so the last length
    must cover the search's `max_length`. A search that ends early skips the later
    loops' bodies (only the growth itself runs).
    """
    if cache_lengths is None:
        return tf.while_loop(cond, body, (initial,))[0]
    loop = initial
    for k, end in enumerate(cache_lengths):
        if k:
            loop = loop._replace(state=grow_state(loop.state, end))
        if k == len(cache_lengths) - 1:
            segment = cond
        else:
            segment = lambda loop, end=end: tf.logical_and(loop.index < end, cond(loop))  # noqa: E731
        loop = tf.while_loop(segment, body, (loop,))[0]
    return loop


def _sequential(
    step_fn,
    state,
    start_ids,
    max_length,
    eos_id,
    pad_id,
    choose,
    cache_lengths,
    grow_state,
    context=None,
    drop_finished=False,
    jit_compile=False,
):
    start_ids = tf.cast(start_ids, tf.int32)
    batch = tf.shape(start_ids)[0]
    search = _Sequential(step_fn, choose, eos_id, pad_id, max_length)
    initial = SequentialState(
        index=tf.constant(0),
        last=start_ids[:, None],
        state=state,
        ids=tf.zeros([batch, max_length], tf.int32),
        finished=tf.zeros([batch], tf.bool),
        scores=tf.zeros([batch], tf.float32),
    )
    if drop_finished:
        return _dropping(search, initial, context, cache_lengths, grow_state, jit_compile)

    def cond(loop):
        return tf.logical_and(loop.index < max_length, tf.logical_not(tf.reduce_all(loop.finished)))

    def body(loop):
        return (search.step(loop, context),)

    return search.result(_while(cond, body, initial, cache_lengths, grow_state))


class _Search:
    """What the searches' pieces share: the step function, the ids, the length."""

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


class _Sequential(_Search):
    """The pieces of greedy / sampling search over `B` rows (see `_Beam`)."""

    def __init__(self, step_fn, choose, eos_id, pad_id, length):
        super().__init__(step_fn, eos_id, pad_id, length)
        self.choose = choose

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


def greedy_search(
    step_fn,
    state,
    start_ids,
    max_length,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    cache_lengths=None,
    grow_state=None,
    context=None,
    drop_finished=False,
    jit_compile=False,
):
    """Greedy search: the most likely token at every step.

    Args:
        step_fn: `step_fn(ids [B, 1], index, state) -> (logits [B, V], state)`.
        state: the initial nest of tensors passed to `step_fn`.
        start_ids: int `[B]`, the first input ids (e.g. BOS).
        max_length: the most tokens generated (EOS included): an int, or a scalar
            int32 tensor (under XLA one that depends only on shapes).
        eos_id: the id that ends a sequence.
        pad_id: written after EOS.
        cache_lengths: None, or increasing ints: `state`'s caches hold
            `cache_lengths[0]` positions, and when the search reaches position
            `cache_lengths[k]` it calls `grow_state(state, cache_lengths[k + 1])` to
            enlarge them (the last one must be at least `max_length`). Short outputs
            then never touch long caches; the result is the same.
        grow_state: `grow_state(state, length) -> state` (with `cache_lengths`).
        context, drop_finished, jit_compile: as `beam_search` (a row whose output
            ended leaves the batch).

    Returns:
        `(ids [B, max_length], scores [B])`: ids end with `eos_id` (unless
        `max_length` ran out) and are `pad_id` after it; scores are the sums of the
        chosen tokens' log-probabilities.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):  # always prefers token (last + 1) % 5
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 10.0, state
    >>> ids, _ = greedy_search(step_fn, (), tf.constant([2]), max_length=4, eos_id=0)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """
    _check_search_args(max_length, eos_id, pad_id)
    cache_lengths = _check_growth(cache_lengths, grow_state, max_length)
    _check_dropping(drop_finished, context, jit_compile)

    def choose(logits, index):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    return _sequential(
        step_fn,
        state,
        start_ids,
        max_length,
        eos_id,
        pad_id,
        choose,
        cache_lengths,
        grow_state,
        context,
        drop_finished,
        jit_compile,
    )


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


def sample_search(
    step_fn,
    state,
    start_ids,
    max_length,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=0,
    cache_lengths=None,
    grow_state=None,
):
    """Sampling from `softmax(logits / temperature)`, optionally top-k and/or top-p.

    Args:
        step_fn, state, start_ids, max_length, eos_id, pad_id, cache_lengths,
            grow_state: as `greedy_search`.
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: when > 0, sample among the `top_k` most likely tokens only.
        top_p: in (0, 1]; when < 1, sample among the smallest set of most likely
            tokens whose probability reaches `top_p` (nucleus sampling).
        seed: int or scalar int tensor; the same seed gives the same samples.

    Returns:
        `(ids [B, max_length], scores [B])`, scores under the unmodified model.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 50.0, state
    >>> ids, _ = sample_search(step_fn, (), tf.constant([2]), 4, eos_id=0, top_p=0.9)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """
    _check_search_args(max_length, eos_id, pad_id)
    if isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"`temperature` must be > 0, got temperature={temperature!r}.")
    _checks.check_non_negative_int("top_k", top_k)
    if isinstance(top_p, bool) or not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be in (0, 1], got top_p={top_p!r}.")
    cache_lengths = _check_growth(cache_lengths, grow_state, max_length)
    seed = tf.cast(seed, tf.int32)

    def choose(logits, index):
        logits = logits / temperature
        if top_k:
            kth = tf.math.top_k(logits, k=top_k).values[:, -1:]  # [B, 1]
            logits = tf.where(logits < kth, NEG_INF, logits)
        if top_p < 1:
            logits = _filter_top_p(logits, top_p)
        draw = tf.random.stateless_categorical(
            logits, 1, seed=tf.stack([seed, index]), dtype=tf.int32
        )
        return draw[:, 0]

    return _sequential(
        step_fn, state, start_ids, max_length, eos_id, pad_id, choose, cache_lengths, grow_state
    )


def beam_search(
    step_fn,
    state,
    start_ids,
    max_length,
    beam_size=4,
    alpha=0.6,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    cache_lengths=None,
    grow_state=None,
    context=None,
    drop_finished=False,
    jit_compile=False,
):
    """t2t beam search.

    Args:
        step_fn: called with `B · beam_size` rows (sentence b's beams are rows
            `b·K … b·K + K − 1`); tensors it closes over must be repeated alike.
            With `context`, it is called as `step_fn(ids, index, state, context)`.
        state: the initial nest for `B` rows; each leaf is repeated `beam_size`
            times along axis 0 here, and reordered with the surviving beams.
        start_ids: int `[B]`.
        max_length: the most tokens generated (EOS included).
        beam_size: K.
        alpha: length-penalty exponent (0 = no penalty).
        eos_id: the id that ends a hypothesis.
        pad_id: the id after EOS (`0`: hypotheses are zero-filled).
        cache_lengths, grow_state: as `greedy_search` (`grow_state` sees the
            `B · beam_size` rows).
        context: None, or a nest of `B`-row tensors that the step function reads but
            never changes (e.g. the encoder's cross-attention k/v): repeated
            `beam_size` times like `state`, but never reordered (a sentence's beams
            share it), and passed to `step_fn` as its fourth argument.
        drop_finished: let the sentences whose search has ended leave the batch.
            The search then runs in segments, each a loop of static shapes that ends
            when enough sentences are done for the batch to shrink to a smaller size
            (a power of two, never below `MIN_ROWS` rows: few shapes), when the caches
            must grow, or when all are done; in between, the leaving sentences'
            results are written and the rest gathered. Every sentence gets the result
            it gets in one batch; a batch whose outputs differ in length does much
            less work. Needs `context` (tensors closed over by `step_fn` could not
            shrink). The loop around the segments is graph-mode control flow, not one
            XLA program: see `jit_compile`.
        jit_compile: with `drop_finished`, compile each segment with XLA (one program
            per batch size and cache length).

    Returns:
        `(ids [B, max_length], scores [B])`: the best finished hypothesis and its
        length-penalized score `log p / ((5 + length) / 6) ** alpha`, or, for a
        sentence where none finished, the best live one and its raw log-probability.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 10.0, state
    >>> ids, _ = beam_search(step_fn, (), tf.constant([2]), 4, beam_size=2, eos_id=0)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """
    _check_search_args(max_length, eos_id, pad_id)
    beam = _checks.check_positive_int("beam_size", beam_size)
    if isinstance(alpha, bool) or not alpha >= 0:
        raise ValueError(f"`alpha` must be >= 0, got alpha={alpha!r}.")
    alpha = float(alpha)
    cache_lengths = _check_growth(cache_lengths, grow_state, max_length)
    _check_dropping(drop_finished, context, jit_compile)
    start_ids = tf.cast(start_ids, tf.int32)
    batch = _dim(start_ids, 0)
    length = max_length
    search = _Beam(step_fn, beam, alpha, eos_id, pad_id, length)

    first = tf.concat([[0.0], tf.fill([beam - 1], NEG_INF)], axis=0)  # only beam 0 is live
    initial = BeamState(
        index=tf.constant(0),
        last=tf.repeat(start_ids, beam)[:, None],
        state=search.repeat(state),
        alive_seq=tf.zeros([batch, beam, length], tf.int32),
        alive_log_probs=tf.tile(first[None], [batch, 1]),
        finished_seq=tf.zeros([batch, beam, length], tf.int32),
        finished_scores=tf.fill([batch, beam], NEG_INF),
        finished_flags=tf.zeros([batch, beam], tf.bool),
    )
    context = None if context is None else search.repeat(context)
    if drop_finished:
        return _dropping(search, initial, context, cache_lengths, grow_state, jit_compile)

    def cond(loop):
        return tf.logical_and(loop.index < length, tf.logical_not(tf.reduce_all(search.done(loop))))

    def body(loop):
        return (search.step(loop, context),)

    return search.result(_while(cond, body, initial, cache_lengths, grow_state))


class _Beam(_Search):
    """t2t beam search's pieces over `B` sentences × `K` beams (B read from the loop)."""

    def __init__(self, step_fn, beam, alpha, eos_id, pad_id, length):
        super().__init__(step_fn, eos_id, pad_id, length)
        self.beam = beam
        self.alpha = alpha

    @property
    def rows_per_sentence(self):
        return self.beam

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
        """`(ids [B, L], scores [B])` of every sentence of `loop` (see `beam_search`)."""
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


class _Dropping(NamedTuple):
    """Loop state of the driver of `drop_finished=True` (`_dropping`)."""

    loop: object  # BeamState / SequentialState of the sentences still in the batch
    context: object  # their rows of the step function's context
    origin: tf.Tensor  # [n]: their positions in the input batch
    real: tf.Tensor  # [n]: False for the copies that pad the batch to its size
    cache: tf.Tensor  # scalar: the positions the step function's caches hold now
    ids: tf.Tensor  # [B, L]: results, written when a sentence leaves
    scores: tf.Tensor  # [B]


def _dropping(search, initial, context, cache_lengths, grow_state, jit_compile):
    """Runs `search` (`_Beam` or `_Sequential` pieces) in segments of static shapes;
    between them, writes the results of the sentences whose search ended and shrinks
    the batch to the `_shrunk_size` of the others (padded with copies of one of them,
    which never count as searching and are never written)."""
    length = search.length
    lengths = None if cache_lengths is None else tf.constant(cache_lengths, tf.int32)
    floor = _next_power_of_two(max(1, MIN_ROWS // search.rows_per_sentence))  # sentences

    def searching(loop, real):  # [n]: real sentences whose search goes on
        ended = tf.logical_or(search.done(loop), loop.index >= length)
        return tf.logical_and(real, tf.logical_not(ended))

    def shrinkable(loop, real):  # enough sentences ended for a smaller batch
        count = tf.reduce_sum(tf.cast(searching(loop, real), tf.int32))
        return tf.logical_or(count == 0, _shrunk_size(count, floor) < search.size(loop))

    def segment(loop, context, real, end):
        def cond(loop):
            return tf.logical_and(loop.index < end, tf.logical_not(shrinkable(loop, real)))

        return tf.while_loop(cond, lambda loop: (search.step(loop, context),), (loop,))[0]

    if jit_compile:
        segment = tf.function(segment, jit_compile=True, autograph=False)

    def body(outer):
        # A segment never runs past the caches: they grow between segments.
        end = tf.minimum(length, outer.cache)
        loop = segment(outer.loop, outer.context, outer.real, end)
        going = searching(loop, outer.real)
        ids, scores = search.result(loop)
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
            picked, picked_context = search.select(loop, outer.context, pick)
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
        return (_Dropping(loop, context, origin, real, cache, out_ids, out_scores),)

    def cond(outer):
        return tf.reduce_any(searching(outer.loop, outer.real))

    initial, context = tf.nest.map_structure(tf.convert_to_tensor, (initial, context))
    batch = search.size(initial)
    if lengths is not None:  # a tensor max_length escapes _check_growth's check
        tf.debugging.assert_less_equal(
            tf.cast(length, tf.int32),
            lengths[-1],
            message="max_length must be at most the last of cache_lengths",
        )
    start = _Dropping(
        loop=initial,
        context=context,
        origin=tf.range(batch),
        real=tf.ones([batch], tf.bool),
        cache=tf.cast(length if cache_lengths is None else cache_lengths[0], tf.int32),
        ids=tf.zeros([batch, length], tf.int32),
        scores=tf.zeros([batch], tf.float32),
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

    Each size is its own XLA program (compiled on first use, ~1–2 s each on a CPU), so
    the sizes are few: halving at most doubles the rows a segment computes, and
    `floor` spares the programs of batches too small to be cheaper per step.

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
