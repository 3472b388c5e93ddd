"""`Controls`: rules on what a search may generate, applied to the logits of every step.

The switches a user reaches for when a model stops short, loops or writes `<unk>`
(CTranslate2's `min_decoding_length` and `disable_unk`, fairseq's `--max-len-a/-b`):

- `min_length`: EOS is not generated before a translation has that many tokens (the
  forced ones, a target prefix or a language token, included).
- `disallow_unk`: `<unk>` is never generated.
- `max_length_ratio` R: a translation of a source of S subwords (EOS and padding not
  counted) has at most `floor(R × S) + MAX_LENGTH_EXTRA` tokens before its EOS, which is
  forced there; each sentence its own limit, whatever its batch mates.
- `no_repeat_ngram_size` N: no n-gram of N tokens appears twice in a translation (the
  token that would complete a repeat is masked; N = 1: no token twice).
- `repetition_penalty` P: the logit of a token the translation already holds is divided
  by P when positive, multiplied by P when negative (CTRL's rule, as in CTranslate2 and
  Hugging Face; P > 1 discourages repeats).

The last two read what each hypothesis generated so far: the step keeps it in the
decoding state (`history`, a self-attention cache's shape, so beam search reorders it
and the caches' growth pads it with them).

Every search (greedy, beam, sampling, constrained, ensembles) decodes through
`Decoder.step`, which applies them after the model's logits (a masked token gets
`NEG_INF`): the searches then choose from the distribution renormalized over what is
allowed, and a translation's score is that distribution's (as in CTranslate2 and
Hugging Face). `Decoder.score` scores given targets with the model alone.
"""

import dataclasses
import math

import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import EOS_ID, PAD_ID, UNK_ID

MAX_LENGTH_EXTRA = 10  # `max_length_ratio`'s constant: at most R × S + 10 tokens
LIMIT_KEY = "length_limit"  # the step context's entry of each row's limit


@dataclasses.dataclass(frozen=True)
class Controls:
    """What a search may generate (see the module): `min_length` tokens at least before
    EOS, no `<unk>` with `disallow_unk`, at most `floor(max_length_ratio × S) + 10`
    tokens before EOS for a source of S subwords (None: no limit but `max_length`), no
    n-gram of `no_repeat_ngram_size` tokens twice (0: off), and `repetition_penalty` on
    the tokens already generated (1: off).

    Example:

    >>> Controls(min_length=2, disallow_unk=True).active
    True
    >>> Controls(max_length_ratio=0)
    Traceback (most recent call last):
    ...
    ValueError: `max_length_ratio` must be a finite number above 0, got max_length_ratio=0.
    """

    min_length: int = 0
    disallow_unk: bool = False
    max_length_ratio: float | None = None
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        _checks.check_non_negative_int("min_length", self.min_length)
        _checks.check_bool("disallow_unk", self.disallow_unk)
        _checks.check_non_negative_int("no_repeat_ngram_size", self.no_repeat_ngram_size)
        penalty = self.repetition_penalty
        if not (_checks.is_finite_real(penalty) and penalty > 0):
            raise ValueError(
                "`repetition_penalty` must be a finite number above 0, got "
                f"repetition_penalty={penalty!r}."
            )
        ratio = self.max_length_ratio
        if ratio is not None and not (_checks.is_finite_real(ratio) and ratio > 0):
            raise ValueError(
                "`max_length_ratio` must be a finite number above 0, got "
                f"max_length_ratio={ratio!r}."
            )

    @property
    def active(self):
        """Whether any rule is on."""
        return self != Controls()

    @property
    def needs_history(self):
        """Whether a rule reads the tokens generated so far (`history`)."""
        return bool(self.no_repeat_ngram_size) or self.repetition_penalty != 1.0

    def with_history(self, caches, batch, length):
        """The decoding state: the self-attention `caches` (a list), and where a rule
        reads it, the empty history of `batch` rows and `length` positions (the caches'),
        int32 `[B, 1, length, 1]`: position p holds the token fed at step p (BOS at 0,
        then each generated one)."""
        if not self.needs_history:
            return caches
        return [*caches, tf.zeros([batch, 1, length, 1], tf.int32)]

    def split(self, state, index, ids):
        """`(caches, history)` of a decoding state (`with_history`'s), the ids `[N, 1]`
        fed at step `index` written into the history; `(state, None)` without one."""
        if not self.needs_history:
            return state, None
        history = state[-1]
        positions = tf.range(tf.shape(history)[2])[None, None, :, None]
        fed = tf.cast(ids, tf.int32)[:, :, None, None]
        return state[:-1], tf.where(tf.equal(positions, index), fed, history)

    def context(self, source_ids):
        """`{LIMIT_KEY: limits}` for a step's context (`limits`), or `{}` (no
        `max_length_ratio`, or no source)."""
        limits = None if source_ids is None else self.limits(source_ids)
        return {} if limits is None else {LIMIT_KEY: limits}

    def limits(self, source_ids):
        """Each row's most tokens before EOS, int32 `[B]`, for `source_ids` `[B, S]` (EOS
        terminated, 0-padded); None without `max_length_ratio`."""
        if self.max_length_ratio is None:
            return None
        words = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.float64), axis=1) - 1.0
        ratio = tf.constant(float(self.max_length_ratio), tf.float64)
        return tf.cast(tf.floor(ratio * tf.maximum(words, 0.0)), tf.int32) + MAX_LENGTH_EXTRA

    def apply(self, logits, index, limits=None, history=None):
        """`logits` `[N, V]` of step `index` (the token it chooses is the row's
        `index`-th, from 0) with the rules applied; `limits` `[N]`: `limits`' rows;
        `history`: `record`'s, this step's ids written."""
        vocab = tf.shape(logits)[-1]
        neg_inf = tf.cast(-1e9, logits.dtype)
        if history is not None:
            logits = self._repetitions(logits, index, history[:, 0, :, 0], neg_inf)
        if self.disallow_unk:
            logits = tf.where(tf.equal(tf.range(vocab), UNK_ID)[None], neg_inf, logits)
        is_eos = tf.equal(tf.range(vocab), EOS_ID)[None]  # [1, V]
        if self.min_length:
            early = tf.logical_and(is_eos, index < self.min_length)
            logits = tf.where(early, neg_inf, logits)
        if limits is not None:
            at_limit = tf.greater_equal(tf.cast(index, tf.int32), limits)[:, None]  # [N, 1]
            eos_only = tf.where(is_eos, tf.zeros_like(logits), neg_inf)
            logits = tf.where(at_limit, eos_only, logits)
        return logits

    def _repetitions(self, logits, index, history, neg_inf):
        """`logits` with `repetition_penalty` and `no_repeat_ngram_size` applied, from
        `history` `[N, L]` (position p: the token generated at step p - 1)."""
        rows, length = tf.shape(history)[0], tf.shape(history)[1]
        positions = tf.range(length)
        generated = tf.logical_and(positions >= 1, positions <= index)[None]  # [1, L]

        def tokens_mask(tokens, where):  # [N, V]: True at each row's `tokens` [N, L] where `where`
            row_ids = tf.broadcast_to(tf.range(rows)[:, None], tf.shape(tokens))
            indices = tf.stack([row_ids, tokens], axis=-1)  # [N, L, 2]
            counts = tf.scatter_nd(indices, tf.cast(where, tf.int32), tf.shape(logits))
            return counts > 0

        if self.repetition_penalty != 1.0:
            seen = tokens_mask(history, tf.broadcast_to(generated, tf.shape(history)))
            penalty = tf.cast(self.repetition_penalty, logits.dtype)
            penalized = tf.where(logits > 0, logits / penalty, logits * penalty)
            logits = tf.where(seen, penalized, logits)
        n = self.no_repeat_ngram_size
        if n:
            padded = tf.pad(history, [[0, 0], [0, n]])  # [N, L + n]
            last = index - n + 2  # the position of the first of the last n - 1 tokens
            same = tf.ones(tf.shape(history), tf.bool)
            for k in range(n - 1):  # an n-gram starting at j matches the last n - 1 tokens
                tail = tf.gather(history, tf.maximum(last + k, 0), axis=1)[:, None]  # [N, 1]
                same = tf.logical_and(same, tf.equal(padded[:, k : k + length], tail))
            starts = tf.logical_and(positions >= 1, positions + n - 1 <= index)[None]
            banned = tokens_mask(padded[:, n - 1 : n - 1 + length], tf.logical_and(same, starts))
            logits = tf.where(banned, neg_inf, logits)
        return logits


def check_controls(controls, has_source=True):
    """`controls` (a `Controls`, or None for none) as a `Controls`; a ValueError naming
    the argument otherwise, and for a `max_length_ratio` without a source
    (`has_source` False: a decoder-only language model)."""
    if controls is None:
        return Controls()
    if not isinstance(controls, Controls):
        raise ValueError(
            "`controls` must be a tfblocks.decoding.Controls or None, got "
            f"controls={_checks.short_repr(controls)}."
        )
    if controls.max_length_ratio is not None and not has_source:
        raise ValueError(
            "`max_length_ratio` limits a translation by its source: a decoder-only "
            f"language model has none, got controls={controls!r}."
        )
    return controls


def ratio_limit(ratio, source_words):
    """The most tokens before EOS that `max_length_ratio` `ratio` allows a source of
    `source_words` subwords (for CTranslate2 and tests: the same rule in Python)."""
    return math.floor(ratio * source_words) + MAX_LENGTH_EXTRA
