"""Lexically constrained beam search (`ConstrainedBeamSearch`): every finished hypothesis
contains every target phrase of its sentence, found with dynamic beam allocation.

The phrases come with each call: `search(..., constraints=ids)`, int `[B, C, T]`, phrase c
of sentence b is `ids[b, c]` up to its first `pad_id` (C phrases at most, T tokens at most;
a row of padding constrains nothing, so sentences may have different numbers of phrases).

The search is `BeamSearch`'s (t2t's length penalty, `stop_early` and stop rule, forced
prefixes, n-best lists) with three changes, all on static shapes so the loop compiles
with XLA:

- Phrase state. Each hypothesis knows which phrases it has met and, for each phrase, how
  many of its first tokens its last tokens are (the longest such suffix, as a KMP
  automaton's state: a phrase that starts inside another, or repeats its own tokens, is
  still found). It is recomputed for each candidate from its last T tokens, so no
  failure table is needed. A phrase met stays met; phrases may overlap. With
  `ordered=True` the phrases must appear in the order given, each starting after the
  previous one ends: only the first phrase not met yet is matched.
- Candidates. Besides the 2·K best extensions of the sentence (BeamSearch's), each
  hypothesis of a sentence with phrases proposes its own best next token, EOS once it
  has met every phrase, and the next token of each phrase it may advance (2K + K·C more;
  one already proposed counts once). EOS is ruled out (log-probability `NEG_INF`) for a
  hypothesis that has not met every phrase, so only complete hypotheses finish, and a
  complete one may finish at every step.
- Dynamic beam allocation (Post & Vilar 2018). A candidate's bank is the number of
  phrase tokens it has met: the lengths of its met phrases plus the longest match in
  progress. The K hypotheses kept alive are taken from the banks in turns, fullest bank
  first: the best of each bank, then the second best of each, and so on (as fairseq
  shares its beam out), so a bank with fewer candidates leaves its share to the others
  and hypotheses that paid for a phrase's tokens are not crowded out by likelier ones
  that have not. The kept hypotheses are then sorted by score, as BeamSearch's.

A sentence without phrases is searched as `BeamSearch` searches it (its candidates, its one
bank and its choices are BeamSearch's): a batch without phrases gets BeamSearch's results
exactly; in a batch with phrases, such a sentence gets BeamSearch's best hypothesis (the
loop may run on for the others, which can only fill its later n-best entries; with
`stop_early`, as in a batched BeamSearch, the stepping on may also replace the best).

A complete hypothesis is always found when the phrases fit: the fullest bank's best
hypothesis is always kept, and its proposal for the phrase it has matched furthest puts a
candidate in a fuller bank, so after as many steps as the phrases have ids (fewer where
they overlap) one hypothesis holds them all, and it may end with EOS at the next step.
Where none finishes within `max_length` (phrases with more ids than `max_length - 1`
together), the best live hypothesis comes back with its raw log-probability, as
BeamSearch's does, and it may lack a phrase. A single phrase of `max_length` ids or more
is refused.

Departures from Post & Vilar (and Hu et al. 2019's trie): phrases are found anywhere (a
partial match that breaks off falls back to its longest matching suffix instead of being
abandoned), and the banks share the beam by turns rather than by fixed quotas. Each step
costs `[B, M, M]` comparisons to rank the M = 4K + K·C candidates and `[B, M, C, T, T]`
to match them, besides BeamSearch's work.
"""

import copy
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.decoding.base import (
    DEAD,
    NEG_INF,
    Search,
    _check_search_args,
    check_id_rows,
    dim,
    write,
)
from tfblocks.decoding.beam_search import BeamSearch, BeamState, _Beam, length_penalty, top_k
from tfblocks.ids import EOS_ID, PAD_ID

NO_TOKEN = -1  # the phrases' padding inside the search, and positions not to match


class _PhraseState(NamedTuple):
    """Each hypothesis' phrase state: the fields `ConstrainedState` adds to `BeamState`'s."""

    phrases: tf.Tensor  # [B, C, T]: the phrases' ids, NO_TOKEN after each one's end
    met: tf.Tensor  # [B, K, C]: the hypothesis contains the phrase (an empty one: True)
    partial: tf.Tensor  # [B, K, C]: the phrase's first tokens its last tokens are (0 if met)
    since: tf.Tensor  # [B, K]: (ordered) the first position the next phrase may use


# A NamedTuple cannot add fields to another by subclassing, so the fields are joined here:
# `_Beam`'s methods read `BeamState`'s by name and treat every field after `state` as by
# sentence, so the phrase state comes after them.
_FIELDS = [*BeamState.__annotations__.items(), *_PhraseState.__annotations__.items()]


class ConstrainedState(NamedTuple("ConstrainedState", _FIELDS)):
    """Loop state of `ConstrainedBeamSearch` (B sentences × K beams, C phrases of at most
    T tokens): `BeamState`'s fields, then each hypothesis' phrase state (`_PhraseState`)."""

    __slots__ = ()


def suffix_match(seqs, index, since, phrases):
    """`[B, M, C]`: for each sequence of `seqs` `[B, M, L]` (its last token at position
    `index`) and phrase of `phrases` `[B, C, T]` (NO_TOKEN after its end), the most
    tokens m such that the sequence's last m tokens, all at positions `since` `[B, M]` or
    later, are the phrase's first m.

    >>> seqs = tf.constant([[[5, 5, 6, 0]]])  # one sequence: 5 5 6 so far
    >>> phrases = tf.constant([[[5, 6, -1], [6, 7, -1], [5, 5, 6]]])
    >>> suffix_match(seqs, 2, tf.zeros([1, 1], tf.int32), phrases).numpy().tolist()
    [[[2, 1, 3]]]
    >>> suffix_match(seqs, 2, tf.fill([1, 1], 2), phrases).numpy().tolist()
    [[[0, 1, 0]]]
    """
    width = dim(phrases, 2)  # T
    positions = index - width + 1 + tf.range(width)  # [T]: the last T positions
    window = tf.gather(seqs, tf.maximum(positions, 0), axis=2)  # [B, M, T]
    usable = positions[None, None, :] >= since[:, :, None]  # [B, M, T]
    window = tf.where(usable, window, NO_TOKEN)
    # The suffix of m = j + 1 tokens starts at window[T - m]: its t-th token (t ≤ j) is
    # window[T - 1 - j + t]; entries with t > j are clipped and then ignored.
    j = tf.range(width)[:, None]  # [T, 1]
    t = tf.range(width)[None, :]  # [1, T]
    suffixes = tf.gather(window, tf.minimum(width - 1 - j + t, width - 1), axis=2)  # [B, M, T, T]
    same = tf.equal(suffixes[:, :, None, :, :], phrases[:, None, :, None, :])  # [B, M, C, T, T]
    ignored = t > j  # [T, T]
    matches = tf.reduce_all(tf.logical_or(same, ignored), axis=-1)  # [B, M, C, T(j)]
    # m = j + 1 must not pass the phrase's end (its tokens at t ≤ j are then real ids).
    real = tf.not_equal(phrases, NO_TOKEN)[:, None]  # [B, 1, C, T]
    lengths = tf.where(tf.logical_and(matches, real), tf.range(1, width + 1), 0)
    return tf.reduce_max(lengths, axis=-1)  # [B, M, C]


def rank_in_group(scores, groups, eligible):
    """`[B, M]`: each candidate's place among the `eligible` ones of its group (0: the
    best score; ties to the lower index), for `scores`, int `groups` and `eligible`
    `[B, M]`.

    >>> rank_in_group(tf.constant([[1.0, 3.0, 2.0, 3.0]]), tf.constant([[0, 0, 1, 0]]),
    ...               tf.constant([[True, True, True, True]])).numpy().tolist()
    [[2, 0, 0, 1]]
    """
    m = tf.range(dim(scores, 1))
    mine, other = scores[:, :, None], scores[:, None, :]  # [B, M, 1], [B, 1, M]
    earlier = m[None, :] < m[:, None]  # [M, M]: the other candidate's index is lower
    ahead = tf.logical_or(other > mine, tf.logical_and(tf.equal(other, mine), earlier))
    same_group = tf.equal(groups[:, :, None], groups[:, None, :])  # [B, M, M]
    counted = tf.logical_and(tf.logical_and(ahead, same_group), eligible[:, None, :])
    return tf.reduce_sum(tf.cast(counted, tf.int32), axis=2)


class _ConstrainedBeam(_Beam):
    """`_Beam` with phrases (see the module docstring): `phrases` `[B, C, T]` (NO_TOKEN
    after each phrase) enter the loop state in `initial`."""

    def __init__(
        self, step_fn, beam, alpha, eos_id, pad_id, length, hypotheses, stop_early, phrases, ordered
    ):
        super().__init__(step_fn, beam, alpha, eos_id, pad_id, length, hypotheses, stop_early)
        self.phrases = phrases
        self.ordered = ordered

    def initial(self, start_ids, state, prefix):
        loop = super().initial(start_ids, state, prefix)
        batch, beam, count = dim(self.phrases, 0), self.beam, dim(self.phrases, 1)
        empty = tf.equal(self.phrases[:, :, 0], NO_TOKEN)  # [B, C]: constrains nothing
        return ConstrainedState(
            **loop._asdict(),
            phrases=self.phrases,
            met=tf.tile(empty[:, None, :], [1, beam, 1]),
            partial=tf.zeros([batch, beam, count], tf.int32),
            since=tf.zeros([batch, beam], tf.int32),
        )

    def active(self, met):
        """`[B, K, C]`: the phrases a hypothesis may advance (not met; with `ordered`,
        only the first of those)."""
        unmet = tf.logical_not(met)
        if not self.ordered:
            return unmet
        before = tf.math.cumsum(tf.cast(unmet, tf.int32), axis=2, exclusive=True)
        return tf.logical_and(unmet, tf.equal(before, 0))

    def candidates(self, loop, log_probs, top_index, active):
        """`(origin, token, proposed)` `[B, M]` of the M = 4K + K·C candidates: the 2K
        best extensions (`top_index` into `[K·V]`), each hypothesis' best next token,
        EOS and the next token of each phrase it may advance; `proposed` is False for
        an extra one of a sentence without phrases, EOS of a hypothesis that has not met
        every phrase, the token of a phrase not `active` `[B, K, C]`, and one proposed
        before."""
        batch, beam = dim(log_probs, 0), self.beam
        vocab = tf.shape(log_probs)[-1]
        count, width = dim(loop.phrases, 1), dim(loop.phrases, 2)
        has_phrases = tf.reduce_any(tf.not_equal(loop.phrases, NO_TOKEN), axis=[1, 2])  # [B]
        best = tf.argmax(log_probs, axis=2, output_type=tf.int32)  # [B, K]
        complete = tf.reduce_all(loop.met, axis=2)  # [B, K]
        # The phrase's token after its `partial` matched ones (partial < its length).
        at = tf.one_hot(loop.partial, width, dtype=tf.int32)  # [B, K, C, T]
        following = tf.reduce_sum(at * loop.phrases[:, None], axis=-1)  # [B, K, C]
        following = tf.maximum(following, 0)  # an empty phrase's (never proposed) stays an id
        hypothesis = tf.tile(tf.range(beam)[None], [batch, 1])  # [B, K]
        origin = tf.concat(
            [
                top_index // vocab,
                hypothesis,
                hypothesis,
                tf.reshape(tf.tile(hypothesis[:, :, None], [1, 1, count]), [batch, beam * count]),
            ],
            axis=1,
        )  # [B, M]
        token = tf.concat(
            [
                top_index % vocab,
                best,
                tf.fill([batch, beam], self.eos_id),
                tf.reshape(following, [batch, beam * count]),
            ],
            axis=1,
        )
        proposed = tf.concat(
            [
                tf.ones_like(top_index, tf.bool),
                tf.tile(has_phrases[:, None], [1, beam]),
                tf.logical_and(has_phrases[:, None], complete),
                tf.reshape(active, [batch, beam * count]),
            ],
            axis=1,
        )  # [B, M]
        # A candidate proposed twice counts once (its first proposal that counts).
        flat = origin * vocab + token  # [B, M]
        m = tf.range(dim(flat, 1))
        earlier = m[None, :] < m[:, None]  # [M, M]
        twice = tf.logical_and(tf.equal(flat[:, :, None], flat[:, None, :]), earlier)
        seen = tf.reduce_any(tf.logical_and(twice, proposed[:, None, :]), axis=2)  # [B, M]
        return origin, token, tf.logical_and(proposed, tf.logical_not(seen))

    def advance(self, loop, seqs, origin, active):
        """`(met [B, M, C], partial [B, M, C], since [B, M], bank [B, M])` of the
        candidates `seqs` `[B, M, L]` (their new token at `loop.index`), extending the
        hypotheses `origin` `[B, M]`; `active` `[B, K, C]` as `self.active`'s."""
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(loop.phrases, NO_TOKEN), tf.int32), axis=2)
        lengths = lengths[:, None, :]  # [B, 1, C]
        met = tf.gather(loop.met, origin, batch_dims=1)  # [B, M, C]
        since = tf.gather(loop.since, origin, batch_dims=1)  # [B, M]
        moving = tf.gather(active, origin, batch_dims=1)  # [B, M, C]
        matched = tf.where(moving, suffix_match(seqs, loop.index, since, loop.phrases), 0)
        newly = tf.logical_and(moving, tf.equal(matched, lengths))  # [B, M, C]
        met = tf.logical_or(met, newly)
        partial = tf.where(met, 0, matched)
        if self.ordered:  # the next phrase starts after this one
            since = tf.where(tf.reduce_any(newly, axis=2), loop.index + 1, since)
        bank = tf.reduce_sum(tf.where(met, lengths, 0), axis=2) + tf.reduce_max(partial, axis=2)
        return met, partial, since, bank

    def allocate(self, scores, live, bank, eligible, banks):
        """`[B, K]`: the candidates kept alive (indices into `[B, M]`), by score. The
        `eligible` live ones are taken by turns from the banks (`bank` `[B, M]`, below
        `banks`), fullest first; where fewer than K are, dead ones (`live` False) by
        score fill the rest."""
        groups = tf.where(live, bank, -1)  # the dead in a group of their own
        rank = rank_in_group(scores, groups, eligible)  # [B, M]
        places = dim(scores, 1) * banks  # keys of the live: below this
        key = tf.where(live, rank * banks + (banks - 1 - bank), places + rank)
        key = tf.where(eligible, key, 2 * places)  # never kept (K others are eligible)
        _, pick = tf.math.top_k(-tf.cast(key, tf.float32), k=self.beam)  # [B, K]
        _, order = tf.math.top_k(tf.gather(scores, pick, batch_dims=1), k=self.beam)
        return tf.gather(pick, order, batch_dims=1)

    def step(self, loop, context):
        """One step: every beam extended by one token (see the module docstring)."""
        beam, i = self.beam, loop.index
        batch = dim(loop.alive_seq, 0)
        step_log_probs, new_state = self.step_log_probs(loop, context)  # [B, K, V]
        vocab = tf.shape(step_log_probs)[-1]
        # EOS only after every phrase (a sentence without phrases: always).
        incomplete = tf.logical_not(tf.reduce_all(loop.met, axis=2))  # [B, K]
        is_eos_id = tf.equal(tf.range(vocab), self.eos_id)  # [V]
        closed = tf.logical_and(incomplete[:, :, None], is_eos_id[None, None, :])  # [B, K, V]
        step_log_probs = tf.where(closed, NEG_INF, step_log_probs)
        log_probs = step_log_probs + loop.alive_log_probs[:, :, None]  # [B, K, V]
        penalty = length_penalty(i + 1, self.alpha)
        flat_scores = tf.reshape(log_probs / penalty, [batch, -1])  # [B, K·V]
        _, top_index = top_k(flat_scores, 2 * beam)  # [B, 2K]

        active = self.active(loop.met)  # [B, K, C]
        origin, token, proposed = self.candidates(loop, log_probs, top_index, active)
        scores = tf.gather(flat_scores, origin * vocab + token, batch_dims=1)  # [B, M]
        cand_log_probs = scores * penalty  # [B, M]
        seqs = write(tf.gather(loop.alive_seq, origin, batch_dims=1), i, token)  # [B, M, L]
        # Only a live candidate finishes (as in BeamSearch), judged by its log-probability.
        is_eos = tf.logical_and(tf.equal(token, self.eos_id), cand_log_probs > DEAD)
        is_eos = tf.logical_and(is_eos, proposed)
        met, partial, since, bank = self.advance(loop, seqs, origin, active)

        # K candidates stay alive; one that ended counts as dead there (as BeamSearch's).
        alive_scores = tf.where(is_eos, NEG_INF, scores)
        alive_log_probs = tf.where(is_eos, NEG_INF, cand_log_probs)
        banks = dim(loop.phrases, 1) * dim(loop.phrases, 2) + 1  # banks 0 … C·T
        keep = self.allocate(alive_scores, alive_log_probs > DEAD, bank, proposed, banks)
        parents = tf.gather(origin, keep, batch_dims=1)  # [B, K]
        # EOS-ended candidates compete with the finished ones for K slots.
        finished_seq, finished_scores, finished_flags = self.finish(loop, seqs, scores, is_eos)
        kept = lambda x: tf.gather(x, keep, batch_dims=1)  # noqa: E731
        new = ConstrainedState(
            index=i + 1,
            last=self.flatten(loop, kept(token))[:, None],  # [B·K, 1]
            state=self.reorder(loop, new_state, parents),
            alive_seq=kept(seqs),
            alive_log_probs=kept(alive_log_probs),
            finished_seq=finished_seq,
            finished_scores=finished_scores,
            finished_flags=finished_flags,
            prefix=loop.prefix,
            phrases=loop.phrases,
            met=kept(met),
            partial=kept(partial),
            since=kept(since),
        )
        return self.keep_done(loop, new)


def check_constraints(constraints, start_ids, max_length, eos_id, pad_id, prefix=None):
    """`constraints` (int `[B, C, T]`, each phrase padded on the right with `pad_id`, or
    None) as the search's `[B, C, T]` int32 phrases with NO_TOKEN after each phrase's
    end (None for None or a shape without phrases); else a `ValueError` naming it.

    Concrete values (not a traced tensor) are also checked phrase by phrase: no id after
    the padding, no negative id or `eos_id`, and at most `max_length - 1` ids (a result
    holds at most `max_length` tokens, EOS included), and where the sentences' `prefix`
    `[B, P]` is concrete too, room for the phrase after it (`check_phrases`).
    """
    if constraints is None:
        return None
    axes = ("batch", "phrases", "length")
    constraints = check_id_rows("constraints", constraints, axes, start_ids)
    if constraints.shape[1] == 0 or constraints.shape[2] == 0:
        return None
    constraints = tf.cast(constraints, tf.int32)
    values = tf.get_static_value(constraints)
    if values is not None:
        prefix = None if prefix is None else tf.get_static_value(tf.convert_to_tensor(prefix))
        check_phrases(values, max_length, eos_id, pad_id, prefix)
    ended = tf.math.cumsum(tf.cast(tf.equal(constraints, pad_id), tf.int32), axis=2) > 0
    return tf.where(ended, NO_TOKEN, constraints)


class PhraseError(ValueError):
    """A constraint phrase refused: a ValueError that also says which one, so a caller
    that batched the phrases (a command sorting its lines by length) can name its own
    line. `sentence` and `phrase` index the batch given, `shown` is the phrase as the
    message shows it (its text or ids) and `reason` what is wrong with it."""

    def __init__(self, message, sentence, phrase, shown, reason):
        super().__init__(message)
        self.sentence, self.phrase, self.shown, self.reason = sentence, phrase, shown, reason


def check_phrases(values, max_length, eos_id, pad_id, prefix=None):
    """Each phrase of `values` `[B, C, T]` (NumPy) checked as `check_constraints` says
    (the length against `max_length` when it is an int, not a tensor or None; with a
    `prefix` `[B, P]` (NumPy, padded with `pad_id`), against the room its sentence's
    prefix leaves: `_needed_after`)."""
    if isinstance(max_length, np.integer):
        max_length = int(max_length)
    for b, sentence in enumerate(values):
        for c, row in enumerate(sentence):
            pads = np.flatnonzero(row == pad_id)
            length = int(pads[0]) if pads.size else len(row)
            ids = row[:length].tolist()
            refuse = lambda reason, b=b, c=c, ids=ids: _refuse(b, c, ids, reason)  # noqa: E731
            if (row[length:] != pad_id).any():
                refuse(
                    f"has ids after its padding ({row.tolist()}); pad each phrase on the "
                    f"right with pad_id={pad_id}."
                )
            if any(i < 0 or i == eos_id for i in ids):
                refuse(f"holds a negative id or eos_id={eos_id}.")
            if isinstance(max_length, int) and length >= max_length:
                refuse(
                    f"has {length} ids, more than max_length={max_length} leaves before EOS "
                    f"({max_length - 1})."
                )
            if isinstance(max_length, int) and prefix is not None and b < len(prefix):
                forced = _ids_before(prefix[b], pad_id)
                needed, room = _needed_after(forced, ids), max_length - 1 - len(forced)
                if forced and needed > room:
                    refuse(
                        f"needs {needed} ids after the prefix's {len(forced)}, but max_length="
                        f"{max_length} leaves room for {room} before EOS: shorten the prefix "
                        "or the phrase, or raise max_length."
                    )


def _refuse(sentence, phrase, ids, reason):
    """Raises the PhraseError of phrase `phrase` (ids `ids`) of sentence `sentence`."""
    where = f"phrase {phrase} of sentence {sentence} ({ids})"
    raise PhraseError(f"`constraints`: {where} {reason}", sentence, phrase, ids, reason)


def _ids_before(row, pad_id):
    """The ids of `row` (NumPy) before its first `pad_id`, a list."""
    pads = np.flatnonzero(row == pad_id)
    return row[: int(pads[0]) if pads.size else len(row)].tolist()


def _needed_after(prefix, phrase):
    """The ids a result that starts with `prefix` needs after it to hold `phrase` (lists):
    none when the prefix holds it, else the phrase's ids beyond the longest end of the
    prefix that begins it (a prefix's ids count towards the phrases)."""
    n = len(phrase)
    if any(prefix[i : i + n] == phrase for i in range(len(prefix) - n + 1)):
        return 0
    overlap = max(
        k for k in range(min(n - 1, len(prefix)) + 1) if prefix[len(prefix) - k :] == phrase[:k]
    )
    return n - overlap


class ConstrainedBeamSearch(BeamSearch):
    """Beam search whose finished hypotheses contain given target phrases (see the module
    docstring): `search(..., constraints=ids)` with ids `[B, C, T]`, phrase c of sentence
    b being `ids[b, c]` up to its first `pad_id`.

    Without constraints (or with only padding) a sentence's result is `BeamSearch`'s.
    A hypothesis finishes (EOS) only once it holds every phrase of its sentence; where
    none does within `max_length`, the best live hypothesis is returned with its raw
    log-probability, as `BeamSearch` does when none finished. Scores, the length penalty,
    `stop_early`, `num_hypotheses` and `prefix` are `BeamSearch`'s; a forced prefix's ids
    count towards the phrases.

    Args:
        beam_size: K, the hypotheses kept per sentence (shared among the banks).
        alpha: length-penalty exponent (0 = no penalty).
        stop_early: end a sentence's search once K hypotheses have finished.
        ordered: the phrases must appear in the order given, each after the previous
            one ends (by default in any order, and they may overlap).

    Example (EOS, id 1, is always the likeliest token; id 4 must appear):

    >>> import tensorflow as tf
    >>> start_row = [-30.0, 4.0, -30.0, 2.0, 0.0]  # logits of ids 0 … 4 after ids 0 … 2
    >>> table = tf.constant([start_row] * 3 + [[-30.0, 4.0, -30.0, 1.0, 0.5],  # after 3
    ...                                         [-30.0, 4.0, -30.0, 0.5, 1.0]])  # after 4
    >>> def step_fn(ids, index, state):
    ...     return tf.gather(table, ids[:, 0]), state
    >>> search = ConstrainedBeamSearch(beam_size=2)
    >>> ids, _ = search.search(step_fn, (), tf.constant([2]), 4)
    >>> ids.numpy().tolist()
    [[1, 0, 0, 0]]
    >>> ids, _ = search.search(step_fn, (), tf.constant([2]), 4, constraints=[[[4]]])
    >>> ids.numpy().tolist()
    [[4, 1, 0, 0]]
    """

    def __init__(self, beam_size=4, alpha=0.6, stop_early=False, ordered=False):
        super().__init__(beam_size, alpha, stop_early)
        self.ordered = _checks.check_bool("ordered", ordered)

    def get_config(self):
        return {**super().get_config(), "ordered": self.ordered}

    # The phrases of one call, on a copy of the search made by `search` (never on
    # the search itself): `_pieces` takes no per-call tensors.
    _phrases = None

    def _pieces(self, step_fn, eos_id, pad_id, length, hypotheses):
        if self._phrases is None:  # no phrases: BeamSearch's loop, at its cost
            return super()._pieces(step_fn, eos_id, pad_id, length, hypotheses)
        return _ConstrainedBeam(
            step_fn, self.beam_size, self.alpha, eos_id, pad_id, length, hypotheses,
            self.stop_early, self._phrases, self.ordered,
        )  # fmt: skip

    def search(
        self, step_fn, state, start_ids, max_length, eos_id=EOS_ID, pad_id=PAD_ID, *,
        constraints=None, **options,
    ):  # fmt: skip
        """`Search.search` (the same arguments and results) with `constraints`:
        None, or int `[B, C, T]`, the phrases each sentence's results must contain,
        each padded on the right with `pad_id` (a row of padding constrains nothing).
        A phrase holds neither `eos_id` nor more than `max_length - 1` ids (checked when
        the ids are not a traced tensor). Without constraints (None, or a shape without
        phrases) it runs `BeamSearch`'s own loop; given constraints, every sentence of
        the call pays for the constrained loop, those without phrases too."""
        _check_search_args(max_length, eos_id, pad_id)
        start_ids = tf.convert_to_tensor(start_ids)
        bound = copy.copy(self)
        bound._phrases = check_constraints(
            constraints, start_ids, max_length, eos_id, pad_id, options.get("prefix")
        )
        return Search.search(
            bound, step_fn, state, start_ids, max_length, eos_id, pad_id, **options
        )
