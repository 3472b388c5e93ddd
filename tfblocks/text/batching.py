"""Batching tokenized pairs under a token budget, in the padded batch shapes of `make_dataset`.

t2t's `batch_size` counts tokens, so short sentences come in bigger batches. The pairs are
put in length buckets by their longer side, and each bucket is batched on its own:

- `"dynamic"` (`batch_dynamic`): t2t's fine length buckets (`bucket_boundaries`), each
  batch padded to its longest pair. Least padding, but dozens of batch shapes: XLA would
  compile the step for each.
- `"buckets"` (`batch_buckets`): a handful of padded lengths (`fixed_bucket_lengths`: 8, 16,
  24, 32, 48, 64, …) and one batch size per length (`batch_tokens // length`), so there are
  at most as many batch shapes as lengths and XLA compiles the step once per length.
- `"max_length"` (`batch_max_length`): every batch `[batch_tokens // max_length,
  max_length]`: one shape (TPUs), at the price of the most padding.

(`"packed"`, several pairs per row, is `tfblocks.text.packing`.)

The fixed-shape modes complete a bucket's last, partial batch with all-padding rows instead of
dropping pairs (t2t and tf.data drop them with `drop_remainder`): the loss and the metrics weigh
tokens by `targets != PAD_ID` (`tfblocks.training.losses.token_weights`), so such rows count for
nothing and every pair is seen once per epoch.

Each batching function takes the `([length], [length])` id pairs and a `BatchOptions`, and
gives `({"inputs": [B, S], "targets": [B, T]}, [B, T])` batches, shuffled when asked, with
their number stated when the pairs' lengths are known.
"""

import dataclasses
import itertools

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import PAD_ID

# Batches shuffled together: 1024 batches of 4096 tokens per side are 32 MiB of ids.
BATCH_SHUFFLE_BUFFER = 1024
# The shuffle buffer of a streamed corpus (`StreamedPairs`), in pairs: bounded memory.
STREAM_SHUFFLE_BUFFER = 100_000
# Its batches shuffled together: the pairs are shuffled already, and a buffer fills before
# the first step (1024 batches would hold that step back by ~300k pairs of tokenizing).
STREAM_BATCH_SHUFFLE_BUFFER = 16


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """What the batching functions need of `make_dataset`'s arguments, checked there.

    Attributes:
        batch_tokens: the token budget of a batch, per side.
        max_length: the longest pair kept.
        shuffle: shuffle the batches (packed: the rows).
        seed: the shuffles' seed, or None.
        bucket_lengths: the padded lengths of `batch_buckets` (`check_bucket_lengths`).
        source_lengths: int `[N]`, the lengths of the pairs to batch, in their order before
            any shuffle; None for a streamed corpus (the number of batches is then unknown).
        target_lengths: the same for the targets.
    """

    batch_tokens: int
    max_length: int
    shuffle: bool = False
    seed: int | None = None
    bucket_lengths: tuple | None = None
    source_lengths: np.ndarray | None = None
    target_lengths: np.ndarray | None = None


def bucket_boundaries(max_length, min_length=8, step=1.1):
    """t2t's length buckets: 8, 9, …, then growing by 10 % up to `max_length`.

    Args:
        max_length: boundaries stay below this length.
        min_length: the first boundary.
        step: growth factor between boundaries, > 1.

    Returns:
        A list of increasing ints; bucket i holds lengths from boundary i-1 up to (excluding)
        boundary i.

    Example:

    >>> bucket_boundaries(24)
    [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22]
    """
    _checks.check_positive_int("max_length", max_length)
    _checks.check_positive_int("min_length", min_length)
    if not step > 1:
        raise ValueError(f"`step` must be > 1, got step={step!r}.")
    boundaries, length = [], min_length
    while length < max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * step))
    return boundaries


def fixed_bucket_lengths(max_length, step=8):
    """The padded lengths of `make_dataset(shapes="buckets")`: few, so XLA compiles few shapes.

    Multiples of `step` up to `4 * step`, then each 1.5× the previous (rounded up to a multiple
    of `step`), and `max_length` last. t2t's boundaries (`bucket_boundaries`) grow by 10 % from
    8 and give dozens of lengths; these coarsen them so that a step compiled per length is
    compiled a handful of times, for some more padding.

    Args:
        max_length: the longest pair kept, the last length.
        step: the granularity of the lengths (8 suits vector units and XLA's tiling).

    Returns:
        An increasing list of ints ending with `max_length`.

    Example:

    >>> fixed_bucket_lengths(32), fixed_bucket_lengths(64), fixed_bucket_lengths(256)
    ([8, 16, 24, 32], [8, 16, 24, 32, 48, 64], [8, 16, 24, 32, 48, 72, 112, 168, 256])
    """
    max_length = _checks.check_positive_int("max_length", max_length)
    step = _checks.check_positive_int("step", step)
    lengths, length = [], step
    while length < max_length:
        lengths.append(length)
        length = length + step if length < 4 * step else -(-length * 3 // 2 // step) * step
    return [*lengths, max_length]


def check_bucket_lengths(bucket_lengths, max_length):
    """`bucket_lengths` as an increasing tuple of ints ending with `max_length` (appended if
    missing); None gives `fixed_bucket_lengths(max_length)`.

    Example:

    >>> check_bucket_lengths([8, 16], 24), check_bucket_lengths(None, 16)
    ((8, 16, 24), (8, 16))
    """
    if bucket_lengths is None:
        return tuple(fixed_bucket_lengths(max_length))
    if isinstance(bucket_lengths, (str, bytes)) or not hasattr(bucket_lengths, "__iter__"):
        raise ValueError(
            f"`bucket_lengths` must be a list of increasing positive ints <= max_length, "
            f"got bucket_lengths={bucket_lengths!r}."
        )
    lengths = list(bucket_lengths)
    for length in lengths:
        _checks.check_positive_int("bucket_lengths", length)
    increasing = all(a < b for a, b in itertools.pairwise(lengths))
    if not lengths or not increasing or lengths[-1] > max_length:
        raise ValueError(
            f"`bucket_lengths` must be a non-empty list of increasing positive ints <= "
            f"max_length={max_length}, got bucket_lengths={bucket_lengths!r}."
        )
    lengths = [int(length) for length in lengths]
    return tuple(lengths if lengths[-1] == max_length else [*lengths, max_length])


def pad_rows(ids, rows):
    """`[b, L]` → `[rows, L]` with all-PAD rows appended (b <= rows)."""
    missing = tf.cast(rows, tf.int32) - tf.shape(ids)[0]
    return tf.pad(ids, [[0, missing], [0, 0]], constant_values=PAD_ID)


def _longer_side(source, target):
    return tf.maximum(tf.shape(source)[0], tf.shape(target)[0])


def batch_dynamic(pairs, options):
    """t2t's length buckets, each batch padded to its longest pair (`shapes="dynamic"`)."""
    max_length = options.max_length
    boundaries = bucket_boundaries(max_length + 1)  # a bucket holds lengths < its boundary
    sizes = [max(1, options.batch_tokens // length) for length in [*boundaries, max_length + 1]]
    batches = pairs.bucket_by_sequence_length(
        _longer_side,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=sizes,
        padding_values=(PAD_ID, PAD_ID),
    )
    # Bucket i holds the lengths < boundaries[i].
    return _features(batches, options, boundaries, sizes, side="right")


def batch_buckets(pairs, options):
    """Batches of `batch_tokens // length` rows padded to the first of `bucket_lengths` that
    holds the pair's longer side (`shapes="buckets"`)."""
    lengths = list(options.bucket_lengths)
    sizes = [options.batch_tokens // length for length in lengths]
    lengths_t = tf.constant(lengths, tf.int64)
    sizes_t = tf.constant(sizes, tf.int64)

    def bucket(source, target):  # index of the first length >= the longer side
        longest = tf.cast(_longer_side(source, target), tf.int64)
        return tf.reduce_sum(tf.cast(lengths_t < longest, tf.int64))

    def batch(key, window):
        length, size = lengths_t[key], sizes_t[key]
        window = window.padded_batch(
            size, padded_shapes=([length], [length]), padding_values=(PAD_ID, PAD_ID)
        )  # [b <= size, length] each
        return window.map(lambda source, target: (pad_rows(source, size), pad_rows(target, size)))

    batches = pairs.group_by_window(bucket, batch, window_size_func=lambda key: sizes_t[key])
    # Bucket i holds the lengths <= lengths[i].
    return _features(batches, options, lengths, sizes, side="left")


def batch_max_length(pairs, options):
    """Every batch `[batch_tokens // max_length, max_length]` (`shapes="max_length"`)."""
    max_length = options.max_length
    size = options.batch_tokens // max_length
    batches = pairs.padded_batch(
        size,
        padded_shapes=([max_length], [max_length]),  # [b <= size, max_length] each
        padding_values=(PAD_ID, PAD_ID),
    ).map(
        lambda source, target: (
            tf.ensure_shape(pad_rows(source, size), [size, max_length]),
            tf.ensure_shape(pad_rows(target, size), [size, max_length]),
        )  # [size, max_length] each, a static shape
    )
    return _features(batches, options, [max_length], [size], side="left")


def _features(batches, options, lengths, sizes, side):
    """`(source, target)` batches → shuffled `({"inputs", "targets"}, targets)` batches, their
    number stated when known; pair i went into bucket `searchsorted(lengths, its longer side,
    side)`, in batches of `sizes[bucket]`."""
    if options.source_lengths is None:  # streamed: an epoch ends with the files
        if options.shuffle:
            batches = batches.shuffle(
                STREAM_BATCH_SHUFFLE_BUFFER, seed=options.seed, reshuffle_each_iteration=True
            )
        return batches.map(lambda source, target: ({"inputs": source, "targets": target}, target))
    # Bucketing hides the number of batches from tf.data; it only depends on how many pairs
    # fall in each bucket, so state it (Keras then shows progress and does not warn).
    pair_lengths = np.maximum(options.source_lengths, options.target_lengths)
    bucket = np.searchsorted(lengths, pair_lengths, side=side)
    counts = np.bincount(bucket, minlength=len(sizes))
    count = int(sum(-(-n // size) for n, size in zip(counts, sizes, strict=True)))
    if options.shuffle:
        # Each bucket's last, partial batch comes out when the pairs run out: shuffled, these
        # small batches spread over the epoch instead of ending it with a burst of full
        # optimizer steps on a few sentences, right before validation and the checkpoint.
        batches = batches.shuffle(
            min(count, BATCH_SHUFFLE_BUFFER), seed=options.seed, reshuffle_each_iteration=True
        )
    batches = batches.map(lambda source, target: ({"inputs": source, "targets": target}, target))
    return batches.apply(tf.data.experimental.assert_cardinality(count))
