"""Where a training run's corpus comes from, as one options object (`CorpusSource`).

`tfblocks-train` turns its corpus flags into a `CorpusSource` once
(`tfblocks.cli.corpus.corpus_source`); a program builds one directly. `read()` gives the
splits the training job takes: line-aligned files of one pair (a `corpus_dir` holding
`{train,dev,test}.{SOURCE,TARGET}`, or each split's `files`), a TSV file, the embedded
phrasebook (none of them given), or several directions (`directions`, each in its folder
of `corpus_dir`). Messages name the flags of `tfblocks-train` that set each field.
"""

import dataclasses
import os

from tfblocks.text.corpus import SPLITS

# Without `stream` set, line-aligned train files holding more than this many bytes are
# streamed: held in memory they would cost about 4.5 times as much, and a small corpus
# keeps an epoch of known length (progress bars, exact bucket counts).
STREAM_AUTO_BYTES = 64 << 20
GZIP_RATIO = 4  # a gzipped file's text: about this many times its size on disk


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """A training corpus: where it is and how much of it to read.

    Args:
        source_lang, target_lang: the pair's language codes.
        corpus_dir: a folder of `{train,dev,test}.{SOURCE,TARGET}` (or, with
            `directions`, of one folder per direction), or None.
        files: `{split: (source, target)}`, each side a comma-separated list of paths or
            globs (`--train-source` ...), for the splits given by files.
        tsv: a tab-separated file holding the whole corpus, or None.
        tsv_columns: `(source, target)` columns of `tsv`.
        stream: stream the train split from its files (None: when they hold more than
            `STREAM_AUTO_BYTES`).
        seed: the seed of the held-out rows of a TSV and of a direction's shuffle.
        limit_train, limit_test: read at most this many train / test pairs (None: all).
        directions: several directions in one model (`tfblocks-train --pairs`), or None.
        pair_temperature: how the directions are mixed (None: 1, in proportion).
    """

    source_lang: str = "ja"
    target_lang: str = "en"
    corpus_dir: str | None = None
    files: dict = dataclasses.field(default_factory=dict)
    tsv: str | None = None
    tsv_columns: tuple | None = None
    stream: bool | None = None
    seed: int = 0
    limit_train: int | None = None
    limit_test: int | None = None
    directions: tuple | None = None
    pair_temperature: float | None = None

    def origin(self, split):
        """Where `split` of the corpus comes from, for messages."""
        if split in self.files:
            source, target = self.files[split]
            return f"--{split}-source={source!r} / --{split}-target={target!r}"
        if self.corpus_dir:
            names = f"{split}.{self.source_lang}, {split}.{self.target_lang}"
            return f"--corpus-dir={self.corpus_dir!r} ({names})"
        return f"--tsv={self.tsv!r}" if self.tsv else "the phrasebook"

    def chosen_stream(self):
        """Whether the train split is streamed: `stream` as given; otherwise when its
        line-aligned files hold more than `STREAM_AUTO_BYTES` (a TSV and the phrasebook
        are held in memory). Finds the train files (a missing one is named)."""
        from tfblocks.text.lines import expand_paths, language_files

        if self.stream is not None:
            return self.stream
        if "train" in self.files:
            paths = [
                *expand_paths("--train-source", self.files["train"][0]),
                *expand_paths("--train-target", self.files["train"][1]),
            ]
        elif self.corpus_dir and not self.tsv:
            paths = [
                *language_files(self.corpus_dir, "train", self.source_lang),
                *language_files(self.corpus_dir, "train", self.target_lang),
            ]
        else:
            return False
        size = sum(
            os.path.getsize(path) * (GZIP_RATIO if os.fspath(path).endswith(".gz") else 1)
            for path in paths
        )
        return size > STREAM_AUTO_BYTES

    def read(self):
        """`{"train": ..., "dev": [...], "test": [...]}`, the limits applied; an empty
        split is refused, naming where it comes from."""
        if self.directions is not None:
            return self._read_directions()
        stream = self.chosen_stream()
        splits = self._read_files(stream)
        if stream:
            splits["train"] = splits["train"].limited(self.limit_train)
        else:
            splits["train"] = splits["train"][: self.limit_train]
        splits["test"] = splits["test"][: self.limit_test]
        for split in SPLITS:
            if not splits[split]:
                raise ValueError(
                    f"the {split} split of {self.origin(split)} has no sentence pairs."
                )
        return splits

    def _read_files(self, stream):
        """The train/dev/test pairs (every file found before one is read)."""
        from tfblocks.text import load_splits
        from tfblocks.text.lines import expand_paths

        files = {
            split: (
                expand_paths(f"--{split}-source", source),
                expand_paths(f"--{split}-target", target),
            )
            for split, (source, target) in self.files.items()
        }
        return load_splits(
            self.corpus_dir, self.tsv, source=self.source_lang, target=self.target_lang,
            seed=self.seed, files=files, tsv_columns=self.tsv_columns, stream_train=stream,
        )  # fmt: skip

    def _read_directions(self):
        """The splits of several directions: `{"train": MixedPairs, "dev": [...], "test":
        [...]}`, dev and test the directions' tagged pairs in turn; the limits apply to
        each direction. An empty split is refused, naming its direction."""
        from tfblocks.text.multilingual import MixedPairs, load_language_pairs

        limits = {"train": self.limit_train, "dev": None, "test": self.limit_test}
        pairs = []
        for pair in load_language_pairs(self.corpus_dir, self.directions, seed=self.seed):
            splits = {split: pair.splits[split][: limits[split]] for split in SPLITS}
            for split in SPLITS:
                if not splits[split]:
                    raise ValueError(
                        f"the {split} split of {pair.name} in --corpus-dir={self.corpus_dir!r} "
                        "has no sentence pairs."
                    )
            pairs.append(dataclasses.replace(pair, splits=splits))
        mixed = MixedPairs(tuple(pairs), self.pair_temperature or 1.0)
        flat = {s: [row for pair in pairs for row in pair.tagged(s)] for s in SPLITS[1:]}
        return {"train": mixed, **flat}
