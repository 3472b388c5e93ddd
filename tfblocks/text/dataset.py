"""`tf.data` pipelines from sentence pairs to `model.fit` batches.

`make_dataset` tokenizes inside the `tf.data` graph with the subword tokenizers, filters pairs to
`max_length`, and batches them under a token budget (t2t's `batch_size` counts tokens, so short
sentences come in bigger batches) in one of four `shapes`:

- `"dynamic"`: t2t's fine length buckets (`bucket_boundaries`), each batch padded to its longest
  pair. Least padding, but dozens of batch shapes: XLA would compile the step for each.
- `"buckets"`: a handful of padded lengths (`fixed_bucket_lengths`: 8, 16, 24, 32, 48, 64, …) and
  one batch size per length (`batch_tokens // length`), so there are at most as many batch shapes
  as lengths and XLA compiles the step once per length.
- `"max_length"`: every batch `[batch_tokens // max_length, max_length]`: one shape (TPUs), at
  the price of the most padding.
- `"packed"` (t2t `pack_examples`): several pairs per row of `max_length` source and target
  positions, rows of `batch_tokens // max_length` per batch: one shape and almost no padding.
  Each window of `PACK_WINDOW` consecutive pairs is packed first-fit decreasing: the pairs,
  longest first, each go into the first row where both sides still fit. As in t2t, which packs
  when it writes the data, the rows are the same every epoch; their order is shuffled. Four more
  features say which pair each position belongs to (`inputs_segmentation`,
  `targets_segmentation`: 1, 2, … within a row, 0 = padding) and where it is in its pair
  (`inputs_position`, `targets_position`, from 0); `tfblocks.Transformer` confines attention
  to each pair with them, so a packed pair's loss equals its loss alone in a row.

The fixed-shape modes complete a bucket's last, partial batch with all-padding rows instead of
dropping pairs (t2t and tf.data drop them with `drop_remainder`): the loss and the metrics weigh
tokens by `targets != PAD_ID` (`tfblocks.training.losses.token_weights`), so such rows count for
nothing and every pair is seen once per epoch.

The features match `tfblocks.build_transformer`: `({"inputs": src, "targets": tgt}, tgt)` (and
the segment features when packed); the model shifts the targets right itself.
"""

import dataclasses
import itertools
import logging

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import PACKED_SOURCE_FEATURES, PACKED_TARGET_FEATURES, PAD_ID
from tfblocks.text.corpus import StreamedPairs

_LOG = logging.getLogger(__name__)


def _check_pairs(pairs):
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty.")
    for pair in pairs[:1] + pairs[-1:]:
        if len(pair) != 2 or not all(isinstance(text, str) for text in pair):
            raise TypeError(f"`pairs` must hold (source, target) string pairs, got {pair!r}.")
    return pairs


def length_summary(pairs, source_tokenizer, target_tokenizer, max_length):
    """Counts the pairs that fit in `max_length` tokens (EOS included) on both sides.

    Args:
        pairs: `(source, target)` string pairs.
        source_tokenizer: a `SubwordTokenizer` for the sources.
        target_tokenizer: a `SubwordTokenizer` for the targets.
        max_length: the longest allowed id sequence, EOS included.

    Returns:
        A dict with `pairs`, `kept`, `dropped` (longer than `max_length`), the longest
        `source_length` and `target_length`, and per pair `keep` (booleans), `lengths`
        (the longer side's length), `source_lengths` and `target_lengths`.

    Example:

    >>> from tfblocks.text.tokenizers import train_tokenizer
    >>> tokenizer = train_tokenizer(["a b c d e f", "a"] * 10, vocab_size=12)
    >>> summary = length_summary([("a", "a"), ("a b c d e f", "a")], tokenizer, tokenizer, 4)
    >>> summary["kept"], summary["dropped"], summary["keep"]
    (1, 1, [True, False])
    """
    pairs = _check_pairs(pairs)
    max_length = _checks.check_positive_int("max_length", max_length)
    source_lengths = source_tokenizer.tokenize([p[0] for p in pairs]).row_lengths().numpy()
    target_lengths = target_tokenizer.tokenize([p[1] for p in pairs]).row_lengths().numpy()
    keep = (source_lengths <= max_length) & (target_lengths <= max_length)
    return {
        "pairs": len(pairs),
        "kept": int(keep.sum()),
        "dropped": int((~keep).sum()),
        "source_length": int(source_lengths.max()),
        "target_length": int(target_lengths.max()),
        "keep": keep.tolist(),
        "lengths": np.maximum(source_lengths, target_lengths).tolist(),
        "source_lengths": source_lengths.tolist(),
        "target_lengths": target_lengths.tolist(),
    }


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


def _check_bucket_lengths(bucket_lengths, max_length):
    """`bucket_lengths` as an increasing list of ints ending with `max_length`."""
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
    return [int(length) for length in lengths[:-1]] + (
        [int(lengths[-1])] if lengths[-1] == max_length else [int(lengths[-1]), max_length]
    )


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


def _pad_rows(ids, rows):
    """`[b, L]` → `[rows, L]` with all-PAD rows appended (b <= rows)."""
    missing = tf.cast(rows, tf.int32) - tf.shape(ids)[0]
    return tf.pad(ids, [[0, missing], [0, 0]], constant_values=PAD_ID)


def _batch_in_fixed_buckets(dataset, lengths, sizes):
    """Batches of `sizes[i]` pairs padded to `[sizes[i], lengths[i]]`, pair → first length >= it."""
    lengths_t = tf.constant(lengths, tf.int64)
    sizes_t = tf.constant(sizes, tf.int64)

    def bucket(source, target):  # index of the first length >= the longer side
        longest = tf.cast(tf.maximum(tf.shape(source)[0], tf.shape(target)[0]), tf.int64)
        return tf.reduce_sum(tf.cast(lengths_t < longest, tf.int64))

    def batch(key, window):
        length, size = lengths_t[key], sizes_t[key]
        window = window.padded_batch(
            size, padded_shapes=([length], [length]), padding_values=(PAD_ID, PAD_ID)
        )  # [b <= size, length] each
        return window.map(lambda source, target: (_pad_rows(source, size), _pad_rows(target, size)))

    return dataset.group_by_window(bucket, batch, window_size_func=lambda key: sizes_t[key])


SHAPES = ("dynamic", "buckets", "max_length", "packed")
# Pairs packed together (`shapes="packed"`): the rows of a window are filled first-fit
# decreasing, so only a window's last few rows are partly empty.
PACK_WINDOW = 1024
PACKED_FEATURES = PACKED_SOURCE_FEATURES + PACKED_TARGET_FEATURES
# Batches shuffled together (see `make_dataset`): 1024 batches of 4096 tokens per side
# are 32 MiB of ids.
BATCH_SHUFFLE_BUFFER = 1024
# The shuffle buffer of a streamed corpus (`StreamedPairs`), in pairs: bounded memory.
STREAM_SHUFFLE_BUFFER = 100_000
# Its batches shuffled together: the pairs are shuffled already, and a buffer fills before
# the first step (1024 batches would hold that step back by ~300k pairs of tokenizing).
STREAM_BATCH_SHUFFLE_BUFFER = 16

# Pairs of a streamed corpus handed to `tf.data` per Python call.
STREAM_CHUNK = 1024


def _chunks(pairs):
    """`(sources, targets)` lists of up to `STREAM_CHUNK` of `pairs` at a time, in order."""
    pairs = iter(pairs)
    while chunk := list(itertools.islice(pairs, STREAM_CHUNK)):
        yield [source for source, _ in chunk], [target for _, target in chunk]


# Autotuning off: its thread makes destroying an iterator (Keras does, inside `fit`) wait
# for its pass in progress, long when training keeps every core busy. The batch shuffle
# prepares each epoch whole anyway, so fixed parallelism (one call per core) costs little.
_FIXED_PARALLELISM = tf.data.Options()
_FIXED_PARALLELISM.autotune.enabled = False


def make_dataset(
    pairs,
    source_tokenizer,
    target_tokenizer,
    *,
    batch_tokens=4096,
    max_length=64,
    shuffle=True,
    seed=None,
    shapes="dynamic",
    bucket_lengths=None,
    input_context=None,
    repeat=False,
):
    """Builds `({"inputs": src, "targets": tgt}, tgt)` batches for `model.fit`.

    Tokenization runs inside the `tf.data` graph (strings go in, int32 ids with EOS come out).
    Pairs whose source or target is longer than `max_length` ids (EOS included) are filtered
    out, not truncated, since a cut sentence would teach a wrong translation; how many were
    dropped is logged (as a warning of the `tfblocks.text.dataset` logger when any were) and
    available from `length_summary`.

    Every batch holds at most `batch_tokens` tokens per side (batch size × padded length), in
    the batch shapes that `shapes` chooses (see the module docstring):

    - `"dynamic"` (the default): t2t length buckets, each batch padded to its longest pair; many
      shapes, for training without XLA.
    - `"buckets"`: sources and targets padded to the first of `bucket_lengths` that holds the
      longer side, in batches of exactly `batch_tokens // length` rows: at most
      `len(bucket_lengths)` shapes, for XLA (`compile_transformer(..., jit_compile=True)`).
    - `"max_length"`: every batch exactly `[batch_tokens // max_length, max_length]`.
    - `"packed"`: every batch exactly `[batch_tokens // max_length, max_length]`, each row
      holding as many pairs as fit, with the segment features (module docstring).

    In the fixed-shape modes a bucket's last batch is completed with all-PAD rows, which the
    loss and metrics ignore, so no pair is dropped. The dataset knows its number of batches
    (`len(dataset)`).

    Args:
        pairs: `(source, target)` string pairs (a list, a `Corpus`, a phrasebook split),
            or a `StreamedPairs`: then the pairs flow from its files into `tf.data` as
            they are read (no list, a shuffle buffer of `STREAM_SHUFFLE_BUFFER` pairs,
            pairs longer than `max_length` dropped in the graph, no summary logged), and
            the dataset's number of batches is unknown: an epoch ends with the files.
        source_tokenizer: `SubwordTokenizer` (or anything with an in-graph `tokenize`) for the
            sources.
        target_tokenizer: the same for the targets (the same object for a shared vocabulary).
        batch_tokens: token budget of a batch (per input pipeline), >= `max_length`.
        max_length: longest id sequence kept, EOS included.
        shuffle: shuffle the pairs each epoch (buffer = all pairs), then the batches
            (buffer = the epoch's batches, at most `BATCH_SHUFFLE_BUFFER`), so the
            buckets' partial last batches do not all come at the end of the epoch;
            packed: shuffle the rows each epoch (buffer = all rows). A streamed corpus:
            buffers of `STREAM_SHUFFLE_BUFFER` pairs and `STREAM_BATCH_SHUFFLE_BUFFER`
            batches (packed: `STREAM_SHUFFLE_BUFFER // 4` rows).
        seed: optional int seed of the shuffle.
        shapes: `"dynamic"`, `"buckets"`, `"max_length"` or `"packed"`.
        bucket_lengths: the padded lengths of `shapes="buckets"`, increasing, at most
            `max_length` (which is appended if missing); default `fixed_bucket_lengths(max_length)`.
        input_context: optional `tf.distribute.InputContext` (from
            `strategy.distribute_datasets_from_function`); each input pipeline reads its
            shard: every n-th pair of n pipelines, or, for a `StreamedPairs` with `repeat`
            and at least n files a side, its own files (`pipeline_files`).
        repeat: an endless stream of passes over the pairs (for `fit(steps_per_epoch=...)`),
            each pass shuffled anew from `seed` and its number, so that the stream is the
            same in every run with the same seed.

    Returns:
        A prefetched `tf.data.Dataset` of `({"inputs": [B, S], "targets": [B, T]}, [B, T])`
        int32 batches, padded with 0, with tf.data's autotuning off (see `_FIXED_PARALLELISM`);
        packed, the features also hold the `PACKED_FEATURES`, `[B, max_length]` each.

    Example:

    >>> from tfblocks.text.tokenizers import train_tokenizer
    >>> pairs = [("今日のランチはカレーだ。", "Today's lunch is curry.")] * 8
    >>> tokenizer = train_tokenizer([t for p in pairs for t in p], vocab_size=40)
    >>> dataset = make_dataset(pairs, tokenizer, tokenizer, batch_tokens=128, max_length=32,
    ...                        shapes="max_length")
    >>> features, labels = next(iter(dataset))
    >>> tuple(features["inputs"].shape), tuple(labels.shape)
    ((4, 32), (4, 32))
    >>> dataset = make_dataset(pairs, tokenizer, tokenizer, batch_tokens=128, max_length=32,
    ...                        shapes="buckets", bucket_lengths=[16, 24, 32])
    >>> features, labels = next(iter(dataset))  # 14 + 25 ids: bucket 32, 4 rows of real pairs
    >>> tuple(features["inputs"].shape), len(dataset)
    ((4, 32), 2)
    """
    batch_tokens = _checks.check_positive_int("batch_tokens", batch_tokens)
    max_length = _checks.check_positive_int("max_length", max_length)
    if batch_tokens < max_length:
        raise ValueError(
            f"`batch_tokens` must be >= `max_length` so that a longest pair fits in a batch, "
            f"got batch_tokens={batch_tokens}, max_length={max_length}."
        )
    if not isinstance(shuffle, bool):
        raise TypeError(f"`shuffle` must be a bool, got shuffle={shuffle!r}.")
    _checks.check_choice("shapes", shapes, SHAPES)
    if shapes == "buckets":
        lengths = (
            fixed_bucket_lengths(max_length)
            if bucket_lengths is None
            else _check_bucket_lengths(bucket_lengths, max_length)
        )
    elif bucket_lengths is not None:
        raise ValueError(
            f"`bucket_lengths` is only used with shapes='buckets', got shapes={shapes!r}, "
            f"bucket_lengths={bucket_lengths!r}."
        )
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"`seed` must be an int or None, got seed={seed!r}.")
    if not isinstance(repeat, bool):
        raise TypeError(f"`repeat` must be a bool, got repeat={repeat!r}.")
    streamed = isinstance(pairs, StreamedPairs)
    own_files = None
    if streamed and repeat and input_context is not None:
        own_files = pipeline_files(pairs, input_context)
        pairs = pairs if own_files is None else own_files
    if streamed:  # read as it goes: no summary, lengths filtered in the graph
        summary = None
        dataset = tf.data.Dataset.from_generator(
            lambda: _chunks(pairs), output_signature=(tf.TensorSpec([None], tf.string),) * 2
        ).unbatch()  # one Python call per chunk: a call per pair would starve the steps
        _LOG.info("make_dataset: %s; pairs longer than max_length=%d are dropped as they "
                  "come.", pairs.summary(), max_length)  # fmt: skip
    else:
        pairs = _check_pairs(pairs)
        summary = length_summary(pairs, source_tokenizer, target_tokenizer, max_length)
        kept = [pair for pair, keep in zip(pairs, summary["keep"], strict=True) if keep]
        _LOG.log(
            logging.WARNING if summary["dropped"] else logging.INFO,  # seen without log setup
            "make_dataset: %d pairs, %d kept, %d longer than max_length=%d dropped.",
            summary["pairs"], summary["kept"], summary["dropped"], max_length,
        )  # fmt: skip
        if not kept:
            raise ValueError(f"No pair fits in max_length={max_length} tokens; raise `max_length`.")
        dataset = tf.data.Dataset.from_tensor_slices(([p[0] for p in kept], [p[1] for p in kept]))
    if input_context is not None and own_files is None:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if shuffle and shapes != "packed":  # packed: the rows are shuffled instead
        buffer = STREAM_SHUFFLE_BUFFER if streamed else len(kept)
        dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)

    def tokenize(sources, targets):  # [N] strings → padded [N, L] ids and [N] lengths
        source_ids = source_tokenizer.tokenize(sources)
        target_ids = target_tokenizer.tokenize(targets)
        return (
            (source_ids.to_tensor(), source_ids.row_lengths()),
            (target_ids.to_tensor(), target_ids.row_lengths()),
        )

    def unpad(source, target):  # [L], [] → [length] for each side
        return source[0][: source[1]], target[0][: target[1]]

    # Tokenizing 256 strings per call is much faster than one by one.
    dataset = dataset.batch(256).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.unbatch().map(unpad, num_parallel_calls=tf.data.AUTOTUNE)
    if streamed:
        dataset = dataset.filter(
            lambda source, target: tf.logical_and(
                tf.size(source) <= max_length, tf.size(target) <= max_length
            )
        )
    if shapes == "packed":
        lengths = [None, None]  # streamed: the number of rows is not known
        if not streamed:
            lengths = [
                np.array(summary[side])[summary["keep"]]
                for side in ("source_lengths", "target_lengths")
            ]
        if input_context is not None and not streamed:
            shard = slice(input_context.input_pipeline_id, None, input_context.num_input_pipelines)
            lengths = [side[shard] for side in lengths]
        rows = batch_tokens // max_length
        return _finish(_batch_packed(dataset, rows, max_length, shuffle, seed, *lengths), repeat)
    if shapes == "max_length":
        lengths = [max_length]
        batch_size = batch_tokens // max_length
        dataset = dataset.padded_batch(
            batch_size,
            padded_shapes=([max_length], [max_length]),  # [b <= B, max_length] each
            padding_values=(PAD_ID, PAD_ID),
        ).map(
            lambda source, target: (
                tf.ensure_shape(_pad_rows(source, batch_size), [batch_size, max_length]),
                tf.ensure_shape(_pad_rows(target, batch_size), [batch_size, max_length]),
            )  # [B, max_length] each, a static shape
        )
        sizes = [batch_size]
    elif shapes == "buckets":
        sizes = [batch_tokens // length for length in lengths]
        dataset = _batch_in_fixed_buckets(dataset, lengths, sizes)
    else:
        boundaries = bucket_boundaries(max_length + 1)  # a bucket holds lengths < its boundary
        sizes = [max(1, batch_tokens // length) for length in [*boundaries, max_length + 1]]
        dataset = dataset.bucket_by_sequence_length(
            lambda source, target: tf.maximum(tf.shape(source)[0], tf.shape(target)[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=sizes,
            padding_values=(PAD_ID, PAD_ID),
        )
    if streamed:  # the number of batches is not known: an epoch ends with the files
        if shuffle:
            dataset = dataset.shuffle(
                STREAM_BATCH_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True
            )
        dataset = dataset.map(
            lambda source, target: ({"inputs": source, "targets": target}, target)
        )
        return _finish(dataset, repeat)
    # Bucketing hides the number of batches from tf.data; it only depends on how many pairs
    # fall in each bucket, so state it (Keras then shows progress and does not warn).
    pair_lengths = np.array(
        [n for n, keep in zip(summary["lengths"], summary["keep"], strict=True) if keep]
    )
    if input_context is not None:
        pair_lengths = pair_lengths[
            input_context.input_pipeline_id :: input_context.num_input_pipelines
        ]
    if shapes == "dynamic":  # bucket i holds lengths < boundaries[i]
        bucket = np.searchsorted(boundaries, pair_lengths, side="right")
    else:  # bucket i holds lengths <= lengths[i]
        bucket = np.searchsorted(lengths, pair_lengths, side="left")
    counts = np.bincount(bucket, minlength=len(sizes))
    batches = int(sum(-(-count // size) for count, size in zip(counts, sizes, strict=True)))
    if shuffle:
        # Each bucket's last, partial batch comes out when the pairs run out: shuffled, these
        # small batches spread over the epoch instead of ending it with a burst of full
        # optimizer steps on a few sentences, right before validation and the checkpoint.
        dataset = dataset.shuffle(
            min(batches, BATCH_SHUFFLE_BUFFER), seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.map(lambda source, target: ({"inputs": source, "targets": target}, target))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return _finish(dataset, repeat)


def _finish(dataset, repeat):
    """The pipeline's end: endless passes with `repeat` (each pass iterates the pipeline
    anew, so its seeded shuffles draw the pass's own order), prefetched, no autotuning."""
    if repeat:
        dataset = dataset.repeat()
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_FIXED_PARALLELISM)


def pipeline_files(pairs, input_context):
    """The files of one input pipeline of a streamed corpus, or None to keep every n-th pair.

    With n input pipelines and at least n files on each side (as many on both, aligned
    file by file, and no `limit`), pipeline i reads files i, i + n, i + 2n, ... of each
    side and nothing of the others': the pipelines' pairs are disjoint and together the
    whole corpus, but in general unequal in number. `make_dataset` reads this way only
    with `repeat` (an endless stream per pipeline: every worker takes as many steps as
    the others, whatever its files hold); otherwise each pipeline reads every file and
    keeps every n-th pair, so that the pipelines end within a step of each other.

    Args:
        pairs: a `StreamedPairs`.
        input_context: a `tf.distribute.InputContext`.

    Returns:
        A `StreamedPairs` of the pipeline's files, or None.

    Example:

    >>> pairs = StreamedPairs(("a.0", "a.1", "a.2"), ("b.0", "b.1", "b.2"))
    >>> context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    >>> pipeline_files(pairs, context).sources
    ('a.1',)
    """
    count, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    sources, targets = tuple(pairs.sources), tuple(pairs.targets)
    if count < 2 or pairs.limit is not None or not count <= len(sources) == len(targets):
        return None
    return dataclasses.replace(pairs, sources=sources[index::count], targets=targets[index::count])


def distribute_dataset(strategy, pairs, source_tokenizer, target_tokenizer, *,
                       batch_tokens=4096, max_length=64, start_step=0, **options):  # fmt: skip
    """`make_dataset` for a `tf.distribute` strategy: a shard per worker, a global budget.

    `strategy.distribute_datasets_from_function` builds one input pipeline per worker,
    each calling `make_dataset(..., input_context=...)`, so that a worker tokenizes and
    batches only its own shard of the pairs (every n-th pair). `batch_tokens` is the
    budget of a whole step: each of the `strategy.num_replicas_in_sync` replicas gets
    batches of `batch_tokens // replicas` tokens, and a replica's batch comes whole from
    its worker's pipeline (no rebatching).

    The shards need not have as many batches: `fit` ends the epoch when every pipeline
    has run out, and until then a replica whose pipeline is done gets an empty batch,
    which counts for nothing in the loss and the metrics (they weigh tokens). With
    fixed shapes each pipeline's last step is completed with all-PAD batches, so no
    pair is dropped. The length of the epoch is unknown to `fit`.

    With `repeat=True` (for `fit(steps_per_epoch=...)`) each pipeline is an endless
    stream of passes over its shard, so every step has a batch for every replica (no
    empty or all-PAD batches); a streamed corpus with at least as many files a side as
    pipelines is then read file by file (`pipeline_files`: a worker reads only its own
    files). `start_step` starts the stream at that step: each pipeline skips the
    batches of the steps before it (reading and batching them, without training).

    Under `MirroredStrategy`, Keras 3's `fit` needs `tfblocks.training.multi_worker.
    patch_keras()` for such batches (`get_strategy` applies it).

    Args:
        strategy: a `tf.distribute.Strategy` (mirrored, multi-worker or TPU).
        pairs: `(source, target)` string pairs, the same list on every worker, or a
            `StreamedPairs` of the same files (each worker streams them and keeps its shard).
        source_tokenizer: as in `make_dataset`.
        target_tokenizer: as in `make_dataset`.
        batch_tokens: token budget of a step over all replicas.
        max_length: as in `make_dataset`; a replica's budget must hold a longest pair.
        start_step: with `repeat=True`, the first step of the stream to give (0: its
            beginning).
        **options: further `make_dataset` arguments (`shuffle`, `seed`, `shapes`, ...).

    Returns:
        A `tf.distribute.DistributedDataset` for `model.fit`.

    Example:

    >>> from tfblocks.text.tokenizers import train_tokenizer
    >>> pairs = [("今日のランチはカレーだ。", "Today's lunch is curry.")] * 8
    >>> tokenizer = train_tokenizer([t for p in pairs for t in p], vocab_size=40)
    >>> strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    >>> dataset = distribute_dataset(strategy, pairs, tokenizer, tokenizer, batch_tokens=128,
    ...                              max_length=32, shapes="max_length")
    >>> tuple(next(iter(dataset))[1].shape)
    (4, 32)
    """
    batch_tokens = _checks.check_positive_int("batch_tokens", batch_tokens)
    max_length = _checks.check_positive_int("max_length", max_length)
    replicas = strategy.num_replicas_in_sync
    if batch_tokens // replicas < max_length:
        raise ValueError(
            f"`batch_tokens` is the budget of a step over all {replicas} replicas, and each "
            f"replica's share ({batch_tokens // replicas}) must hold a longest pair of "
            f"max_length={max_length}: raise it to {replicas * max_length} at least, got "
            f"batch_tokens={batch_tokens}."
        )
    start_step = _checks.check_non_negative_int("start_step", start_step)
    repeat = options.get("repeat", False)
    if start_step and not repeat:
        raise ValueError(
            f"`start_step` starts an endless stream and needs repeat=True, got "
            f"start_step={start_step}, repeat={repeat!r}."
        )
    if not isinstance(pairs, StreamedPairs):  # streamed: each worker streams its shard
        pairs = _check_pairs(pairs)

    def shard(input_context):
        dataset = make_dataset(
            pairs, source_tokenizer, target_tokenizer, batch_tokens=batch_tokens // replicas,
            max_length=max_length, input_context=input_context, **options,
        )  # fmt: skip
        # A step takes one batch per local replica. Fixed shapes get no partial step
        # (outside multi-worker), so the last batches are completed to a whole step with
        # all-PAD batches, which count for nothing.
        local = replicas // input_context.num_input_pipelines
        if repeat:  # endless: each step takes `local` batches of this pipeline
            return dataset.skip(start_step * local)
        batches = int(dataset.cardinality())
        # Unknown for a streamed corpus: local - 1 all-PAD batches complete any last step
        # (those beyond it fall with the partial step that fixed shapes never take).
        missing = -batches % local if batches >= 0 else local - 1
        spec = tf.nest.flatten(dataset.element_spec)
        if missing and all(s.shape.is_fully_defined() for s in spec):
            empty = tf.nest.map_structure(
                lambda s: tf.zeros(s.shape, s.dtype), dataset.element_spec
            )  # [B, L] each
            dataset = dataset.concatenate(tf.data.Dataset.from_tensors(empty).repeat(missing))
        # The dataset counts one replica's batches, not the steps, and the other workers'
        # shards may hold more: an unknown length lets `fit` run until every pipeline is done.
        return dataset.filter(lambda *_: True)

    return strategy.distribute_datasets_from_function(shard)


def _batch_packed(dataset, rows, max_length, shuffle, seed, source_lengths, target_lengths):
    """Pairs `([len], [len])` → packed batches `(features, targets)` of `[rows, max_length]`.

    The pairs are packed in the order they come (t2t packs once, when it writes the data),
    so every epoch has the same rows, whose number follows from the lengths; `shuffle`
    shuffles the rows (buffer: all of them) each epoch.
    """
    packed_rows = None  # a streamed corpus: not known
    if source_lengths is not None:
        packed_rows = sum(
            int(pack_lengths(source_lengths[i : i + PACK_WINDOW],
                             target_lengths[i : i + PACK_WINDOW], max_length)[0].max()) + 1
            for i in range(0, len(source_lengths), PACK_WINDOW)
        )  # fmt: skip
    dataset = dataset.ragged_batch(PACK_WINDOW).map(
        lambda sources, targets: _pack_window(sources, targets, max_length)
    )  # windows of [R, L] features
    dataset = dataset.unbatch()  # packed rows
    if shuffle:
        buffer = STREAM_SHUFFLE_BUFFER // 4 if packed_rows is None else packed_rows
        dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)

    def complete(features):  # [b <= rows, L] → [rows, L], all-PAD rows appended
        return {
            name: tf.ensure_shape(_pad_rows(value, rows), [rows, max_length])
            for name, value in features.items()
        }

    dataset = dataset.batch(rows).map(complete)
    dataset = dataset.map(lambda features: (features, features["targets"]))
    if packed_rows is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(-(-packed_rows // rows)))
    return dataset
