"""`Decoder`: the step function of a `tfblocks.Transformer`, and `decode(search)`.

Incremental decoding as t2t `fast_decode` does it: the encoder runs once, each
decoder block's cross-attention k/v are computed once from its output, and every
step runs the decoder on one new position through `Transformer.decode(cache=...)`,
appending its k/v to a self-attention cache. The caches start at 16 positions and
grow (16, 32, 64, … up to `max_length`: `cache_lengths`) between loops of static
shapes, so the search compiles with XLA, and a batch of short outputs never attends
over, or reorders (beam search), caches sized for `max_length`. Beam search over
source sentences drops each sentence from the batch once its search has ended
(`drop_finished`; greedy search too), so a batch costs about what its sentences cost
searched one by one. Only the model's public methods are used (`encode`, `init_cache`,
`decode`, `logits`); the searches (`tfblocks.decoding.greedy`, `sampling`,
`beam_search`) know nothing of the model.

`Decoder.score` is the other way round: the log-probability of given targets, by
teacher forcing (one forward pass of the whole target, no search). It and the searches'
step apply the same rule to the logits (`allowed_logits`: PAD and BOS are never
generated), so a beam's score is the sum of `score`'s values over its hypothesis (with
`alpha=0`; divided by the length penalty otherwise).

A decoder-only language model decodes from a `prefix` (the prompt's ids), and an
encoder–decoder model may get one too (a target prefix: each translation starts with
it): the search forces the row's tokens (`Search.search(prefix=...)`), then
goes on freely. Forced tokens count with their log-probabilities, so a result's score
is `score`'s of its ids (length-penalized by beam search), and a beam search keeps no
other hypothesis of a sentence while its prefix lasts. A model that is always given its
first token (M2M-100 / NLLB's target language token: `Decoder(forced_first=True)`) counts
that token's log-probability 0, in the searches and in `score` alike, as Hugging Face's
`forced_bos_token_id` does: the token was never the model's choice.
"""

import numpy as np
import tensorflow as tf

from tfblocks import _backend, _checks
from tfblocks.decoding.base import NEG_INF, check_prefix_fits, check_search
from tfblocks.decoding.constrained import ConstrainedBeamSearch, check_phrases
from tfblocks.decoding.controls import LIMIT_KEY, check_controls
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID
from tfblocks.models.transformer import padding_mask, shift_right


class Decoder:
    """Decoding of a `tfblocks.Transformer` with any search.

    Args:
        model: a trained `Transformer` (from `build_transformer` /
            `build_language_model`, or reloaded from `.keras`), or a
            `tfblocks.Ensemble` of them.
        max_length: the most tokens to generate (EOS included; for a language
            model, prompt included).
        jit_compile: compile each search with XLA. When False, a search called
            inside a `tf.function` is traced into that caller's graph, and one
            called eagerly runs as a plain `tf.function`.
        cache_lengths: the sizes the self-attention caches grow through: `"auto"`
            (16, 32, 64, … then `max_length`), increasing ints (`max_length` is
            appended when missing), or None for one cache of `max_length` (one loop;
            a little less to compile, slower when outputs are much shorter than
            `max_length`). The results do not depend on it.
        drop_finished: in greedy and beam search over source sentences, a sentence
            whose search has ended leaves the batch (`tfblocks.decoding.dropping`):
            the search runs in segments (each its own XLA program with `jit_compile`),
            and the batch shrinks between them; the loop around them is not compiled.
            False runs one search over the whole batch. The results do not depend on it.
        forced_first: the first token of every `decode`'s (required) `prefix` is given,
            not chosen (NLLB's target language token): it counts 0 in every score.
        controls: a `tfblocks.decoding.Controls` that every search's steps apply; None: none.

    Example:

    >>> import numpy as np
    >>> import tfblocks
    >>> from tfblocks.decoding import BeamSearch, Greedy
    >>> model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=30))
    >>> decoder = Decoder(model, max_length=6)
    >>> source = np.array([[5, 6, 7, 1]], "int32")
    >>> ids, scores = decoder.decode(Greedy(), source)
    >>> tuple(ids.shape), tuple(scores.shape)
    ((1, 6), (1,))
    >>> ids, scores = decoder.decode(BeamSearch(beam_size=2), source)
    >>> tuple(ids.shape)
    (1, 6)
    """

    def __init__(self, model, max_length, jit_compile=True, cache_lengths="auto",
                 drop_finished=True, forced_first=False, controls=None):  # fmt: skip
        _backend.require_tensorflow("Decoder")
        self.controls = check_controls(controls, model.has_input)
        self.model = model
        self.max_length = _checks.check_positive_int("max_length", max_length)
        self.jit_compile = bool(jit_compile)
        self.cache_lengths = _cache_lengths(cache_lengths, self.max_length)
        self.drop_finished = _checks.check_bool("drop_finished", drop_finished)
        self.forced_first = _checks.check_bool("forced_first", forced_first)
        self._functions = {}

    # The step function ---------------------------------------------------------------------

    def decode_length(self, source_ids=None, extra_length=None):
        """The most tokens a search generates for `source_ids` `[B, S]`.

        `max_length`, or with `extra_length` t2t's `S + extra_length` (S the padded
        source length, as t2t's `decode_length` counts it) when that is smaller: a
        scalar int32 tensor that depends only on the source's shape, so an
        XLA-compiled search still has static shapes (one program per S).
        """
        if extra_length is None or source_ids is None:
            return self.max_length
        _checks.check_non_negative_int("extra_length", extra_length)
        return tf.minimum(self.max_length, tf.shape(source_ids)[1] + extra_length)

    def step_function(self, source_ids=None, prefix=None, repeat=1, max_length=None):
        """`(step_fn, state)` for a search's `search` (`tfblocks.decoding.Search`).

        Args:
            source_ids: int `[B, S]` (encoder–decoder models).
            prefix: int `[B, P]`, a decoder-only model's prompt (its batch size; the
                step function does not force it: the search does, given `prefix`).
            repeat: rows per sentence that `step_fn` will see (the beam size); the
                encoder's cross-attention k/v are repeated to match,
                while `state` stays at `B` rows (`beam_search` repeats it).
            max_length: the self-attention caches' initial length (default: the
                first of `cache_lengths`, or `self.max_length` without growth).

        Returns:
            `step_fn(ids, index, state) -> (logits [N, V], state)` with PAD and BOS
            never generated, and the initial state (self-attention caches).
        """
        state, context = self.initial_state(source_ids, prefix, max_length)
        context = tf.nest.map_structure(lambda x: tf.repeat(x, repeat, axis=0), context)

        def step_fn(ids, index, state):
            return self.step(ids, index, state, context)

        return step_fn, state

    def initial_state(self, source_ids=None, prefix=None, max_length=None):
        """`(state, context)` of `B` rows: the self-attention caches (zeros of
        `max_length` positions, as `step_function`) and the step's fixed inputs
        (`{"cross": per-block cross-attention k/v, "source_mask": [B, S]}`; empty
        for a decoder-only model, whose batch size `prefix` gives)."""
        model = self.model
        encoder_output = None
        context = {}
        if model.has_input:
            if source_ids is None:
                raise ValueError("An encoder–decoder model needs `source_ids`, got None.")
            source_ids = tf.cast(source_ids, tf.int32)
            batch = tf.shape(source_ids)[0]
            encoder_output = model.encode(source_ids, training=False)
            context["source_mask"] = padding_mask(source_ids)  # [B, S]
        elif source_ids is not None:
            raise ValueError(
                "A decoder-only language model takes no `source_ids`; pass the prompt as `prefix`."
            )
        elif prefix is None:
            raise ValueError("A decoder-only language model needs a `prefix` (the prompt ids).")
        else:
            batch = tf.shape(prefix)[0]
        if max_length is None:
            max_length = self.max_length if self.cache_lengths is None else self.cache_lengths[0]
        caches = model.init_cache(batch, max_length, encoder_output)
        if model.has_input:
            context["cross"] = [cache["cross"] for cache in caches]
        if self.forced_first and prefix is not None:
            context["forced_first"] = tf.cast(prefix, tf.int32)[:, 0]  # [B]
        context.update(self.controls.context(source_ids))  # each sentence's length limit
        return self.controls.with_history([c["self"] for c in caches], batch, max_length), context

    def step(self, ids, index, state, context):
        """One decoding step: `(logits [N, V], state)` for the ids `[N, 1]` of
        position `index`, PAD and BOS masked, and the `controls` applied."""
        forced = context.get("forced_first")  # the first step: the forced token only, at 0
        state, history = self.controls.split(state, index, ids)  # history: None unless read
        logits, new_state = self._model_step(ids, index, state, _model_context(context))
        logits = self.controls.apply(allowed_logits(logits), index, context.get(LIMIT_KEY), history)
        new_state = new_state if history is None else [*new_state, history]
        return logits if forced is None else _forced_first(logits, index, forced), new_state

    def _model_step(self, ids, index, state, context):
        """The model's part of `step`: `(logits [N, V], new state)`.

        With `jit_compile`, one `tf.function` traced once per Decoder (and argument
        structure) for any shapes (only the ranks are in its signature), and called
        from every search loop, whichever search runs first: a search runs one loop
        per cache length and batch size, each of which would otherwise trace the
        whole decoder again. XLA inlines the call and compiles it with the loop's
        static shapes; the outputs get the static shapes of the inputs back. Without
        XLA the step is traced into each loop instead: there a function call with
        unknown shapes costs time at every step.
        """
        if not self.jit_compile:
            return self._model_step_graph(ids, index, state, context)
        ids = tf.convert_to_tensor(ids)
        index = tf.convert_to_tensor(index)
        args = (ids, index, state, context)
        # Only ranks: a drop-finished search's segments see no static shapes at all,
        # and a trace for more specific shapes could not serve them.
        specs = tf.nest.map_structure(_rank_only, args)
        function = self._function("model_step", self._model_step_graph, jit_compile=None)
        logits, new_state = function.get_concrete_function(*specs)(*args)
        logits.set_shape([ids.shape[0], logits.shape[-1]])
        tf.nest.map_structure(
            lambda new, old: new.set_shape(old.shape), new_state, state, check_types=False
        )
        return logits, new_state

    def _model_step_graph(self, ids, index, state, context):
        cross = context.get("cross", [None] * len(state))
        cache = [
            {"self": s} if c is None else {"self": s, "cross": c}
            for s, c in zip(state, cross, strict=True)
        ]
        hidden, cache = self.model.decode(
            ids, source_mask=context.get("source_mask"), cache=cache, index=index, training=False
        )
        logits = self.model.logits(hidden)[:, 0]  # [N, V], float32
        return logits, [c["self"] for c in cache]

    # The one entry: any search ----------------------------------------------------

    def decode(
        self,
        search,
        source_ids=None,
        prefix=None,
        extra_length=None,
        num_hypotheses=None,
        constraints=None,
    ):
        """Decodes with `search` (a `tfblocks.decoding.Search`).

        Args:
            search: e.g. `Greedy()`, `Sampling(temperature=0.8, seed=1)`,
                `BeamSearch(beam_size=4, alpha=0.6)`.
            source_ids: int `[B, S]`, EOS-terminated and 0-padded (encoder–decoder).
            prefix: int `[B, P]` ids each result starts with, 0-padded on the right:
                a language model's prompt (required), or an encoder–decoder's target
                prefix (optional; a row of PAD alone forces nothing); each row shorter
                than L below (room for EOS), else refused (`check_prefix_fits`). Forced
                tokens count in the scores with their log-probabilities (a result's score
                is `score`'s of its ids, length-penalized by beam search).
            extra_length: None, or t2t's `extra_length` (see `decode_length`).
            num_hypotheses: None, or N results per sentence, best first: a beam
                search's N best (N at most its `beam_size`) or N samples.
            constraints: None, or int `[B, C, T]` target phrases each finished result
                holds, each 0-padded on the right (a row of PAD constrains nothing), for
                a `ConstrainedBeamSearch` (`tfblocks.decoding.constrained`).

        Returns:
            `(ids [B, L], scores [B])`, L = `decode_length(source_ids, extra_length)`:
            ids end with EOS (unless L ran out) and are PAD after it; the scores are
            the search's. With `num_hypotheses=N`: `(ids [B, N, L], scores [B, N])`.

        Raises:
            ValueError: a `prefix` row of L ids or more (in a traced function: an
                InvalidArgumentError with the same message when the call runs);
                `constraints` without a `ConstrainedBeamSearch`, or not 3-D integer
                ids, or a phrase that cannot fit after its prefix; `source_ids` or
                `prefix` is not a 2-D tensor of an integer dtype (a float id is
                refused, never truncated), or, where its values are known (eagerly, or
                a constant), holds an id outside `[0, vocab_size)`. Inside a traced
                function (a `tf.function`, a SavedModel's signature) the values are not
                known, so only the dtype and rank are checked: there an id out of range
                is not refused (an XLA-compiled gather clamps it to the nearest valid
                id), and the ids must be right when they enter the graph (as
                `Translator`'s are: its tokenizer's vocabulary fits the model's).
        """
        check_search(search, self.model.vocab_size)
        num_hypotheses = search.check_num_hypotheses(num_hypotheses)
        source_ids = _check_ids("source_ids", source_ids, self.model.vocab_size)
        prefix = _check_ids("prefix", prefix, self.model.vocab_size)
        _check_forced_first(self.forced_first, prefix)
        if extra_length is not None:
            _checks.check_non_negative_int("extra_length", extra_length)
        # Here, not only in the search: an XLA-compiled search would drop the assertion.
        prefix = check_prefix_fits(prefix, self.decode_length(source_ids, extra_length), PAD_ID)
        constraints = _check_constraints(
            constraints,
            search,
            self.model.vocab_size,
            self._static_length(source_ids, extra_length),
            prefix,
        )
        traced = tuple(getattr(search, name) for name in search.traced_args)

        def run(source_ids, prefix, constraints, *traced):
            chosen = search.replace(**dict(zip(search.traced_args, traced, strict=True)))
            length = self.decode_length(source_ids, extra_length)
            step_fn, state = self.step_function(
                source_ids,
                prefix,
                repeat=chosen.rows(num_hypotheses),
                max_length=self._cache(length),
            )
            start = _start_ids(source_ids, prefix)
            return chosen.search(
                step_fn, state, start, length, EOS_ID, PAD_ID, **self._growth(),
                num_hypotheses=num_hypotheses, prefix=prefix, **_phrases(constraints),
            )  # fmt: skip

        def dropping(state, context, length, start, prefix, constraints):
            return search.search(
                self.step, state, start, length, EOS_ID, PAD_ID, **self._growth(),
                context=context, drop_finished=True, jit_compile=self.jit_compile,
                num_hypotheses=num_hypotheses, prefix=prefix, **_phrases(constraints),
            )  # fmt: skip

        key = (search.key(), extra_length, num_hypotheses)
        if self.drop_finished and source_ids is not None and search.can_drop_finished:
            return self._dropping(key, run, dropping, source_ids, prefix, constraints, extra_length)
        return self._run(key, run, source_ids, prefix, constraints, *traced)

    def _static_length(self, source_ids, extra_length):
        """`decode_length` as an int where the source's shape gives it, else None."""
        if extra_length is None or source_ids is None:
            return self.max_length
        width = source_ids.shape[1]
        return None if width is None else min(self.max_length, width + extra_length)

    def score(self, source_ids, target_ids):
        """Log-probabilities `[B, T]` of each target token given its source and the
        target tokens before it, by teacher forcing (encoder–decoder models).

        One forward pass over the whole target (no cache, no search), with the rule the
        searches' steps apply to the logits (`allowed_logits`), so the sum of a row is
        the log-probability a search gives that sequence (a beam search's score with
        `alpha=0`).

        Args:
            source_ids: int `[B, S]`, EOS-terminated and 0-padded.
            target_ids: int `[B, T]`, each row a target's ids and its EOS, 0-padded
                (what `decode` returns).

        Returns:
            float32 `[B, T]`: `log p(target_ids[b, t] | source, target_ids[b, :t])`, and 0
            at padding; `tf.reduce_sum(..., axis=1)` is each target's log-probability.

        Raises:
            ValueError: for a decoder-only model, ids as `decode` refuses them, or
                batches of different sizes.

        Example:

        >>> import numpy as np
        >>> import tfblocks
        >>> model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny",
        ...                                                     vocab_size=30))
        >>> log_probs = Decoder(model, max_length=6).score(
        ...     np.array([[5, 6, 1]], "int32"), np.array([[7, 8, 1, 0]], "int32"))
        >>> log_probs.shape, float(log_probs[0, 3])
        (TensorShape([1, 4]), 0.0)
        """
        if not self.model.has_input:
            raise ValueError(
                f"`score` needs an encoder–decoder model; '{self.model.name}' is a "
                "decoder-only language model."
            )
        source_ids = _check_ids("source_ids", source_ids, self.model.vocab_size)
        target_ids = _check_ids("target_ids", target_ids, self.model.vocab_size)
        rows = (source_ids.shape[0], target_ids.shape[0])
        if None not in rows and rows[0] != rows[1]:
            raise ValueError(
                "`source_ids` and `target_ids` must hold as many rows, got "
                f"{rows[0]} and {rows[1]}."
            )
        return self._run(("score",), self._score_graph, source_ids, target_ids)

    def _score_graph(self, source_ids, target_ids):
        model = self.model
        encoder_output = model.encode(source_ids, training=False)  # [B, S, d]
        hidden = model.decode(
            shift_right(target_ids), encoder_output, padding_mask(source_ids), training=False
        )  # [B, T, d]
        logits = allowed_logits(model.logits(hidden))  # [B, T, V]
        chosen = tf.gather(logits, target_ids, batch_dims=2)  # [B, T]
        log_probs = chosen - tf.reduce_logsumexp(logits, axis=-1)  # [B, T]
        given = tf.not_equal(target_ids, PAD_ID)
        if self.forced_first:  # the first token was given, not chosen: 0, as in `decode`
            given = tf.logical_and(given, tf.range(tf.shape(target_ids)[1])[None] > 0)
        return tf.where(given, log_probs, 0.0)

    def _dropping(self, key, run, searcher, source_ids, prefix, constraints, extra_length):
        """A search over `source_ids` (and a target `prefix` and `constraints`, or None)
        whose finished sentences leave the batch: `searcher(state, context, length,
        start_ids, prefix, constraints)` after the encoder and the initial state (compiled
        apart: the search's own loop is not; the prefix and the phrases are in its loop
        state, which shrinks with the batch), or, for one sentence (nothing can leave
        early), the one compiled loop `run(source_ids, prefix, constraints)` (with XLA)."""

        def initial(source_ids, prefix):
            length = self.decode_length(source_ids, extra_length)
            return self.initial_state(source_ids, prefix, max_length=self._cache(length))

        def dropping(source_ids, prefix, constraints):
            prepare = self._function(("initial", extra_length), initial, self.jit_compile)
            state, context = prepare(source_ids, prefix)
            length = self.decode_length(source_ids, extra_length)
            start = _start_ids(source_ids, None)
            return searcher(state, context, length, start, prefix, constraints)

        def one_or_many(source_ids, prefix, constraints):
            if not self.jit_compile:  # one graph: one sentence leaves the batch as well
                return dropping(source_ids, prefix, constraints)
            return tf.cond(
                tf.shape(source_ids)[0] > 1,
                lambda: dropping(source_ids, prefix, constraints),
                lambda: self._run(key, run, source_ids, prefix, constraints),
            )

        return self._run(
            (*key, "dropping"), one_or_many, source_ids, prefix, constraints, jit_compile=False
        )

    def _cache(self, length):
        """The initial cache length for a search of at most `length` tokens."""
        return length if self.cache_lengths is None else self.cache_lengths[0]

    def _growth(self):
        """The searches' `cache_lengths` / `grow_state` arguments."""
        if self.cache_lengths is None:
            return {}
        return {"cache_lengths": self.cache_lengths, "grow_state": grow_caches}

    def _run(self, key, fn, *args, jit_compile=None):
        """`fn(*args)` (int32 tensors), compiled with XLA as `jit_compile` (default:
        the decoder's) in a `tf.function` kept under `key`, or traced into the
        caller's graph when not compiled and called inside a function."""
        jit_compile = self.jit_compile if jit_compile is None else jit_compile
        args = tuple(None if a is None else tf.convert_to_tensor(a) for a in args)
        args = tuple(
            tf.cast(a, tf.int32) if a is not None and a.dtype != tf.int32 else a for a in args
        )
        if not jit_compile and tf.inside_function():
            return fn(*args)  # traced into the caller's graph
        return self._function(key, fn, jit_compile)(*args)

    def _function(self, key, fn, jit_compile):
        """The `tf.function` of `fn` kept under `key` (created on first use)."""
        if key not in self._functions:
            self._functions[key] = tf.function(fn, jit_compile=jit_compile, autograph=False)
        return self._functions[key]


FIRST_CACHE_LENGTH = 16


def allowed_logits(logits):
    """`logits` `[..., V]` with PAD and BOS at `NEG_INF`: tokens decoding never generates
    (the one rule of the searches' steps and of `Decoder.score`)."""
    never = tf.reduce_sum(tf.one_hot([PAD_ID, BOS_ID], tf.shape(logits)[-1]), axis=0) > 0  # [V]
    return tf.where(never, NEG_INF, logits)


def _check_forced_first(forced_first, prefix):
    """Refuses (ValueError) a `decode` of a `Decoder(forced_first=True)` without a prefix."""
    if forced_first and (prefix is None or prefix.shape[1] == 0):
        raise ValueError(
            "A Decoder(forced_first=True) decodes from a `prefix` whose first column is "
            f"the forced token (e.g. NLLB's target language token), got prefix={prefix!r}."
        )


def _model_context(context):
    """A step's `context` without `forced_first` and the controls' limits (the model's
    step reads neither)."""
    return {key: value for key, value in context.items() if key not in ("forced_first", LIMIT_KEY)}


def _forced_first(logits, index, forced):
    """`logits` `[N, V]` of step `index`, where that is the first step: 0 at each row's
    `forced` `[N]` id and `NEG_INF` elsewhere, so the forced token's log-probability is 0
    (`Decoder(forced_first=True)`)."""

    def only():  # [N, V]: built at the first step only (a [N, V] select per step otherwise)
        ids = tf.range(tf.shape(logits)[-1])[None, :]
        return tf.where(tf.equal(ids, tf.cast(forced, tf.int32)[:, None]), 0.0, NEG_INF)

    return tf.cond(tf.equal(index, 0), lambda: tf.cast(only(), logits.dtype), lambda: logits)


def _check_ids(name, ids, vocab_size, rank=2):
    """`ids` as a tensor, refused (ValueError naming `name` and the value) unless it is a
    `rank`-D integer tensor whose known values lie in `[0, vocab_size)`; None stays None."""
    if ids is None:
        return None
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise ValueError(
            f"`{name}` must hold integer token ids, got dtype {ids.dtype.name}: "
            f"{name}={_preview(tf.get_static_value(ids), ids)}."
        )
    if ids.shape.rank not in (None, rank):
        axes = "[batch, length]" if rank == 2 else "[batch, phrases, length]"
        raise ValueError(f"`{name}` must be {rank}-D {axes}, got {name} of shape {ids.shape}.")
    values = tf.get_static_value(ids)  # None in a traced function: not known yet
    if values is not None:
        bad = np.argwhere((values < 0) | (values >= vocab_size))
        if len(bad):
            where = tuple(int(i) for i in bad[0])
            raise ValueError(
                f"`{name}` must hold ids in [0, {vocab_size}) (the model's vocab_size), got "
                f"{name}[{', '.join(map(str, where))}]={values[where].item()!r}."
            )
    return ids


def _check_constraints(constraints, search, vocab_size, max_length, prefix=None):
    """`constraints` as a tensor (None stays None), refused (ValueError) unless `search`
    is a `ConstrainedBeamSearch` and they are 3-D integer ids whose known values lie in
    `[0, vocab_size)` and make phrases that fit in `max_length` (an int, or a tensor:
    not checked) with EOS, after their sentence's `prefix` where its values are known
    (`check_phrases`). The search checks the phrases again when their values are known
    there (not inside the decoder's compiled function)."""
    if constraints is None:
        return None
    if not isinstance(search, ConstrainedBeamSearch):
        raise ValueError(
            f"`constraints` need a tfblocks.decoding.ConstrainedBeamSearch, got search={search!r}."
        )
    constraints = _check_ids("constraints", constraints, vocab_size, rank=3)
    values = tf.get_static_value(constraints)
    if values is not None:
        prefix = None if prefix is None else tf.get_static_value(prefix)
        check_phrases(values, max_length, EOS_ID, PAD_ID, prefix)
    return constraints


def _phrases(constraints):
    """The `constraints=` keyword of a search call (none without constraints, so that
    the other searches, which take none, can be called alike)."""
    return {} if constraints is None else {"constraints": constraints}


def _preview(values, tensor):
    """A short text of a tensor's value for an error message (its shape when unknown)."""
    if values is None:
        return f"<a tensor of shape {tensor.shape}>"
    text = np.array2string(np.asarray(values), threshold=8, separator=", ")
    return text if len(text) <= 80 else text[:77] + "..."


def _rank_only(x):
    """The `tf.TensorSpec` of `x` with every dimension unknown."""
    x = tf.convert_to_tensor(x)
    return tf.TensorSpec([None] * x.shape.rank, x.dtype)


def _cache_lengths(cache_lengths, max_length):
    """`Decoder(cache_lengths=...)` as a tuple ending with `max_length`, or None."""
    return _checks.length_ladder("cache_lengths", cache_lengths, max_length, FIRST_CACHE_LENGTH)


def grow_caches(state, length):
    """Pads every self-attention cache `[N, H, L, d]` of `state` to `length` positions."""

    def pad(x):
        old = x.shape[2] if x.shape[2] is not None else tf.shape(x)[2]
        return tf.pad(x, [[0, 0], [0, 0], [0, length - old], [0, 0]])

    return tf.nest.map_structure(pad, state)


def _start_ids(source_ids, prefix):
    batch = tf.shape(source_ids if source_ids is not None else prefix)[0]
    return tf.fill([batch], BOS_ID)
