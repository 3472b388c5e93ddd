"""Sampling from the model's distribution: temperature, top-k and top-p (nucleus)."""

import tensorflow as tf

from tfblocks import _checks
from tfblocks.decoding.base import NEG_INF, Search
from tfblocks.decoding.greedy import Sequential


class Sampling(Search):
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

        return Sequential(step_fn, choose, eos_id, pad_id, length, hypotheses)


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
