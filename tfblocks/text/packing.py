"""Packing several pairs into each row of a batch: `make_dataset(shapes="packed")`.

t2t's `pack_examples`: rows of `max_length` source and target positions, `batch_tokens //
max_length` rows per batch: one shape and almost no padding. Each window of `PACK_WINDOW`
consecutive pairs is packed first-fit decreasing (`pack_lengths`): the pairs, longest first,
each go into the first row where both sides still fit. As in t2t, which packs when it writes
the data, the rows are the same every epoch; their order is shuffled. Four more features say
which pair each position belongs to (`inputs_segmentation`, `targets_segmentation`: 1, 2, …
within a row, 0 = padding) and where it is in its pair (`inputs_position`,
`targets_position`, from 0); `tfblocks.Transformer` confines attention to each pair with
them, so a packed pair's loss equals its loss alone in a row. A batch's last rows, when the
pairs run out, are all padding, which counts for nothing.
"""

import numpy as np
import tensorflow as tf

from tfblocks.ids import PACKED_SOURCE_FEATURES, PACKED_TARGET_FEATURES
from tfblocks.text.batching import STREAM_SHUFFLE_BUFFER, pad_rows

# Pairs packed together: the rows of a window are filled first-fit decreasing, so only a
# window's last few rows are partly empty.
PACK_WINDOW = 1024
PACKED_FEATURES = PACKED_SOURCE_FEATURES + PACKED_TARGET_FEATURES


def pack_lengths(source_lengths, target_lengths, max_length):
    """Assigns pairs to rows of `max_length` source and target positions, first-fit decreasing.

    Pairs are taken longest first (the longer side, ties in input order); each goes into
    the first row where both of its sides still fit, or opens a new row.

    Args:
        source_lengths: int `[N]`, each pair's source length (<= `max_length`).
        target_lengths: int `[N]`, each pair's target length (<= `max_length`).
        max_length: the positions of a row, per side.

    Returns:
        int64 arrays `(row, source_offset, target_offset, segment)`, each `[N]`: the pair's
        row, where its source and target start in that row, and its segment id (1, 2, …
        within the row, in the order the pairs were placed).

    Example:

    >>> row, source_offset, target_offset, segment = pack_lengths([3, 2, 2], [2, 3, 1], 5)
    >>> row.tolist(), source_offset.tolist(), target_offset.tolist(), segment.tolist()
    ([0, 0, 1], [0, 3, 0], [0, 2, 0], [1, 2, 1])
    """
    source_lengths = np.asarray(source_lengths, np.int64)
    target_lengths = np.asarray(target_lengths, np.int64)
    count = len(source_lengths)
    if (source_lengths > max_length).any() or (target_lengths > max_length).any():
        raise ValueError(f"A pair is longer than max_length={max_length}: it cannot be packed.")
    row, source_offset, target_offset, segment = (np.zeros(count, np.int64) for _ in range(4))
    # Filled positions of the open rows (at most `count` rows).
    source_fill = np.zeros(count, np.int64)
    target_fill = np.zeros(count, np.int64)
    pairs_in_row = np.zeros(count, np.int64)
    rows = 0
    for i in np.argsort(-np.maximum(source_lengths, target_lengths), kind="stable"):
        fits = (source_fill[:rows] + source_lengths[i] <= max_length) & (
            target_fill[:rows] + target_lengths[i] <= max_length
        )
        found = np.flatnonzero(fits)
        r = found[0] if len(found) else rows
        rows = max(rows, r + 1)
        row[i], source_offset[i], target_offset[i] = r, source_fill[r], target_fill[r]
        pairs_in_row[r] += 1
        segment[i] = pairs_in_row[r]
        source_fill[r] += source_lengths[i]
        target_fill[r] += target_lengths[i]
    return row, source_offset, target_offset, segment


def packing_summary(source_lengths, target_lengths, max_length, batch_tokens):
    """How `batch_packed` packs pairs of these lengths, in their order: its rows, batches
    and the share of their positions that are padding on each side.

    Args:
        source_lengths: int `[N]`, each pair's source length (<= `max_length`).
        target_lengths: int `[N]`, each pair's target length (<= `max_length`).
        max_length: the positions of a row, per side.
        batch_tokens: the positions of a batch (`batch_tokens // max_length` rows).

    Returns:
        A dict: `rows`, `batches`, `source_padding` and `target_padding` (fractions of
        the batches' positions, the last batch's all-PAD rows included).

    Example:

    >>> summary = packing_summary([3, 2, 2], [2, 3, 1], max_length=5, batch_tokens=10)
    >>> summary["rows"], summary["batches"], round(summary["target_padding"], 2)
    (2, 1, 0.4)
    """
    source_lengths = np.asarray(source_lengths, np.int64)
    target_lengths = np.asarray(target_lengths, np.int64)
    rows = sum(
        int(pack_lengths(source_lengths[i : i + PACK_WINDOW],
                         target_lengths[i : i + PACK_WINDOW], max_length)[0].max()) + 1
        for i in range(0, len(source_lengths), PACK_WINDOW)
    )  # fmt: skip
    per_batch = batch_tokens // max_length
    batches = -(-rows // per_batch)
    positions = batches * per_batch * max_length
    return {
        "rows": rows,
        "batches": batches,
        "source_padding": 1.0 - float(source_lengths.sum()) / positions,
        "target_padding": 1.0 - float(target_lengths.sum()) / positions,
    }


def _pack_window(sources, targets, max_length):
    """Packs a window of pairs (ragged `[N, (len)]` ids) into rows: a dict of `[R, max_length]`
    int32 features (`inputs`, `targets` and `PACKED_FEATURES`)."""
    row, source_offset, target_offset, segment = tf.numpy_function(
        lambda s, t: pack_lengths(s, t, max_length),
        [sources.row_lengths(), targets.row_lengths()],
        [tf.int64] * 4,
        stateful=False,
    )  # [N] each
    rows = tf.reduce_max(row) + 1

    def scatter(ids, offset, prefix):  # ids [N, (len)] → the side's four [R, L] features
        pair = ids.value_rowids()  # [tokens]: the pair of each token
        position = tf.range(tf.size(pair, tf.int64)) - tf.gather(ids.row_starts(), pair)
        where = tf.stack([tf.gather(row, pair), tf.gather(offset, pair) + position], axis=1)
        shape = tf.stack([rows, tf.constant(max_length, tf.int64)])

        def place(values):  # [tokens] → [R, L], 0 where nothing is placed
            return tf.cast(tf.scatter_nd(where, tf.cast(values, tf.int64), shape), tf.int32)

        return {
            prefix: place(ids.flat_values),
            f"{prefix}_segmentation": place(tf.gather(segment, pair)),
            f"{prefix}_position": place(position),
        }

    return {
        **scatter(sources, source_offset, "inputs"),
        **scatter(targets, target_offset, "targets"),
    }


def batch_packed(pairs, options):
    """Pairs `([len], [len])` → packed batches `(features, targets)` of `[rows, max_length]`,
    `rows = batch_tokens // max_length` (a `tfblocks.text.batching.BatchOptions` says them).

    The pairs are packed in the order they come (t2t packs once, when it writes the data),
    so every epoch has the same rows, whose number follows from the pairs' lengths (unknown
    for a streamed corpus); `options.shuffle` shuffles the rows (buffer: all of them, or
    `STREAM_SHUFFLE_BUFFER // 4` streamed) each epoch.
    """
    max_length = options.max_length
    rows = options.batch_tokens // max_length
    source_lengths, target_lengths = options.source_lengths, options.target_lengths
    packed_rows = None  # a streamed corpus: not known
    if source_lengths is not None:
        summary = packing_summary(source_lengths, target_lengths, max_length, options.batch_tokens)
        packed_rows = summary["rows"]
    dataset = pairs.ragged_batch(PACK_WINDOW).map(
        lambda sources, targets: _pack_window(sources, targets, max_length)
    )  # windows of [R, L] features
    dataset = dataset.unbatch()  # packed rows
    if options.shuffle:
        buffer = STREAM_SHUFFLE_BUFFER // 4 if packed_rows is None else packed_rows
        dataset = dataset.shuffle(buffer, seed=options.seed, reshuffle_each_iteration=True)

    def complete(features):  # [b <= rows, L] → [rows, L], all-PAD rows appended
        return {
            name: tf.ensure_shape(pad_rows(value, rows), [rows, max_length])
            for name, value in features.items()
        }

    dataset = dataset.batch(rows).map(complete)
    dataset = dataset.map(lambda features: (features, features["targets"]))
    if packed_rows is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(-(-packed_rows // rows)))
    return dataset
