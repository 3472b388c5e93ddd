"""A corpus streamed from its files each time it is read, never held: `StreamedPairs`.

What `tfblocks-train --stream` trains on, and what `load_splits(stream_train=True)`
gives as the train split: the pairs `read_parallel` would keep (`clean_pairs`' rule),
read from plain, gzipped or sharded files (`tfblocks.text.lines`) when iterated.
`sample_pairs` draws a seeded sample of any pairs without holding them, in two passes
over a streamed corpus' files.
"""

import dataclasses
import hashlib
import itertools
import os
import random
import zlib

from tfblocks.text.lines import aligned_lines, count_lines, pick_lines
from tfblocks.text.pairs import clean_pairs

FINGERPRINT_BYTES = 1 << 20  # a streamed corpus is identified by each file's first and last MiB


@dataclasses.dataclass(frozen=True)
class StreamedPairs:
    """A line-aligned corpus read from its files each time it is iterated, never held.

    What `tfblocks-train --stream` trains on: iterating it streams the files
    (`tfblocks.text.lines.aligned_lines`: plain, gzipped or sharded; misaligned or
    unreadable files raise while streaming, naming file and line) and yields the pairs
    `read_parallel` would keep (Japanese joined on a side that asks for it, pairs with an
    empty side skipped), at most `limit` of them. `make_dataset` feeds it to `tf.data`
    without a list, `train_tokenizers(..., sample=N)` samples it in two fast passes
    (`sample`), and `fingerprint` identifies it without reading it.

    Attributes:
        sources: the source files, read in order.
        targets: the target files.
        remove_source_spaces: join pre-tokenized Japanese on the source side.
        remove_target_spaces: the same on the target side.
        limit: None, or the most pairs to yield.

    Example:

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.xx").write_text("a b\\n\\nc\\n", encoding="utf-8")
    >>> _ = (folder / "a.yy").write_text("A B\\nx\\nC\\n", encoding="utf-8")
    >>> pairs = StreamedPairs((str(folder / "a.xx"),), (str(folder / "a.yy"),))
    >>> list(pairs), len(pairs.fingerprint())
    ([('a b', 'A B'), ('c', 'C')], 16)
    """

    sources: tuple
    targets: tuple
    remove_source_spaces: bool = False
    remove_target_spaces: bool = False
    limit: object = None

    def __iter__(self):
        rows = aligned_lines(list(self.sources), list(self.targets))
        pairs = (
            pair
            for pair in clean_pairs(rows, self.remove_source_spaces, self.remove_target_spaces)
            if pair is not None
        )
        return pairs if self.limit is None else itertools.islice(pairs, self.limit)

    def sample(self, size, seed=0):
        """A seeded uniform random sample of at most `size` of the pairs, in corpus order
        (all of them when there are no more), drawn in two fast passes over the files:
        one counts their lines (checking that they are UTF-8 and aligned), the other
        takes the drawn lines. An unreadable or misaligned file raises what iterating
        raises (file and line named). With a `limit`, the first `limit` pairs are
        sampled as they are read instead (`sample_pairs`).
        """
        if self.limit is not None:
            return sample_pairs(self, size, seed)
        sources, targets = list(self.sources), list(self.targets)
        try:
            counts = [[count_lines(p) for p in side] for side in (sources, targets)]
        except (ValueError, OSError, EOFError, zlib.error):
            counts = None
        if counts is not None:
            paired = zip(*counts, strict=True) if len(sources) == len(targets) else []
            aligned = sum(counts[0]) == sum(counts[1]) and all(a == b for a, b in paired)
            empty_shard = any(len(side) > 1 and 0 in side for side in counts)
        if counts is None or not aligned or empty_shard:
            for _ in aligned_lines(sources, targets):  # raises the error that names the line
                pass
            raise RuntimeError(f"the line counts of {sources} and {targets} do not agree.")
        total = sum(counts[0])
        positions = sorted(random.Random(seed).sample(range(total), min(size, total)))
        rows = zip(pick_lines(sources, positions), pick_lines(targets, positions), strict=True)
        cleaned = clean_pairs(rows, self.remove_source_spaces, self.remove_target_spaces)
        return [pair for pair in cleaned if pair is not None]

    def limited(self, limit):
        """The same corpus, cut to its first `limit` pairs (None: unchanged)."""
        return self if limit is None else dataclasses.replace(self, limit=limit)

    def fingerprint(self):
        """A short SHA-256 of the files' names, sizes, first and last MiB (and `limit`):
        what tells a run folder it sees the same corpus, without a pass over its lines."""
        digest = hashlib.sha256(repr((self.limit, self.remove_source_spaces,
                                      self.remove_target_spaces)).encode())  # fmt: skip
        for path in (*self.sources, *self.targets):
            size = os.path.getsize(path)
            digest.update(f"{os.path.basename(path)}\0{size}\0".encode())
            with open(path, "rb") as file:
                digest.update(file.read(FINGERPRINT_BYTES))
                file.seek(max(size - FINGERPRINT_BYTES, 0))
                digest.update(file.read(FINGERPRINT_BYTES))
        return digest.hexdigest()[:16]

    def summary(self):
        """One line saying what is streamed."""
        files = len(self.sources) + len(self.targets)
        cut = "" if self.limit is None else f", at most {self.limit} pairs"
        return f"streamed from {files} files ({self.sources[0]}, ...{cut})"


def sample_pairs(pairs, sample, seed=0):
    """A seeded uniform random sample of at most `sample` of `pairs` (any iterable, read
    once, never held whole: reservoir sampling), in their order; all of them when there
    are no more than `sample`.

    >>> sample_pairs(range(10), 3, seed=1), sample_pairs(range(2), 3)
    ([5, 6, 7], [0, 1])
    """
    if isinstance(pairs, StreamedPairs) and pairs.limit is None:
        return pairs.sample(sample, seed)  # two passes over its files, no line split off
    rng = random.Random(seed)
    kept = []  # (position, pair)
    for position, pair in enumerate(pairs):
        if position < sample:
            kept.append((position, pair))
        else:
            slot = rng.randrange(position + 1)
            if slot < sample:
                kept[slot] = (position, pair)
    return [pair for _, pair in sorted(kept, key=lambda item: item[0])]
