"""`tf.data` pipelines from sentence pairs to `model.fit` batches.

`make_dataset` tokenizes inside the `tf.data` graph with the subword tokenizers, filters pairs to
`max_length`, and batches them either by length bucket under a token budget (t2t's `batch_size`
counts tokens, so short sentences come in bigger batches) or, for TPU/XLA, at one fixed shape.
The features match `tfblocks.build_transformer`: `({"inputs": src, "targets": tgt}, tgt)`; the
model shifts the targets right itself.
"""

import logging

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.ids import PAD_ID

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
        `source_length` and `target_length`, and per pair `keep` (booleans) and `lengths`
        (the longer side's length).

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


def make_dataset(
    pairs,
    source_tokenizer,
    target_tokenizer,
    *,
    batch_tokens=4096,
    max_length=64,
    shuffle=True,
    seed=None,
    static_shapes=False,
    input_context=None,
):
    """Builds `({"inputs": src, "targets": tgt}, tgt)` batches for `model.fit`.

    Tokenization runs inside the `tf.data` graph (strings go in, int32 ids with EOS come out).
    Pairs whose source or target is longer than `max_length` ids (EOS included) are filtered
    out, not truncated, since a cut sentence would teach a wrong translation; how many were
    dropped is logged (as a warning of the `tfblocks.text.dataset` logger when any were) and
    available from `length_summary`.

    With `static_shapes=False` examples are grouped into t2t length buckets and each batch holds
    at most `batch_tokens` tokens per side (batch size × padded length); with
    `static_shapes=True` every batch is exactly `[batch_tokens // max_length, max_length]` and
    the last partial batch is dropped, as TPUs and XLA need. Either way the dataset knows its
    number of batches (`len(dataset)`).

    Args:
        pairs: `(source, target)` string pairs (a list, a `Corpus`, a phrasebook split).
        source_tokenizer: `SubwordTokenizer` (or anything with an in-graph `tokenize`) for the
            sources.
        target_tokenizer: the same for the targets (the same object for a shared vocabulary).
        batch_tokens: token budget of a batch (per input pipeline), >= `max_length`.
        max_length: longest id sequence kept, EOS included.
        shuffle: shuffle the pairs each epoch (buffer = all pairs).
        seed: optional int seed of the shuffle.
        static_shapes: pad to fixed `[batch, max_length]` batches with `drop_remainder=True`.
        input_context: optional `tf.distribute.InputContext` (from
            `strategy.distribute_datasets_from_function`); each input pipeline reads its shard.

    Returns:
        A prefetched `tf.data.Dataset` of `({"inputs": [B, S], "targets": [B, T]}, [B, T])`
        int32 batches, padded with 0.

    Example:

    >>> from tfblocks.text.tokenizers import train_tokenizer
    >>> pairs = [("今日のランチはカレーだ。", "Today's lunch is curry.")] * 8
    >>> tokenizer = train_tokenizer([t for p in pairs for t in p], vocab_size=40)
    >>> dataset = make_dataset(pairs, tokenizer, tokenizer, batch_tokens=128, max_length=32,
    ...                        static_shapes=True)
    >>> features, labels = next(iter(dataset))
    >>> tuple(features["inputs"].shape), tuple(labels.shape)
    ((4, 32), (4, 32))
    """
    batch_tokens = _checks.check_positive_int("batch_tokens", batch_tokens)
    max_length = _checks.check_positive_int("max_length", max_length)
    if batch_tokens < max_length:
        raise ValueError(
            f"`batch_tokens` must be >= `max_length` so that a longest pair fits in a batch, "
            f"got batch_tokens={batch_tokens}, max_length={max_length}."
        )
    for name, value in (("shuffle", shuffle), ("static_shapes", static_shapes)):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be a bool, got {name}={value!r}.")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"`seed` must be an int or None, got seed={seed!r}.")
    pairs = _check_pairs(pairs)
    summary = length_summary(pairs, source_tokenizer, target_tokenizer, max_length)
    kept = [pair for pair, keep in zip(pairs, summary["keep"], strict=True) if keep]
    _LOG.log(
        logging.WARNING if summary["dropped"] else logging.INFO,  # visible without log setup
        "make_dataset: %d pairs, %d kept, %d longer than max_length=%d dropped.",
        summary["pairs"], summary["kept"], summary["dropped"], max_length,
    )  # fmt: skip
    if not kept:
        raise ValueError(f"No pair fits in max_length={max_length} tokens; raise `max_length`.")
    dataset = tf.data.Dataset.from_tensor_slices(([p[0] for p in kept], [p[1] for p in kept]))
    if input_context is not None:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if shuffle:
        dataset = dataset.shuffle(len(kept), seed=seed, reshuffle_each_iteration=True)

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
    if static_shapes:
        batch_size = batch_tokens // max_length
        dataset = dataset.padded_batch(
            batch_size,
            padded_shapes=([max_length], [max_length]),  # [B, max_length] each
            padding_values=(PAD_ID, PAD_ID),
            drop_remainder=True,
        )
    else:
        boundaries = bucket_boundaries(max_length + 1)  # a bucket holds lengths < its boundary
        sizes = [max(1, batch_tokens // length) for length in [*boundaries, max_length + 1]]
        dataset = dataset.bucket_by_sequence_length(
            lambda source, target: tf.maximum(tf.shape(source)[0], tf.shape(target)[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=sizes,
            padding_values=(PAD_ID, PAD_ID),
        )
    dataset = dataset.map(lambda source, target: ({"inputs": source, "targets": target}, target))
    # Bucketing hides the number of batches from tf.data; it only depends on how many pairs
    # fall in each bucket, so state it (Keras then shows progress and does not warn).
    lengths = np.array(
        [n for n, keep in zip(summary["lengths"], summary["keep"], strict=True) if keep]
    )
    if input_context is not None:
        lengths = lengths[input_context.input_pipeline_id :: input_context.num_input_pipelines]
    if static_shapes:
        batches = len(lengths) // batch_size
    else:
        counts = np.bincount(
            np.searchsorted(boundaries, lengths, side="right"), minlength=len(sizes)
        )
        batches = int(sum(-(-count // size) for count, size in zip(counts, sizes, strict=True)))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)
