"""Sentence pairs as every corpus reader keeps them: a `Corpus`, and the one rule.

The rule (`clean_pairs`): on a side that asks for it, pre-tokenized Japanese is joined
back into raw text, other sides lose the spaces at their ends, and a pair with an empty
side is skipped, counted in the `Corpus` the readers held in memory return
(`tfblocks.text.corpus`) and never yielded by the streamed one (`tfblocks.text.streamed`).

Pre-tokenized Japanese (`私 は テニス 部員 で す 。`, as in small_parallel_enja) is read back
as raw text (`私はテニス部員です。`), which is what users type and what the SentencePiece
tokenizers are trained on. A space is kept only between two ASCII letters or digits
(`Windows 10`).
"""

import dataclasses
import os
import re

# Whitespace that does not sit between two ASCII letters/digits.
_JOINABLE_SPACE = re.compile(r"(?<![A-Za-z0-9])\s+|\s+(?![A-Za-z0-9])")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Sentence pairs read from disk, with what the reader did to them.

    Iterating a `Corpus` (or `len`, indexing) goes over `pairs`, so it can be passed wherever a
    list of `(source, target)` pairs is expected.

    Attributes:
        pairs: list of `(source, target)` string tuples, in file order.
        lines: number of lines (rows) read.
        skipped_empty: number of rows skipped because a side was empty.
        paths: the file(s) read.

    Example:

    >>> corpus = Corpus([("行け。", "Go.")], lines=2, skipped_empty=1, paths=("jpn.txt",))
    >>> len(corpus), list(corpus), corpus.summary()
    (1, [('行け。', 'Go.')], 'jpn.txt: 2 lines, 1 pairs, 1 empty pairs skipped')
    """

    pairs: list
    lines: int
    skipped_empty: int
    paths: tuple

    def __len__(self):
        return len(self.pairs)

    def __iter__(self):
        return iter(self.pairs)

    def __getitem__(self, index):
        return self.pairs[index]

    def summary(self):
        """One line saying what was read, e.g. for a training log."""
        return (
            f"{' + '.join(self.paths)}: {self.lines} lines, {len(self.pairs)} pairs, "
            f"{self.skipped_empty} empty pairs skipped"
        )


def remove_japanese_spaces(text):
    """Joins pre-tokenized Japanese back into raw text, keeping spaces inside Latin runs.

    Args:
        text: a string such as `"私 は Windows 10 を 使 う 。"`.

    Returns:
        The string without the spaces that separate tokens.

    Example:

    >>> remove_japanese_spaces("私 は Windows 10 を 使 う 。")
    '私はWindows 10を使う。'
    """
    # Runs of whitespace become one space first: "a  b" keeps a space, as "a b" does.
    return _JOINABLE_SPACE.sub("", " ".join(text.split()))


def clean_pairs(rows, remove_source_spaces, remove_target_spaces):
    """Yields `(source, target)` of `rows` (one per line read) as a corpus keeps them,
    or None for a row with an empty side (skipped): the one rule of every reader.

    >>> list(clean_pairs([(" a ", "私 は"), ("b", " ")], False, True))
    [('a', '私は'), None]
    """
    for source, target in rows:
        source = remove_japanese_spaces(source) if remove_source_spaces else source.strip()
        target = remove_japanese_spaces(target) if remove_target_spaces else target.strip()
        yield (source, target) if source and target else None


def collect_pairs(rows, paths, remove_source_spaces, remove_target_spaces):
    """A `Corpus` of `rows` (an iterable of `(source, target)`, one per line read) from
    the files `paths`, kept by `clean_pairs`' rule."""
    pairs, lines, skipped = [], 0, 0
    for pair in clean_pairs(rows, remove_source_spaces, remove_target_spaces):
        lines += 1
        if pair is None:
            skipped += 1
        else:
            pairs.append(pair)
    return Corpus(pairs, lines, skipped, tuple(os.fspath(p) for p in paths))
