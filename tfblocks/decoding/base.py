"""What every search shares: the base class `Search`, its checks, the
loop around its pieces, and the helpers its pieces are made of.

A search knows nothing of the model. `search.search(step_fn, state, start_ids,
max_length, ...)` drives a `step_fn(ids, index, state) -> (logits, state)`: given the
`[N, 1]` int32 ids of position `index` and an opaque nest of tensors `state` (e.g. a K/V
cache), it returns float32 logits `[N, vocab]` for the next position and the updated
state. The loops are `tf.while_loop`s over static shapes, so they compile with XLA; their
loop state is a named tuple. With `cache_lengths` a search runs one loop per cache length
and grows the step function's caches in between (`grow_state`). With `drop_finished`,
greedy and beam search let the sentences whose search has ended leave the batch
(`tfblocks.decoding.dropping`). `tfblocks.decoding.Decoder` builds the step function of a
`tfblocks.Transformer` and runs any search with `Decoder.decode(search, ...)`.

With `num_hypotheses=N` a search returns N results per sentence, best first: beam
search's N best hypotheses, or N samples (`ids [B, N, L]`, `scores [B, N]`).

With `prefix` (ids `[B, P]`) each sentence's results start with its row (`forced_tokens`):
while the row lasts the search takes its token and no other, whose log-probability counts
in the score as any other token's (so a result's score is the log-probability of its ids,
length-penalized by beam search); then the search goes on freely. A row must leave room
for EOS (fewer ids than `max_length`): a longer one is refused, never cut
(`check_prefix_fits`). Forcing is the search's, not the step function's: the search
renormalizes a step function's logits, so they could force a token only by giving it
probability 1.

A new search subclasses `Search`: its constructor checks its options, and
`_pieces` returns the loop's pieces, a `Pieces` with `initial`, `step`, `done`, `result`,
`select`, `repeat` and `size` (as `tfblocks.decoding.greedy.Sequential` and beam search's
do), which the plain loop (`Search.search`) and the shrinking one
(`tfblocks.decoding.dropping`) drive. The prefix is part of the loop state, so it
leaves the batch with its sentence.

Hand-written because no library searches with t2t's semantics over an encoder–decoder
cache: keras-hub's samplers drive a decoder-only cache callback and have no t2t length
penalty or 2·beam candidate set.
"""

import tensorflow as tf

from tfblocks import _checks
from tfblocks._xla import in_xla_context
from tfblocks.decoding.dropping import run_dropping
from tfblocks.ids import EOS_ID, PAD_ID

NEG_INF = -1e9  # a finite "minus infinity" for scores (inf - inf would give NaN)
# A hypothesis whose log-probability is at or below DEAD took a token the step ruled out
# (NEG_INF: PAD, BOS, the other tokens of a forced position) or extends one that did. Real
# log-probabilities stay far above it, and extending a dead hypothesis keeps it dead.
DEAD = NEG_INF / 2


def dim(x, axis):
    """The static size of `x` along `axis` when known, else a scalar tensor."""
    size = x.shape[axis]
    return size if size is not None else tf.shape(x)[axis]


def write(seqs, index, tokens):
    """Writes `tokens` `[...]` at position `index` of `seqs` `[..., L]` (zeros there)."""
    column = tf.one_hot(index, tf.shape(seqs)[-1], dtype=seqs.dtype)  # [L]
    return seqs + tokens[..., None] * column


def prefix_lengths(prefix, pad_id):
    """`[B]`: the ids of each row of `prefix` `[B, P]` before its first `pad_id`."""
    ended = tf.math.cumsum(tf.cast(tf.equal(prefix, pad_id), tf.int32), axis=1) > 0  # [B, P]
    return tf.reduce_sum(tf.cast(tf.logical_not(ended), tf.int32), axis=1)


_PREFIX_TOO_LONG = (
    "{what} holds {length} {unit}, but max_length={max_length} leaves room for at most "
    "{room} before EOS: shorten the prefix or raise max_length."
)


def prefix_too_long(what, length, max_length, unit="ids"):
    """The message that refuses a prefix (`what`, e.g. "`prefix`") of `length` ids (or
    another `unit`) that leaves no room for EOS within `max_length` tokens.

    >>> prefix_too_long("`prefix`", 14, 14)
    '`prefix` holds 14 ids, but max_length=14 leaves room for at most 13 before EOS: shorten the prefix or raise max_length.'
    """  # noqa: E501
    return _PREFIX_TOO_LONG.format(
        what=what, length=length, unit=unit, max_length=max_length, room=max_length - 1
    )


def check_prefix_fits(prefix, max_length, pad_id):
    """`prefix` (int `[B, P]`, or `()` for none), refused unless each row's ids (before
    its first `pad_id`) are fewer than `max_length`: a result holds the whole prefix
    and EOS (a longer one would be cut, and one as long ends without EOS).

    Where the values are known (eagerly, constants) a ValueError; in a traced graph
    (values unknown, or `max_length` a tensor) `prefix` with an assertion that fails the
    call with an InvalidArgumentError of the same message. XLA drops assertions, so
    inside an XLA-compiled function nothing is added: a caller that compiles the
    search checks before it (`tfblocks.decoding.Decoder.decode` does).
    """
    if not has_prefix(prefix):
        return prefix
    lengths = prefix_lengths(prefix, pad_id)  # [B]
    values, limit = tf.get_static_value(lengths), tf.get_static_value(max_length)
    if values is not None and limit is not None:
        if values.size and values.max() >= limit:
            raise ValueError(prefix_too_long("`prefix`", int(values.max()), int(limit)))
        return prefix
    if in_xla_context():
        return prefix
    longest = tf.reduce_max(tf.concat([lengths, [0]], axis=0))
    limit = tf.cast(max_length, tf.int32)
    template = _PREFIX_TOO_LONG.format(
        what="`prefix`", length="{}", unit="ids", max_length="{}", room="{}"
    )
    message = tf.strings.format(template, (longest, limit, limit - 1))
    with tf.control_dependencies([tf.debugging.Assert(longest < limit, [message])]):
        return tf.identity(prefix)


def forced_tokens(prefix, index, pad_id):
    """`(forcing [B], token [B])` at position `index` for rows that start with `prefix`
    `[B, P]` (ids padded on the right with `pad_id`): whether row b's prefix (its ids
    before its first `pad_id`) reaches `index`, and the id it forces there.

    >>> import tensorflow as tf
    >>> forcing, token = forced_tokens(tf.constant([[5, 6], [7, 0], [0, 0]]), 1, pad_id=0)
    >>> forcing.numpy().tolist(), token.numpy().tolist()
    ([True, False, False], [6, 0, 0])
    """
    lengths = prefix_lengths(prefix, pad_id)  # [B]
    padded = tf.pad(prefix, [[0, 0], [0, 1]], constant_values=pad_id)  # [B, P + 1]
    token = tf.gather(padded, tf.minimum(index, dim(prefix, 1)), axis=1)  # [B]
    return index < lengths, token


def pad_after_eos(ids, index, eos_id, pad_id):
    """`ids` `[B, L]` with `pad_id` after each row's first EOS and from position `index`
    on (the positions a search never wrote, or zero-filled)."""
    after_eos = tf.math.cumsum(tf.cast(ids == eos_id, tf.int32), axis=1, exclusive=True) > 0
    unwritten = tf.range(dim(ids, 1))[None, :] >= index  # [1, L]
    return tf.where(tf.logical_or(after_eos, unwritten), pad_id, ids)


class Pieces:
    """What a search's loop pieces share: the step function, the ids, the length, and
    the number of results per sentence (`hypotheses`: None for one result per sentence,
    `ids [B, L]` and `scores [B]`; or N for the N best, `ids [B, N, L]` and
    `scores [B, N]`, best first).

    A subclass gives `initial(start_ids, state, prefix)` (the prefix `[B, P]` kept in
    the loop state, or `()` when none: `has_prefix`), `step(loop, context)`, `done(loop)` (`[B]`),
    `result(loop)`, `select(loop, context, pick)`, `repeat(nest)` and `size(loop)` (B,
    the sentences in `loop`).
    """

    rows_per_sentence = 1  # rows of the step function per sentence (a beam search: K)

    def __init__(self, step_fn, eos_id, pad_id, length, hypotheses=None):
        self.step_fn = step_fn
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.length = length
        self.hypotheses = hypotheses

    def pad_rows(self, ids, index):
        """`pad_after_eos` of `ids` `[B, L]` or `[B, N, L]`."""
        if ids.shape.rank == 2:
            return pad_after_eos(ids, index, self.eos_id, self.pad_id)
        flat = tf.reshape(ids, [-1, dim(ids, 2)])  # [B·N, L]
        padded = tf.reshape(pad_after_eos(flat, index, self.eos_id, self.pad_id), tf.shape(ids))
        padded.set_shape(ids.shape)  # [B, N, L]
        return padded

    def logits(self, loop, context):
        """`(float32 logits, new state)` of the step function for `loop.last`."""
        if context is None:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state)
        else:
            logits, new_state = self.step_fn(loop.last, loop.index, loop.state, context)
        return tf.cast(logits, tf.float32), new_state


def _check_search_args(max_length, eos_id, pad_id):
    if not tf.is_tensor(max_length):  # a scalar tensor (e.g. from a source's shape) is taken as is
        _checks.check_positive_int("max_length", max_length)
    _checks.check_non_negative_int("eos_id", eos_id)
    _checks.check_non_negative_int("pad_id", pad_id)


def has_prefix(prefix):
    """Whether a loop's `prefix` (see `Pieces`) may force tokens: not `()` (none)."""
    return isinstance(prefix, tf.Tensor)


def _check_prefix(prefix, start_ids):
    """`prefix` as int32 `[B, P]`, or `()` for None or a prefix known to be empty: the
    loops then carry nothing for it (a zero-size tensor in a loop's state is folded
    into a constant that XLA's conversion of the loop cannot find); refused unless 2-D
    integer ids with a row per start id."""
    if prefix is None:
        return ()
    prefix = check_id_rows("prefix", prefix, ("batch", "length"), start_ids)
    if prefix.shape[1] == 0:
        return ()
    return tf.cast(prefix, tf.int32)


def check_id_rows(name, ids, axes, start_ids):
    """`ids` as a tensor of integer ids with the `axes` (names, e.g. `("batch",
    "length")`) and a row per start id (`start_ids` `[B]`), else a ValueError naming it
    (`name`); the rank of a traced tensor of unknown rank is set (the loops need it)."""
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer or ids.shape.rank not in (None, len(axes)):
        raise ValueError(
            f"`{name}` must hold integer token ids [{', '.join(axes)}], got dtype "
            f"{ids.dtype.name} and shape {ids.shape}."
        )
    if ids.shape.rank is None:
        ids = tf.ensure_shape(ids, [None] * len(axes))
    rows = (ids.shape[0], start_ids.shape[0])
    if None not in rows and rows[0] != rows[1]:
        raise ValueError(
            f"`{name}` must hold a row per start id ({rows[1]}), got {name} of shape {ids.shape}."
        )
    return ids


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


class Search:
    """A search over a step function; the base of `Greedy`, `Sampling` and `BeamSearch`.

    Subclasses set their options in `__init__` (checked there, so a bad value fails
    before any tracing) and return them from `get_config`; `_pieces` builds the loop
    (a `Pieces`).

    Attributes:
        rows_per_sentence: rows of the step function per sentence (a beam search: K).
        can_drop_finished: whether `search(drop_finished=True)` keeps the results.
        traced_args: options that may be scalar tensors (fed to a compiled search as
            arguments, so changing them compiles nothing new).

    Example (a search that always picks id 2):

    >>> import tensorflow as tf
    >>> from tfblocks.decoding.greedy import Sequential
    >>> class Lowest(Search):
    ...     def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
    ...         choose = lambda logits, index: tf.fill([tf.shape(logits)[0]], 2)
    ...         return Sequential(step_fn, choose, eos_id, pad_id, length, hypotheses)
    >>> step_fn = lambda ids, index, state: (tf.zeros([1, 5]), state)
    >>> Lowest().search(step_fn, (), tf.constant([3]), max_length=3)[0].numpy().tolist()
    [[2, 2, 2]]
    """

    rows_per_sentence = 1
    can_drop_finished = True
    traced_args = ()
    max_hypotheses = 1  # the most results per sentence it can return (None: any number)

    def get_config(self):
        """The options, as keyword arguments of the constructor."""
        return {}

    def replace(self, **changes):
        """A copy with some options changed."""
        return type(self)(**{**self.get_config(), **changes})

    def key(self):
        """A hashable identity of the options that shape the search's graph."""
        config = self.get_config()
        return (type(self).__name__, *((k, config[k]) for k in config if k not in self.traced_args))

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({options})"

    def check_num_hypotheses(self, num_hypotheses):
        """`num_hypotheses` if this search can return that many results per sentence
        (None: one, unstacked), else a `ValueError` naming it."""
        if num_hypotheses is None:
            return None
        _checks.check_positive_int("num_hypotheses", num_hypotheses)
        if self.max_hypotheses is not None and num_hypotheses > self.max_hypotheses:
            raise ValueError(
                f"`num_hypotheses` must be at most {self.max_hypotheses}, the hypotheses "
                f"{self!r} keeps, got num_hypotheses={num_hypotheses}."
            )
        return int(num_hypotheses)

    def rows(self, num_hypotheses=None):
        """Rows of the step function per sentence for `num_hypotheses` results."""
        return self.rows_per_sentence

    def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
        raise NotImplementedError

    def search(
        self,
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
        num_hypotheses=None,
        prefix=None,
    ):
        """Runs the search.

        Args:
            step_fn: `step_fn(ids [N, 1], index, state) -> (logits [N, V], state)`, with
                `N = B · rows(num_hypotheses)` (sentence b's rows are `b·K … b·K + K − 1`);
                tensors it closes over must be repeated alike. With `context`, it is
                called as `step_fn(ids, index, state, context)`.
            state: the initial nest of `B`-row tensors passed to `step_fn` (repeated
                `rows_per_sentence` times here, and reordered with a beam's survivors).
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
            context: None, or a nest of `B`-row tensors that the step function reads but
                never changes (e.g. the encoder's cross-attention k/v): repeated like
                `state` but never reordered, and passed to `step_fn` as its fourth argument.
            drop_finished: let the sentences whose search has ended leave the batch
                between segments of the loop (`tfblocks.decoding.dropping`); needs
                `context` (tensors closed over by `step_fn` could not shrink). The
                results are the same.
            jit_compile: with `drop_finished`, compile each segment with XLA.
            num_hypotheses: None, or N results per sentence, best first (at most
                `beam_size` for `BeamSearch`, 1 for `Greedy`, any for `Sampling`).
            prefix: None, or int `[B, P]`: the ids each result starts with, padded on
                the right with `pad_id` (a row of padding forces nothing), each row
                shorter than `max_length` (room for EOS; a longer one is refused:
                `check_prefix_fits`). While a row lasts its token is forced: every
                other token is ruled out, and the forced one counts in the score with
                its log-probability. A beam search keeps no other hypothesis of the
                sentence until the row ends.

        Returns:
            `(ids [B, max_length], scores [B])`: ids end with `eos_id` (unless
            `max_length` ran out) and are `pad_id` after it; the scores are the
            search's (see the subclass). With `num_hypotheses=N`,
            `(ids [B, N, max_length], scores [B, N])`.
        """
        _check_search_args(max_length, eos_id, pad_id)
        hypotheses = self.check_num_hypotheses(num_hypotheses)
        cache_lengths = _check_growth(cache_lengths, grow_state, max_length)
        _check_dropping(drop_finished, context, jit_compile)
        if drop_finished and not self.can_drop_finished:
            raise ValueError(
                f"{type(self).__name__} cannot drop finished sentences (a sentence's result "
                "would depend on its batch mates), got drop_finished=True."
            )
        start_ids = tf.cast(start_ids, tf.int32)
        prefix = check_prefix_fits(_check_prefix(prefix, start_ids), max_length, pad_id)
        pieces = self._pieces(step_fn, eos_id, pad_id, max_length, hypotheses)
        initial = pieces.initial(start_ids, state, prefix)
        context = None if context is None else pieces.repeat(context)
        if drop_finished:
            return run_dropping(pieces, initial, context, cache_lengths, grow_state, jit_compile)

        def cond(loop):
            going = tf.logical_not(tf.reduce_all(pieces.done(loop)))
            return tf.logical_and(loop.index < max_length, going)

        def body(loop):
            return (pieces.step(loop, context),)

        return pieces.result(_while(cond, body, initial, cache_lengths, grow_state))


def check_search(search, vocab_size=None):
    """`search` if it is a `Search` that fits a vocabulary of `vocab_size`
    tokens (a `Sampling` top-k of at most that many), else a `ValueError` naming it."""
    if not isinstance(search, Search):
        raise ValueError(
            "`search` must be a tfblocks.decoding.Search (Greedy(), "
            f"Sampling(...), BeamSearch(...)), got search={search!r}."
        )
    top_k = getattr(search, "top_k", 0)
    if vocab_size is not None and top_k > vocab_size:
        raise ValueError(
            f"`search` samples among its top_k={top_k} tokens but the model's vocabulary "
            f"has only {vocab_size}: search={search!r}."
        )
    return search
