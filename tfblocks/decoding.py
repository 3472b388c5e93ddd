"""Fast decoding over a K/V cache: greedy, sampling and beam search (t2t `fast_decode`).

The encoder runs once; each decoder layer's cross-attention k/v are computed once
from its output; every step then runs the decoder on one new position, appending its
k/v to a cache preallocated to `max_length` (static shapes, so the whole loop is a
`tf.while_loop` that compiles with XLA and would run on a TPU).

Hand-written because no library decodes with t2t's semantics over an
encoder–decoder cache: keras-hub's samplers drive a decoder-only cache callback and
have no t2t length penalty or 2·beam candidate set. Beam search follows t2t
`beam_search.py`: each step keeps the 2·beam best extensions, the `beam` best
non-EOS ones stay alive, EOS-ended ones compete for `beam` finished slots with score
`log p / ((5 + length) / 6) ** alpha`, and the search stops as soon as no live beam
can still beat the best finished one (live log-probabilities only fall).

Departure from t2t: PAD and BOS are never generated (their logits are masked), so
the padding mask of the decoder inputs can never hide a generated token.
"""

import tensorflow as tf

from tfblocks.models.transformer import BOS_ID, EOS_ID, PAD_ID, transformer_layers

NEG_INF = -1e9  # a finite "minus infinity" for scores (inf - inf would give NaN)


def length_penalty(length, alpha):
    """t2t's length penalty `((5 + length) / 6) ** alpha`."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {name}={value!r}.")


def _dim(x, axis):
    """The static size of `x` along `axis` when known, else a scalar tensor."""
    size = x.shape[axis]
    return size if size is not None else tf.shape(x)[axis]


def _write(seqs, index, tokens):
    """Writes `tokens` `[...]` at position `index` of `seqs` `[..., L]` (zeros there)."""
    column = tf.one_hot(index, tf.shape(seqs)[-1], dtype=seqs.dtype)  # [L]
    return seqs + tokens[..., None] * column


class Decoder:
    """Incremental decoding for a model made by `tfblocks.build_transformer`.

    Args:
        model: the trained model (or one reloaded from `.keras`).
        max_length: the most target tokens to generate (EOS included).
        jit_compile: compile the decoding loops with XLA.

    Example:

    >>> import numpy as np
    >>> import tfblocks
    >>> model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=30))
    >>> decoder = Decoder(model, max_length=6)
    >>> ids, scores = decoder.greedy(np.array([[5, 6, 7, 1]], "int32"))
    >>> tuple(ids.shape), tuple(scores.shape)
    ((1, 6), (1,))
    """

    def __init__(self, model, max_length, jit_compile=True):
        _check_positive("max_length", max_length)
        self.model = model
        self.max_length = max_length
        self.jit_compile = bool(jit_compile)
        self._layers = transformer_layers(model)
        self._functions = {}

    # The model, one piece at a time ---------------------------------------------------------

    def encode(self, source_ids):
        """Encoder output `[B, S, d]` and source padding mask `[B, S]`."""
        source_ids = tf.cast(source_ids, tf.int32)
        source_mask = tf.not_equal(source_ids, PAD_ID)
        x = self._layers["source_embedding"](source_ids, training=False)
        for block in self._layers["encoder"]:
            x = block(x, padding_mask=source_mask, training=False)
        if self._layers["encoder_norm"] is not None:
            x = self._layers["encoder_norm"](x)
        return x, source_mask

    def init_caches(self, encoder_output):
        """Per-layer caches: self-attention k/v (zeros) and cross-attention k/v."""
        batch = tf.shape(encoder_output)[0]
        return [
            block.init_cache(batch, self.max_length, context=encoder_output)
            for block in self._layers["decoder"]
        ]

    def step(self, ids, index, caches, source_mask):
        """Logits `[B, vocab]` (float32) for position `index` given token `ids` `[B, 1]`."""
        x = self._layers["target_embedding"](ids, start_index=index, training=False)  # [B, 1, d]
        new_caches = []
        for block, cache in zip(self._layers["decoder"], caches, strict=True):
            x, cache = block(
                x,
                cache=cache,
                cache_index=index,
                context_padding_mask=source_mask,
                training=False,
            )
            new_caches.append(cache)
        if self._layers["decoder_norm"] is not None:
            x = self._layers["decoder_norm"](x)
        if self._layers["softmax"] is None:
            logits = self._layers["target_embedding"].attend(x)  # tied: h · Eᵀ
        else:
            logits = self._layers["softmax"](x)
        logits = tf.cast(logits[:, 0], tf.float32)  # [B, vocab]
        never = tf.reduce_sum(tf.one_hot([PAD_ID, BOS_ID], tf.shape(logits)[-1]), axis=0)
        return tf.where(never > 0, NEG_INF, logits), new_caches

    # Public entry points ----------------------------------------------------------------------

    def _compiled(self, key, fn):
        if key not in self._functions:
            self._functions[key] = tf.function(fn, jit_compile=self.jit_compile)
        return self._functions[key]

    def greedy(self, source_ids):
        """Greedy decoding. Returns `(ids [B, max_length], log-prob sums [B])`.

        `ids` end with EOS (unless `max_length` ran out) and are PAD after it.
        """
        fn = self._compiled("greedy", lambda src: self._sequential(src, None))
        return fn(tf.convert_to_tensor(source_ids, tf.int32))

    def sample(self, source_ids, temperature=1.0, top_k=0, seed=0):
        """Sampling from `softmax(logits / temperature)`, restricted to the `top_k` best
        tokens when `top_k > 0`. Returns `(ids, log-prob sums under the model)`."""
        if not temperature > 0:
            raise ValueError(f"`temperature` must be > 0, got temperature={temperature!r}.")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"`top_k` must be a non-negative integer, got top_k={top_k!r}.")

        def choose(logits, index, seed_tensor):
            logits = logits / temperature
            if top_k:
                kth = tf.math.top_k(logits, k=top_k).values[:, -1:]  # [B, 1]
                logits = tf.where(logits < kth, NEG_INF, logits)
            draw = tf.random.stateless_categorical(
                logits, 1, seed=tf.stack([seed_tensor, index]), dtype=tf.int32
            )
            return draw[:, 0]

        fn = self._compiled(
            ("sample", float(temperature), top_k),
            lambda src, s: self._sequential(src, lambda lg, i: choose(lg, i, s)),
        )
        return fn(tf.convert_to_tensor(source_ids, tf.int32), tf.constant(seed, tf.int32))

    def beam_search(self, source_ids, beam_size=4, alpha=0.6):
        """t2t beam search. Returns `(ids [B, max_length], scores [B])`: the best
        finished hypothesis (the best live one if none finished) and its
        length-penalized score `log p / ((5 + length) / 6) ** alpha`."""
        _check_positive("beam_size", beam_size)
        if not alpha >= 0:
            raise ValueError(f"`alpha` must be >= 0, got alpha={alpha!r}.")
        fn = self._compiled(
            ("beam", beam_size, float(alpha)),
            lambda src: self._beam_search(src, beam_size, float(alpha)),
        )
        return fn(tf.convert_to_tensor(source_ids, tf.int32))

    def decode_greedy(self, source_ids):
        """`greedy` without its own `tf.function`, to be traced into a caller's graph."""
        return self._sequential(tf.cast(source_ids, tf.int32), None)

    def decode_beam(self, source_ids, beam_size=4, alpha=0.6):
        """`beam_search` without its own `tf.function`, to be traced into a caller's graph."""
        _check_positive("beam_size", beam_size)
        return self._beam_search(tf.cast(source_ids, tf.int32), beam_size, float(alpha))

    # Loops ------------------------------------------------------------------------------------

    def _sequential(self, source_ids, choose):
        """Greedy (`choose=None`) or sampled decoding, one token per step."""
        encoder_output, source_mask = self.encode(source_ids)
        batch = tf.shape(source_ids)[0]
        length = self.max_length

        def cond(i, token, caches, ids, finished, scores):
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, token, caches, ids, finished, scores):
            logits, caches = self.step(token, i, caches, source_mask)  # [B, V]
            if choose is None:
                chosen = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B]
            else:
                chosen = choose(logits, i)
            log_probs = tf.nn.log_softmax(logits)
            step_score = tf.gather(log_probs, chosen, batch_dims=1)  # [B]
            scores += tf.where(finished, 0.0, step_score)
            chosen = tf.where(finished, PAD_ID, chosen)
            ids = _write(ids, i, chosen)
            finished = tf.logical_or(finished, tf.equal(chosen, EOS_ID))
            return i + 1, chosen[:, None], caches, ids, finished, scores

        state = (
            tf.constant(0),
            tf.fill([batch, 1], BOS_ID),
            self.init_caches(encoder_output),
            tf.zeros([batch, length], tf.int32),
            tf.zeros([batch], tf.bool),
            tf.zeros([batch], tf.float32),
        )
        _, _, _, ids, _, scores = tf.while_loop(cond, body, state)
        return ids, scores

    def _beam_search(self, source_ids, beam, alpha):
        encoder_output, source_mask = self.encode(source_ids)
        batch = _dim(source_ids, 0)
        length = self.max_length
        # Every sentence's beams are rows b·beam … b·beam + beam − 1 of the flat batch.
        flat_mask = tf.repeat(source_mask, beam, axis=0)  # [B·K, S]
        caches = self.init_caches(tf.repeat(encoder_output, beam, axis=0))
        max_penalty = length_penalty(length, alpha)

        def regroup(x):  # [B·K, ...] -> [B, K, ...]
            return tf.reshape(x, [batch, beam, *(_dim(x, a) for a in range(1, x.shape.rank))])

        def flatten(x):  # [B, K, ...] -> [B·K, ...]
            return tf.reshape(x, [batch * beam, *(_dim(x, a) for a in range(2, x.shape.rank))])

        def cond(i, last, caches, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags):
            best_alive = alive_lp[:, 0] / max_penalty  # the most a live beam can still score
            best_finished = tf.reduce_max(tf.where(fin_flags, fin_scores, NEG_INF), axis=1)
            done = tf.logical_and(tf.reduce_any(fin_flags, 1), best_finished >= best_alive)
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(done)))

        def body(i, last, caches, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags):
            logits, caches = self.step(last, i, caches, flat_mask)  # [B·K, V]
            vocab = tf.shape(logits)[-1]
            log_probs = regroup(tf.nn.log_softmax(logits)) + alive_lp[:, :, None]  # [B, K, V]
            penalty = length_penalty(i + 1, alpha)
            flat_scores = tf.reshape(log_probs / penalty, [batch, -1])  # [B, K·V]
            top_scores, top_index = tf.math.top_k(flat_scores, k=2 * beam)  # [B, 2K]
            origin, token = top_index // vocab, top_index % vocab  # [B, 2K]
            top_seq = _write(tf.gather(alive_seq, origin, batch_dims=1), i, token)  # [B, 2K, L]
            is_eos = tf.equal(token, EOS_ID)

            # The K best extensions that did not end stay alive (there are always K).
            _, keep = tf.math.top_k(tf.where(is_eos, NEG_INF, top_scores), k=beam)  # [B, K]
            alive_seq = tf.gather(top_seq, keep, batch_dims=1)
            alive_lp = tf.gather(top_scores * penalty, keep, batch_dims=1)
            parents = tf.gather(origin, keep, batch_dims=1)  # [B, K]
            caches = [
                {**cache, "self": {k: flatten(tf.gather(regroup(v), parents, batch_dims=1))
                                   for k, v in cache["self"].items()}}
                for cache in caches
            ]  # fmt: skip
            last = flatten(tf.gather(token, keep, batch_dims=1))[:, None]  # [B·K, 1]

            # EOS-ended extensions compete with the finished ones for K slots.
            all_seq = tf.concat([fin_seq, top_seq], axis=1)  # [B, 3K, L]
            all_scores = tf.concat([fin_scores, tf.where(is_eos, top_scores, NEG_INF)], axis=1)
            all_flags = tf.concat([fin_flags, is_eos], axis=1)
            fin_scores, best = tf.math.top_k(all_scores, k=beam)  # [B, K]
            fin_seq = tf.gather(all_seq, best, batch_dims=1)
            fin_flags = tf.gather(all_flags, best, batch_dims=1)
            return i + 1, last, caches, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags

        first = tf.concat([[0.0], tf.fill([beam - 1], NEG_INF)], axis=0)  # only beam 0 is live
        state = (
            tf.constant(0),
            tf.fill([batch * beam, 1], BOS_ID),
            caches,
            tf.zeros([batch, beam, length], tf.int32),
            tf.tile(first[None], [batch, 1]),
            tf.zeros([batch, beam, length], tf.int32),
            tf.fill([batch, beam], NEG_INF),
            tf.zeros([batch, beam], tf.bool),
        )
        steps, _, _, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags = tf.while_loop(
            cond, body, state
        )
        any_finished = tf.reduce_any(fin_flags, axis=1)  # [B]
        ids = tf.where(any_finished[:, None], fin_seq[:, 0], alive_seq[:, 0])
        scores = tf.where(
            any_finished, fin_scores[:, 0], alive_lp[:, 0] / length_penalty(steps, alpha)
        )
        return ids, scores


def greedy(model, source_ids, max_length):
    """Greedy decoding with a KV cache; see `Decoder.greedy`."""
    return Decoder(model, max_length).greedy(source_ids)


def sample(model, source_ids, max_length, temperature=1.0, top_k=0, seed=0):
    """Sampling with a KV cache; see `Decoder.sample`."""
    return Decoder(model, max_length).sample(source_ids, temperature, top_k, seed)


def beam_search(model, source_ids, max_length, beam_size=4, alpha=0.6):
    """t2t beam search with a KV cache; see `Decoder.beam_search`."""
    return Decoder(model, max_length).beam_search(source_ids, beam_size, alpha)
