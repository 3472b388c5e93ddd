"""`tf.data` pipelines from sentence pairs to `model.fit` batches.

`make_dataset` reads the pairs (a list, or a `StreamedPairs` of files as they are read),
tokenizes them inside the `tf.data` graph with the subword tokenizers, filters them to
`max_length`, and batches them under a token budget in one of four `shapes`: the padded
shapes of `tfblocks.text.batching` (`"dynamic"`, `"buckets"`, `"max_length"`) or the packed
rows of `tfblocks.text.packing` (`"packed"`). `distribute_dataset` does the same for a
`tf.distribute` strategy, one input pipeline per worker.

The features match `tfblocks.build_transformer`: `({"inputs": src, "targets": tgt}, tgt)` (and
the segment features when packed); the model shifts the targets right itself.
"""

import dataclasses
import itertools
import logging
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks.text import batching, packing
from tfblocks.text.batching import STREAM_SHUFFLE_BUFFER
from tfblocks.text.multilingual import MixedPairs
from tfblocks.text.shapes import SHAPES
from tfblocks.text.streamed import StreamedPairs

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


@dataclasses.dataclass(frozen=True)
class _Shape:
    """How `make_dataset` batches for one value of `shapes`."""

    # (pairs `([len], [len])` ids, `batching.BatchOptions`) → `(features, targets)` batches.
    batch: Callable
    # Shuffle the pairs before batching; packed: the rows, packed once, are shuffled instead.
    shuffles_pairs: bool = True


_SHAPES = {
    "dynamic": _Shape(batching.batch_dynamic),
    "buckets": _Shape(batching.batch_buckets),
    "max_length": _Shape(batching.batch_max_length),
    "packed": _Shape(packing.batch_packed, shuffles_pairs=False),
}  # keyed by SHAPES, in its order (tests/text/test_dataset.py checks)

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
    the batch shapes that `shapes` chooses (`tfblocks.text.batching`, `tfblocks.text.packing`):

    - `"dynamic"` (the default): t2t length buckets, each batch padded to its longest pair; many
      shapes, for training without XLA.
    - `"buckets"`: sources and targets padded to the first of `bucket_lengths` that holds the
      longer side, in batches of exactly `batch_tokens // length` rows: at most
      `len(bucket_lengths)` shapes, for XLA (`compile_transformer(..., jit_compile=True)`).
    - `"max_length"`: every batch exactly `[batch_tokens // max_length, max_length]`.
    - `"packed"`: every batch exactly `[batch_tokens // max_length, max_length]`, each row
      holding as many pairs as fit, with the segment features (`tfblocks.text.packing`).

    In the fixed-shape modes a bucket's last batch is completed with all-PAD rows, which the
    loss and metrics ignore, so no pair is dropped. The dataset knows its number of batches
    (`len(dataset)`).

    Args:
        pairs: `(source, target)` string pairs (a list, a `Corpus`, a phrasebook split),
            or a `StreamedPairs`: then the pairs flow from its files into `tf.data` as
            they are read (no list, a shuffle buffer of `STREAM_SHUFFLE_BUFFER` pairs,
            pairs longer than `max_length` dropped in the graph, no summary logged), and
            the dataset's number of batches is unknown: an epoch ends with the files.
            A `tfblocks.text.multilingual.MixedPairs`: several directions' tagged pairs
            drawn by temperature sampling inside `tf.data`, as a stream (`seed` seeds the
            draws; the number of batches is unknown).
        source_tokenizer: `SubwordTokenizer` (or anything with an in-graph `tokenize`) for the
            sources.
        target_tokenizer: the same for the targets (the same object for a shared vocabulary).
        batch_tokens: token budget of a batch (per input pipeline), >= `max_length`.
        max_length: longest id sequence kept, EOS included.
        shuffle: shuffle the pairs each epoch (buffer = all pairs), then the batches
            (buffer = the epoch's batches, at most `batching.BATCH_SHUFFLE_BUFFER`), so the
            buckets' partial last batches do not all come at the end of the epoch;
            packed: shuffle the rows each epoch (buffer = all rows). A streamed corpus:
            buffers of `STREAM_SHUFFLE_BUFFER` pairs and `batching.STREAM_BATCH_SHUFFLE_BUFFER`
            batches (packed: `STREAM_SHUFFLE_BUFFER // 4` rows).
        seed: optional int seed of the shuffle.
        shapes: `"dynamic"`, `"buckets"`, `"max_length"` or `"packed"`.
        bucket_lengths: the padded lengths of `shapes="buckets"`, increasing, at most
            `max_length` (which is appended if missing); default `fixed_bucket_lengths(max_length)`.
        input_context: optional `tf.distribute.InputContext` (from
            `strategy.distribute_datasets_from_function`); each input pipeline reads its
            shard: every n-th pair of n pipelines, or, for a `StreamedPairs` with `repeat`
            and at least n files a side, its own files (`_pipeline_files`).
        repeat: an endless stream of passes over the pairs (for `fit(steps_per_epoch=...)`),
            each pass shuffled anew from `seed` and its number, so that the stream is the
            same in every run with the same seed.

    Returns:
        A prefetched `tf.data.Dataset` of `({"inputs": [B, S], "targets": [B, T]}, [B, T])`
        int32 batches, padded with 0, with tf.data's autotuning off (see `_FIXED_PARALLELISM`);
        packed, the features also hold the `packing.PACKED_FEATURES`, `[B, max_length]` each.

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
    batch_tokens, max_length, bucket_lengths = _check_arguments(
        batch_tokens, max_length, shuffle, seed, shapes, bucket_lengths, repeat
    )
    dataset, lengths = _read(
        pairs, source_tokenizer, target_tokenizer, max_length, input_context, repeat, seed
    )
    if shuffle and _SHAPES[shapes].shuffles_pairs:
        buffer = STREAM_SHUFFLE_BUFFER if lengths is None else len(lengths[0])
        dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = _tokenize(
        dataset, source_tokenizer, target_tokenizer, max_length, streamed=lengths is None
    )
    if lengths is None:  # streamed: the lengths, and so the number of batches, are not known
        lengths = (None, None)
    elif input_context is not None:  # this pipeline's pairs: every n-th
        shard = slice(input_context.input_pipeline_id, None, input_context.num_input_pipelines)
        lengths = tuple(side[shard] for side in lengths)
    options = batching.BatchOptions(
        batch_tokens=batch_tokens, max_length=max_length, shuffle=shuffle, seed=seed,
        bucket_lengths=bucket_lengths, source_lengths=lengths[0], target_lengths=lengths[1],
    )  # fmt: skip
    return _finish(_SHAPES[shapes].batch(dataset, options), repeat)


def _check_arguments(batch_tokens, max_length, shuffle, seed, shapes, bucket_lengths, repeat):
    """`make_dataset`'s options checked: `(batch_tokens, max_length, bucket_lengths)`."""
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
        bucket_lengths = batching.check_bucket_lengths(bucket_lengths, max_length)
    elif bucket_lengths is not None:
        raise ValueError(
            f"`bucket_lengths` is only used with shapes='buckets', got shapes={shapes!r}, "
            f"bucket_lengths={bucket_lengths!r}."
        )
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"`seed` must be an int or None, got seed={seed!r}.")
    if not isinstance(repeat, bool):
        raise TypeError(f"`repeat` must be a bool, got repeat={repeat!r}.")
    return batch_tokens, max_length, bucket_lengths


def _read(pairs, source_tokenizer, target_tokenizer, max_length, input_context, repeat, seed):
    """The pairs as a dataset of `(source, target)` strings, this input pipeline's shard, and
    the `(source, target)` id lengths `[N]` of every pipeline's kept pairs (None streamed or
    mixed)."""
    if isinstance(pairs, MixedPairs):  # drawn as it goes: lengths filtered in the graph
        _LOG.info("make_dataset: %s", pairs.summary())
        dataset = pairs.dataset(seed)
        if input_context is not None:
            dataset = dataset.shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id
            )
        return dataset, None
    if isinstance(pairs, StreamedPairs):  # read as it goes: lengths filtered in the graph
        own_files = None
        if repeat and input_context is not None:
            own_files = _pipeline_files(pairs, input_context)
        pairs = pairs if own_files is None else own_files
        dataset = tf.data.Dataset.from_generator(
            lambda: _chunks(pairs), output_signature=(tf.TensorSpec([None], tf.string),) * 2
        ).unbatch()  # one Python call per chunk: a call per pair would starve the steps
        _LOG.info("make_dataset: %s; pairs longer than max_length=%d are dropped as they "
                  "come.", pairs.summary(), max_length)  # fmt: skip
        if input_context is not None and own_files is None:
            dataset = dataset.shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id
            )
        return dataset, None
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
    if input_context is not None:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    keep = np.array(summary["keep"])
    lengths = tuple(np.array(summary[side])[keep] for side in ("source_lengths", "target_lengths"))
    return dataset, lengths


def _tokenize(dataset, source_tokenizer, target_tokenizer, max_length, streamed):
    """`(source, target)` strings → `([length], [length])` int32 ids with EOS; a streamed
    corpus's pairs longer than `max_length` are dropped here (a list's were when read)."""

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
    return dataset


def _finish(dataset, repeat):
    """The pipeline's end: endless passes with `repeat` (each pass iterates the pipeline
    anew, so its seeded shuffles draw the pass's own order), prefetched, no autotuning."""
    if repeat:
        dataset = dataset.repeat()
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_FIXED_PARALLELISM)


def _pipeline_files(pairs, input_context):
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
    >>> _pipeline_files(pairs, context).sources
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
    pipelines is then read file by file (a worker reads only its own files). `start_step`
    starts the stream at that step: each pipeline skips the batches of the steps before it
    (reading and batching them, without training).

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
    if not isinstance(pairs, StreamedPairs | MixedPairs):  # each worker reads its shard
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
