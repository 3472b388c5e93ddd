"""Readers for parallel corpora: line-aligned file pairs and tab-separated files, and
`load_splits`, the train/dev/test pairs of a language pair from either (or the phrasebook).

Both readers fail loudly instead of losing data: files with different line counts, bytes that are
not UTF-8 and TSV rows with too few columns raise `ValueError` naming the file (and line). A pair
with an empty side is skipped and counted in the returned `Corpus`, never silently dropped
(`tfblocks.text.pairs`, whose rule also joins pre-tokenized Japanese). With
`stream_train=True`, `load_splits` gives the train split as a corpus read from its files
each time it is iterated (`tfblocks.text.streamed`).
"""

import os
import random
import re
import typing

from tfblocks.text.lines import (
    aligned_lines,
    file_language,
    file_lines,
    invalid_utf8,
    is_japanese,
    language_files,
)
from tfblocks.text.pairs import collect_pairs, remove_japanese_spaces
from tfblocks.text.phrasebook import load_phrasebook
from tfblocks.text.streamed import StreamedPairs


def _read_lines(path):
    """The decoded lines of a file (plain or `.gz`); errors name the file and line."""
    return [line for _, line in file_lines(path)]


def decode_lines(data, name):
    """The lines of UTF-8 bytes (a file's, standard input's) as `split_lines` gives them.

    Raises:
        ValueError: the bytes are not UTF-8; the message names `name`, the line and
            the offending byte.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise invalid_utf8(name, line, data, error) from None
    return split_lines(text)


def split_lines(text):
    """The lines of a decoded text (a file's, standard input's), as the readers see them.

    No line ends (`\\n` or `\\r\\n`), no byte-order mark, no empty line after a final
    newline; other whitespace is kept.

    >>> split_lines("\\ufeffa b\\r\\n\\nc\\n")
    ['a b', '', 'c']
    """
    if text.startswith("\ufeff"):  # a byte-order mark is not part of the first sentence
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":  # the newline ending the last line
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _check_flag(name, value):
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True, False or None, got {name}={value!r}.")


def _removes_spaces(path, flag):
    """The readers' rule: join pre-tokenized Japanese when asked, or by default in a file
    whose language suffix is `ja` (`x.ja`, `x.ja.gz`, `x.ja-00000-of-00002`)."""
    return is_japanese(file_language(path)) if flag is None else flag


def read_sentences(path, *, remove_spaces=None):
    """The lines of a one-sentence-a-line file, joined by the `*.ja` rule of `read_parallel`.

    What `tfblocks-translate --input` and `tfblocks-evaluate` read: a model trained on a
    corpus whose `.ja` files were joined (`remove_japanese_spaces`) must be given joined
    sentences too; the spaced tokens of small_parallel_enja's `test.ja` are input it never
    saw in training. Unlike `read_parallel`, lines are neither stripped nor skipped.

    Args:
        path: a UTF-8 text file, one sentence a line.
        remove_spaces: join pre-tokenized Japanese (`remove_japanese_spaces`); None
            (default) means "if `path` ends in `.ja`". Other lines are kept as they are.

    Returns:
        One string per line, without its line end; an empty line stays an empty string.

    Raises:
        ValueError: if the file is not valid UTF-8 (file and line are named).
        TypeError: if `remove_spaces` is not True, False or None.

    Example:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "test.ja"
    >>> _ = path.write_text("今日 の ランチ は カレー だ 。\\n\\n", encoding="utf-8")
    >>> read_sentences(path), read_sentences(path, remove_spaces=False)
    (['今日のランチはカレーだ。', ''], ['今日 の ランチ は カレー だ 。', ''])
    """
    _check_flag("remove_spaces", remove_spaces)
    lines = _read_lines(path)
    if not _removes_spaces(path, remove_spaces):
        return lines
    return [remove_japanese_spaces(line) for line in lines]


def _file_list(name, value):
    """`value` (one path, or a list of paths read in order) as a non-empty list."""
    paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    if not paths or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        raise ValueError(
            f"`{name}` must be a path or a non-empty list of paths, got {name}={value!r}."
        )
    return paths


def read_parallel(src_path, tgt_path, *, remove_source_spaces=None, remove_target_spaces=None):
    """Reads line-aligned files: line N of `src_path` translates to line N of `tgt_path`.

    Each side is one file or a list of files read in order (shards; each plain or gzipped,
    `*.gz`); the files are streamed line by line. With as many files on each side, file i
    of one side is aligned with file i of the other.

    Args:
        src_path: source-language file(s) (e.g. `train.ja`), UTF-8, one sentence a line.
        tgt_path: target-language file(s) (e.g. `train.en`) with the same number of lines.
        remove_source_spaces: join pre-tokenized Japanese on the source side
            (`remove_japanese_spaces`); None (default) means "if the first source file's
            language suffix is `ja`" (`x.ja`, `x.ja.gz`, `x.ja-00000-of-00004`).
        remove_target_spaces: the same for the target side.

    Returns:
        A `Corpus`; pairs with an empty side are skipped and counted in `skipped_empty`.

    Raises:
        ValueError: if the sides differ in length (both files, their line counts and the
            line where one ends are named), a file is not valid UTF-8 (file and line are
            named), a `.gz` file is not gzip data, or a shard of several is empty.

    Example:

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.ja").write_text("今日 の ランチ は カレー だ 。\\n\\n", encoding="utf-8")
    >>> _ = (folder / "a.en").write_text("Today's lunch is curry.\\n\\n", encoding="utf-8")
    >>> corpus = read_parallel(folder / "a.ja", folder / "a.en")
    >>> corpus.pairs, corpus.skipped_empty
    ([('今日のランチはカレーだ。', "Today's lunch is curry.")], 1)
    """
    sources, targets = _file_list("src_path", src_path), _file_list("tgt_path", tgt_path)
    _check_flag("remove_source_spaces", remove_source_spaces)
    _check_flag("remove_target_spaces", remove_target_spaces)
    remove_source_spaces = _removes_spaces(sources[0], remove_source_spaces)
    remove_target_spaces = _removes_spaces(targets[0], remove_target_spaces)
    rows = aligned_lines(sources, targets)
    return collect_pairs(rows, (*sources, *targets), remove_source_spaces, remove_target_spaces)


def read_tsv(
    path,
    src_column,
    tgt_column,
    *,
    remove_source_spaces=False,
    remove_target_spaces=False,
    header=False,
):
    """Reads tab-separated pairs, e.g. Tatoeba / manythings `English<TAB>Japanese<TAB>credit`.

    Args:
        path: UTF-8 file with one pair a line, columns separated by tabs.
        src_column: 0-based column of the source sentence (1 for Japanese in manythings files).
        tgt_column: 0-based column of the target sentence (0 for English in manythings files).
        remove_source_spaces: join pre-tokenized Japanese on the source side.
        remove_target_spaces: the same for the target side.
        header: the first line names the columns (`tsv_header_columns`): not a pair.

    Returns:
        A `Corpus`; blank lines and pairs with an empty side are skipped and counted.

    Raises:
        ValueError: if a non-blank row has too few columns (the line is named) or the file is
            not valid UTF-8 (the line is named).

    Example:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "jpn.txt"
    >>> _ = path.write_text("Go.\\t行け。\\tCC-BY 2.0 (France)\\n", encoding="utf-8")
    >>> read_tsv(path, src_column=1, tgt_column=0).pairs
    [('行け。', 'Go.')]
    """
    for name, value in (("src_column", src_column), ("tgt_column", tgt_column)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"`{name}` must be an int >= 0, got {name}={value!r}.")
    if src_column == tgt_column:
        raise ValueError(f"`src_column` and `tgt_column` must differ, both are {src_column}.")
    _check_flag("remove_source_spaces", remove_source_spaces)
    _check_flag("remove_target_spaces", remove_target_spaces)
    _check_flag("header", header)
    needed = max(src_column, tgt_column) + 1

    def rows():
        for number, line in file_lines(path):
            if header and number == 1:
                continue
            if not line.strip():
                yield "", ""
                continue
            columns = line.split("\t")
            if len(columns) < needed:
                raise ValueError(
                    f"{os.fspath(path)}, line {number}: expected at least {needed} "
                    f"tab-separated columns, found {len(columns)}."
                )
            yield columns[src_column], columns[tgt_column]

    return collect_pairs(rows(), (path,), remove_source_spaces, remove_target_spaces)


def tsv_header_columns(path, source, target):
    """`(source_column, target_column)` that the first line of the TSV file `path` names
    when it is a header: its tab-separated cells include the language codes `source` and
    `target` (case and spaces at the ends ignored); None otherwise (an empty file too).

    Example:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.tsv"
    >>> _ = path.write_text("id\\tDE\\ten\\n1\\tHallo.\\tHello.\\n", encoding="utf-8")
    >>> tsv_header_columns(path, "de", "en"), tsv_header_columns(path, "fr", "en")
    ((1, 2), None)
    """
    lines = file_lines(path)
    try:
        first = next(lines, None)
    finally:
        lines.close()
    if first is None:
        return None
    cells = [cell.strip().lower() for cell in first[1].split("\t")]
    wanted = (source.lower(), target.lower())
    if not all(language in cells for language in wanted):
        return None
    return tuple(cells.index(language) for language in wanted)


class TsvArguments(typing.NamedTuple):
    """How errors about a TSV file's columns name the caller's arguments (`choose_tsv_columns`):
    the file's, each column's, and both columns as the caller takes them (a format).

    >>> LOAD_SPLITS_TSV.pair.format(1, 0)
    'tsv_columns=(1, 0)'
    """

    path: str
    source_column: str
    target_column: str
    pair: str


# `load_splits`' arguments; `tfblocks-train` names its flags instead.
LOAD_SPLITS_TSV = TsvArguments("tsv", "tsv_columns", "tsv_columns", "tsv_columns=({}, {})")
# The manythings/Tatoeba layout `English<TAB>Japanese<TAB>attribution`: column by language,
# offered as a hint when the columns are needed, never assumed.
MANYTHINGS_COLUMNS = {"en": 0, "ja": 1}


def choose_tsv_columns(path, source, target, given, header, names=LOAD_SPLITS_TSV):
    """`(source_column, target_column)` of the TSV file `path` of the pair `source` ->
    `target`: each column as `given`, else as its `header` names it (what
    `tsv_header_columns` found, or None). No column is assumed: one that neither gives is
    an error naming the argument (`names`) and the file, with the manythings columns as a
    hint for `ja` and `en`.

    Args:
        path: the TSV file, for the message.
        source: source language.
        target: target language.
        given: `(source_column, target_column)`, either None when not given; or None.
        header: `(source_column, target_column)` that the file's first line names, or None.
        names: how the caller's arguments are spelled in errors.

    Raises:
        ValueError: a column is needed, or both are the same column.

    Example:

    >>> choose_tsv_columns("p.tsv", "de", "en", None, (2, 1))
    (2, 1)
    >>> choose_tsv_columns("p.tsv", "de", "en", None, None)
    Traceback (most recent call last):
    ...
    ValueError: `tsv_columns` is needed: tsv='p.tsv' has no first line naming 'de' and 'en' \
(a header); give tsv_columns=(N, M) (0-based).
    """
    given = (None, None) if given is None else tuple(given)
    columns = tuple(
        column if column is not None else (header[side] if header else None)
        for side, column in enumerate(given)
    )
    flags = (names.source_column, names.target_column)
    missing = [name for name, column in zip(flags, columns, strict=True) if column is None]
    if missing:
        hint = ""
        if source in MANYTHINGS_COLUMNS and target in MANYTHINGS_COLUMNS:
            manythings = (MANYTHINGS_COLUMNS[source], MANYTHINGS_COLUMNS[target])
            hint = f" (a manythings file: {names.pair.format(*manythings)})"
        raise ValueError(
            f"`{missing[0]}` is needed: {names.path}={os.fspath(path)!r} has no first line "
            f"naming {source!r} and {target!r} (a header); give {names.pair.format('N', 'M')} "
            f"(0-based){hint}."
        )
    if columns[0] == columns[1]:
        raise ValueError(
            f"the source and target columns must differ, got {names.pair.format(*columns)}."
        )
    return columns


def _split_pairs(pairs, seed, held_out=0.02):
    """Deterministic train/dev/test split for a corpus that comes as one file."""
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    n = max(1, int(len(pairs) * held_out / 2))
    return {"train": pairs[2 * n :], "dev": pairs[:n], "test": pairs[n : 2 * n]}


SPLITS = ("train", "dev", "test")
_LANGUAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(-[A-Za-z0-9_]+)*")
_SHARD_SUFFIX = re.compile(r"-\d+-of-\d+$")  # `xx-00000-of-00002` would read as a shard


def check_language(name, value):
    """Returns `value` if it can be a language suffix of file names (`de`, `zh-Hans`,
    `pt_BR`), else raises a ValueError naming `name`."""
    if not isinstance(value, str) or not _LANGUAGE.fullmatch(value) or _SHARD_SUFFIX.search(value):
        raise ValueError(
            f"`{name}` must be a language code such as de or zh-Hans (letters, digits, "
            f"_ and -), got {name}={value!r}."
        )
    return value


def load_splits(
    corpus_dir=None,
    tsv=None,
    source="ja",
    target="en",
    seed=0,
    *,
    files=None,
    tsv_columns=None,
    stream_train=False,
):
    """Train/dev/test `(source, target)` pairs of any language pair.

    Pre-tokenized Japanese is joined (`remove_japanese_spaces`) on a side whose language
    is `ja`, in line-aligned files; TSV rows are read as they are.

    Args:
        corpus_dir: a folder with line-aligned `{train,dev,test}.{source,target}` files;
            each may instead be gzipped (`train.de.gz`) or split into shards
            (`train.de-00000-of-00008`, ...; shard i of the source aligned with shard i
            of the target). All files are found before any is read.
        tsv: a tab-separated file of pairs; 2 % of it is held out for dev and test. A
            first line that names `source` and `target` among its cells is a header
            (`tsv_header_columns`): not a pair, and it gives the columns.
        source: source language, the suffix of its files.
        target: target language.
        seed: seed of the phrasebook / of the TSV split.
        files: `{split: (source_files, target_files)}` (lists of paths, read in order)
            for splits given as files; the other splits come from `corpus_dir`.
        tsv_columns: `(source_column, target_column)` of `tsv`, 0-based (manythings'
            `English<TAB>Japanese<TAB>attribution` is `(1, 0)` for ja -> en); needed
            unless the header names both languages, whose columns are then the default
            (`choose_tsv_columns`, the rule `tfblocks-train --tsv` follows too).
        stream_train: the train split is a `StreamedPairs` of its files (read when
            iterated) instead of a list; only for line-aligned files.

    Returns:
        `{"train": [...], "dev": [...], "test": [...]}` of `(source, target)` pairs; the
        embedded phrasebook when no corpus is given.

    Raises:
        FileNotFoundError: a file is missing (its path is named).
        ValueError: unreadable or misaligned files (see `read_parallel`), a split with
            neither files nor `corpus_dir`, or a TSV whose columns are neither given nor
            named by a header (the message names `tsv_columns`).
    """
    check_language("source", source)
    check_language("target", target)
    files = dict(files or {})
    unknown = set(files) - set(SPLITS)
    if unknown:
        raise ValueError(f"`files` has splits {sorted(unknown)}, expected some of {SPLITS}.")
    if tsv and (corpus_dir or files):
        raise ValueError(
            "Give either `tsv` or line-aligned files (`corpus_dir`, `files`), not both."
        )
    if stream_train and (tsv or not (corpus_dir or "train" in files)):
        raise ValueError(
            "`stream_train` streams line-aligned train files: give `corpus_dir` or the "
            "train split's `files`, not a TSV or the phrasebook."
        )
    if tsv:
        given = _check_tsv_columns(tsv_columns)
        header = tsv_header_columns(tsv, source, target)
        columns = choose_tsv_columns(tsv, source, target, given, header)
        corpus = read_tsv(tsv, *columns, header=header is not None)
        return _split_pairs(corpus, seed)
    if not corpus_dir and not files:
        return load_phrasebook(seed=seed)
    for split in SPLITS:  # every file is found before the first is read
        if split not in files:
            if not corpus_dir:
                raise ValueError(f"the {split} split has no files: give them, or `corpus_dir`.")
            files[split] = (
                language_files(corpus_dir, split, source),
                language_files(corpus_dir, split, target),
            )
    for split in SPLITS:
        _check_sides_differ(split, *files[split])
    joined = {"remove_source_spaces": is_japanese(source),
              "remove_target_spaces": is_japanese(target)}  # fmt: skip
    splits = {
        split: list(read_parallel(*files[split], **joined))
        for split in SPLITS
        if not (stream_train and split == "train")
    }
    if stream_train:
        sources, targets = (tuple(os.fspath(p) for p in side) for side in files["train"])
        splits = {"train": StreamedPairs(sources, targets, **joined), **splits}
    return splits


def _check_tsv_columns(tsv_columns):
    """`tsv_columns` of `load_splits` as a tuple, or None; a ValueError naming it unless
    it is None or two ints >= 0."""
    if tsv_columns is None:
        return None
    pair = tuple(tsv_columns) if isinstance(tsv_columns, list | tuple) else ()
    if len(pair) != 2 or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in pair
    ):
        raise ValueError(
            "`tsv_columns` must be (source_column, target_column), two ints >= 0, got "
            f"tsv_columns={tsv_columns!r}."
        )
    return pair


def _check_sides_differ(split, sources, targets):
    """Refuses a split whose source and target sides share a file, whatever names reach
    it (a link, a hard link): a ValueError naming both paths. A side is one path or a
    list of paths, as `read_parallel` takes it."""
    sources, targets = _file_list("src_path", sources), _file_list("tgt_path", targets)
    seen = {}
    for path in sources:
        status = os.stat(path)
        seen[(status.st_dev, status.st_ino)] = path
    for path in targets:
        status = os.stat(path)
        same = seen.get((status.st_dev, status.st_ino))
        if same is not None:
            raise ValueError(
                f"the {split} split's source {os.fspath(same)} and target {os.fspath(path)} "
                "are the same file; give each side its own language's file."
            )
