"""Search strategies over a step function: greedy, sampling (temperature, top-k, top-p)
and t2t beam search.

A strategy knows nothing of the model. `strategy.search(step_fn, state, start_ids,
max_length, ...)` drives a `step_fn(ids, index, state) -> (logits, state)`: given the
`[N, 1]` int32 ids of position `index` and an opaque nest of tensors `state` (e.g. a K/V
cache), it returns float32 logits `[N, vocab]` for the next position and the updated
state. The loops are `tf.while_loop`s over static shapes, so they compile with XLA; their
loop state is a named tuple. With `cache_lengths` a search runs one loop per cache length
and grows the step function's caches in between (`grow_state`). With `drop_finished`,
greedy and beam search let the sentences whose search has ended leave the batch
(`tfblocks.decoding.dropping`). `tfblocks.decoding.Decoder` builds the step function of a
`tfblocks.Transformer` and runs any strategy with `Decoder.decode(strategy, ...)`.

With `num_hypotheses=N` a search returns N results per sentence, best first: beam
search's N best hypotheses, or N samples (`ids [B, N, L]`, `scores [B, N]`).

A new strategy subclasses `SearchStrategy`: its constructor checks its options, and
`_pieces` returns the loop's pieces (`initial`, `step`, `done`, `result`, `select`,
`repeat`, `size`), as `_Sequential` and `_Beam` do.

Hand-written because no library searches with t2t's semantics over an encoder–decoder
cache: keras-hub's samplers drive a decoder-only cache callback and have no t2t length
penalty or 2·beam candidate set. `BeamSearch` follows t2t `beam_search.py`: each step
keeps the 2·beam best extensions, the `beam` best non-EOS ones stay alive, EOS-ended ones
compete for `beam` finished slots with score `log p / ((5 + length) / 6) ** alpha`; when
no hypothesis finished, the best live one is returned with its raw log-probability (as
t2t does). Departure: t2t stops when the *worst* finished score beats the best a live
beam can reach; here the search stops when the *best* finished score does, which cannot
change the returned (top) hypothesis and saves steps (for N hypotheses, once N have
finished too).
`BeamSearch(stop_early=True)` replaces that test by fairseq's and CTranslate2's rule: a
sentence's search ends as soon as `beam_size` hypotheses have finished.
"""

import tensorflow as tf

from tfblocks import _checks
from tfblocks.decoding.dropping import run_dropping
from tfblocks.decoding.steps import NEG_INF, _Beam, _filter_top_p, _Sequential
from tfblocks.ids import EOS_ID, PAD_ID


def _check_search_args(max_length, eos_id, pad_id):
    if not tf.is_tensor(max_length):  # a scalar tensor (e.g. from a source's shape) is taken as is
        _checks.check_positive_int("max_length", max_length)
    _checks.check_non_negative_int("eos_id", eos_id)
    _checks.check_non_negative_int("pad_id", pad_id)


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


class SearchStrategy:
    """A search over a step function; the base of `Greedy`, `Sampling` and `BeamSearch`.

    Subclasses set their options in `__init__` (checked there, so a bad value fails
    before any tracing) and return them from `get_config`; `_pieces` builds the loop.

    Attributes:
        rows_per_sentence: rows of the step function per sentence (a beam search: K).
        can_drop_finished: whether `search(drop_finished=True)` keeps the results.
        traced_args: options that may be scalar tensors (fed to a compiled search as
            arguments, so changing them compiles nothing new).
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
        """`num_hypotheses` if this strategy can return that many results per sentence
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

        Returns:
            `(ids [B, max_length], scores [B])`: ids end with `eos_id` (unless
            `max_length` ran out) and are `pad_id` after it; the scores are the
            strategy's (see the subclass). With `num_hypotheses=N`,
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
        pieces = self._pieces(step_fn, eos_id, pad_id, max_length, hypotheses)
        initial = pieces.initial(tf.cast(start_ids, tf.int32), state)
        context = None if context is None else pieces.repeat(context)
        if drop_finished:
            return run_dropping(pieces, initial, context, cache_lengths, grow_state, jit_compile)

        def cond(loop):
            going = tf.logical_not(tf.reduce_all(pieces.done(loop)))
            return tf.logical_and(loop.index < max_length, going)

        def body(loop):
            return (pieces.step(loop, context),)

        return pieces.result(_while(cond, body, initial, cache_lengths, grow_state))


def check_strategy(strategy, vocab_size=None):
    """`strategy` if it is a `SearchStrategy` that fits a vocabulary of `vocab_size`
    tokens (a `Sampling` top-k of at most that many), else a `ValueError` naming it."""
    if not isinstance(strategy, SearchStrategy):
        raise ValueError(
            "`strategy` must be a tfblocks.decoding.SearchStrategy (Greedy(), "
            f"Sampling(...), BeamSearch(...)), got strategy={strategy!r}."
        )
    top_k = getattr(strategy, "top_k", 0)
    if vocab_size is not None and top_k > vocab_size:
        raise ValueError(
            f"`strategy` samples among its top_k={top_k} tokens but the model's vocabulary "
            f"has only {vocab_size}: strategy={strategy!r}."
        )
    return strategy


def beam_or_greedy(beam_size, alpha=0.6, stop_early=False):
    """The strategy a beam width names (the command-line tools' `--beam-size`):
    `Greedy()` for 1, else `BeamSearch(beam_size, alpha, stop_early)`.

    >>> beam_or_greedy(1), beam_or_greedy(4)
    (Greedy(), BeamSearch(beam_size=4, alpha=0.6, stop_early=False))
    """
    _checks.check_bool("stop_early", stop_early)
    if _checks.check_positive_int("beam_size", beam_size) == 1:
        return Greedy()
    return BeamSearch(beam_size, alpha, stop_early)


class Greedy(SearchStrategy):
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

        return _Sequential(step_fn, choose, eos_id, pad_id, length, hypotheses)


class Sampling(SearchStrategy):
    """Sampling from `softmax(logits / temperature)`, optionally top-k and/or top-p.

    The score is the sum of the chosen tokens' log-probabilities under the unmodified
    model. With `num_hypotheses=N` each sentence gets N independent samples (not
    necessarily different), sorted by score. A sampled sentence never leaves the batch
    early (`can_drop_finished` is False): its draws depend on its row.

    Args:
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: when > 0, sample among the `top_k` most likely tokens only.
        top_p: in (0, 1]; when < 1, sample among the smallest set of most likely
            tokens whose probability reaches `top_p` (nucleus sampling).
        seed: int or scalar int tensor; the same seed gives the same samples.

    Example:

    >>> import tensorflow as tf
    >>> def step_fn(ids, index, state):
    ...     return tf.one_hot((ids[:, 0] + 1) % 5, 5) * 50.0, state
    >>> ids, _ = Sampling(top_p=0.9).search(step_fn, (), tf.constant([2]), 4, eos_id=0)
    >>> ids.numpy().tolist()
    [[3, 4, 0, 0]]
    """

    can_drop_finished = False
    traced_args = ("seed",)
    max_hypotheses = None

    def __init__(self, temperature=1.0, top_k=0, top_p=1.0, seed=0):
        _checks.check_positive_float("temperature", temperature)
        _checks.check_non_negative_int("top_k", top_k)
        if not _checks.is_finite_real(top_p) or not 0 < top_p <= 1:
            raise ValueError(f"`top_p` must be a number in (0, 1], got top_p={top_p!r}.")
        if not tf.is_tensor(seed) and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an int or a scalar int tensor, got seed={seed!r}.")
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.seed = seed

    def get_config(self):
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
        }

    def rows(self, num_hypotheses=None):
        return num_hypotheses or 1  # one row per sample

    def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
        seed = tf.cast(self.seed, tf.int32)

        def choose(logits, index):
            logits = logits / self.temperature
            if self.top_k:
                kth = tf.math.top_k(logits, k=self.top_k).values[:, -1:]  # [B, 1]
                logits = tf.where(logits < kth, NEG_INF, logits)
            if self.top_p < 1:
                logits = _filter_top_p(logits, self.top_p)
            draw = tf.random.stateless_categorical(
                logits, 1, seed=tf.stack([seed, index]), dtype=tf.int32
            )
            return draw[:, 0]

        return _Sequential(step_fn, choose, eos_id, pad_id, length, hypotheses)


class BeamSearch(SearchStrategy):
    """t2t beam search (see the module docstring).

    The score of a sentence is the best finished hypothesis' length-penalized
    `log p / ((5 + length) / 6) ** alpha` (length: the tokens generated, EOS included;
    with `alpha=0` the log-probability itself), or, where none finished, the best live
    one's raw log-probability. With `num_hypotheses=N` (at most K) the N best come
    back: the finished hypotheses by score, then, where fewer than N finished before
    `max_length`, the best live ones with their raw log-probabilities.

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
