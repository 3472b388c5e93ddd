"""The lines of text files as a stream: plain, gzipped (`*.gz`) or split into shards.

A corpus side is a list of files read in order, one line at a time (nothing is read whole,
so a side may be larger than memory). `language_files` finds the files of
`{split}.{language}` in a folder (`train.de`, `train.de.gz`, or the shards
`train.de-00000-of-00008` ... in order); `expand_paths` turns a comma-separated list of
paths and globs into files. What cannot be read is a `ValueError` (or `FileNotFoundError`)
naming the file, and the line where it applies: bytes that are not UTF-8, a `.gz` that is
not gzip data or ends early, an empty shard, a glob that matches nothing.

A line is what `split_lines` makes of a decoded file: no line end (`\\n`, `\\r\\n`), no
byte-order mark at the start of a file.
"""

import errno
import glob
import gzip
import os
import re
import stat
import zlib

# `NAME-00003-of-00008` (optionally `.gz`): shard 3 of 8 of NAME.
_SHARD = re.compile(r"-(\d+)-of-(\d+)(\.gz)?$")
_GLOB = re.compile(r"[*?\[]")


def invalid_utf8(name, line, data, error):
    """The ValueError for bytes `data` of `name`'s line `line` that are not UTF-8."""
    return ValueError(
        f"{name}, line {line}: invalid UTF-8 ({error.reason}, "
        f"byte {data[error.start : error.start + 1]!r})."
    )


def _not_a_file(path):
    """The error for `path`, where a corpus file should be: the system's own for a missing
    path, a link to nothing or a loop of links (`OSError` naming it), `Is a directory` for
    a folder, a ValueError for anything else that is not a regular file (a pipe, a device)."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return OSError(error.errno, error.strerror, path)  # FileNotFoundError for ENOENT
    if stat.S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return ValueError(f"{path} is not a regular file (a pipe, a device or a socket).")


def language_files(folder, split, language):
    """The files of one corpus side in `folder`, in reading order.

    Looks for `{split}.{language}`, then `{split}.{language}.gz`, then the shards
    `{split}.{language}-NNNNN-of-MMMMM` (each may end in `.gz`), which must be complete
    (every number below MMMMM, one total).

    Returns:
        A list of paths (str).

    Raises:
        OSError: none of them is a file (the plain file's path is named, or the path
            that is a folder or a loop of links: `FileNotFoundError`, `IsADirectoryError`).
        ValueError: more than one of these forms exists, or shards are missing.
    """
    base = os.path.join(os.fspath(folder), f"{split}.{language}")
    found = [p for p in (base, base + ".gz") if os.path.isfile(p)]
    shards = {}
    for path in glob.glob(glob.escape(base) + "-*-of-*"):
        match = _SHARD.search(path)
        if match and path[: match.start()] == base:
            shards[path] = (int(match.group(1)), int(match.group(2)))
    if shards:
        found.append(f"{base}-NNNNN-of-NNNNN")
    if not found:
        present = [p for p in (base, base + ".gz") if os.path.lexists(p)]
        raise _not_a_file(present[0] if present else base)
    if len(found) > 1:
        raise ValueError(f"{base} is given more than once ({', '.join(found)}); keep one of them.")
    if not shards:
        return found
    totals = {total for _, total in shards.values()}
    numbers = sorted(number for number, _ in shards.values())
    total = totals.pop()
    if totals or numbers != list(range(total)):
        raise ValueError(
            f"the shards of {base} are incomplete or mixed: found "
            f"{', '.join(os.path.basename(p) for p in sorted(shards))}, expected numbers "
            f"0 to {total - 1} of {total}."
        )
    return sorted(shards, key=shards.get)


def file_language(path):
    """The language suffix of a corpus file's name: `de` for `train.de`, `train.de.gz`
    and `train.de-00001-of-00008`; None for a name without one."""
    name = _SHARD.sub("", os.path.basename(os.fspath(path))).removesuffix(".gz")
    stem, dot, suffix = name.rpartition(".")
    return suffix if dot and stem else None


def is_japanese(language):
    """Whether the language code `language` names Japanese, whose pre-tokenized text the
    readers join: `ja`, or `jpn` (NLLB's `jpn_Jpan`; the part before `_` or `-` counts).

    >>> is_japanese("ja"), is_japanese("jpn_Jpan"), is_japanese("jav_Latn"), is_japanese(None)
    (True, True, False, False)
    """
    return bool(language) and re.split(r"[-_]", language.lower())[0] in ("ja", "jpn")


def expand_paths(flag, value):
    """The files named by a comma-separated list of paths and globs, in the order given
    (each glob's matches sorted by name).

    Raises:
        ValueError: `value` names nothing, or a glob matches no file (`flag` is named).
        OSError: a named path is not a file (`FileNotFoundError` when it does not
            exist, `IsADirectoryError` for a folder; a loop of links is named as such).
    """
    items = [item.strip() for item in value.split(",")] if isinstance(value, str) else []
    if not items or not all(items):
        raise ValueError(
            f"`{flag}` must be paths or globs separated by commas, got {flag}={value!r}."
        )
    paths = []
    for item in items:
        item = os.path.expanduser(item)
        if _GLOB.search(item):
            matches = sorted(p for p in glob.glob(item) if os.path.isfile(p))
            if not matches:
                raise ValueError(
                    f"`{flag}`: the pattern {item!r} matches no file, got {flag}={value!r}."
                )
            paths.extend(matches)
        elif os.path.isfile(item):
            paths.append(item)
        else:
            raise _not_a_file(item)
    return paths


def file_lines(path):
    """Yields `(number, line)` of a plain or gzipped (`*.gz`) UTF-8 file, streaming."""
    name = os.fspath(path)
    with open(name, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if name.endswith(".gz") else raw
        number = 0
        try:
            for data in stream:
                number += 1
                data = data.removesuffix(b"\n").rstrip(b"\r")
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise invalid_utf8(name, number, data, error) from None
                yield number, line.removeprefix("\ufeff") if number == 1 else line
        except gzip.BadGzipFile as error:
            raise ValueError(f"{name} is named .gz but is not gzip data ({error}).") from None
        except (EOFError, zlib.error) as error:
            raise ValueError(
                f"{name}: the gzip data is damaged or ends early, after line {number} ({error})."
            ) from None


def stream_lines(paths, shards=None):
    """Yields `(path, number, line)` of each file of `paths` in turn (`file_lines`).

    Raises:
        ValueError: a file of several (a shard; `shards` says whether `paths` are, by
            default whether there are several) has no lines.
    """
    shards = len(paths) > 1 if shards is None else shards
    for path in paths:
        empty = True
        for number, line in file_lines(path):
            empty = False
            yield path, number, line
        if empty and shards:
            raise ValueError(f"{path} is empty: a shard of a corpus must hold lines.")


def aligned_lines(sources, targets):
    """Yields `(source_line, target_line)` of two line-aligned sides (lists of files).

    With as many files on each side, file i of one side is aligned with file i of the
    other (shard with shard); otherwise each side is read as one stream.

    Raises:
        ValueError: one side ends before the other: both files are named with their line
            counts, and the line after which one ends.
    """
    if len(sources) == len(targets):
        groups = [([s], [t]) for s, t in zip(sources, targets, strict=True)]
    else:
        groups = [(sources, targets)]
    for src, tgt in groups:
        src_lines = stream_lines(src, shards=len(sources) > 1)
        tgt_lines = stream_lines(tgt, shards=len(targets) > 1)
        src_last, tgt_last = (src[0], 0), (tgt[0], 0)  # (path, line) read last on each side
        while True:
            a, b = next(src_lines, None), next(tgt_lines, None)
            if a is None and b is None:
                break
            if a is None:
                raise _uneven(src_last, b, tgt_lines, source_ended=True)
            if b is None:
                raise _uneven(tgt_last, a, src_lines, source_ended=False)
            src_last, tgt_last = a[:2], b[:2]
            yield a[2], b[2]


def _uneven(ended, more, rest, source_ended):
    """The error for a side whose last line `ended` (`(path, number)`) came while the other
    side has the line `more` (`(path, number, line)`); `rest` (that side's remaining
    lines) is counted to give its file's length."""
    path, count = more[0], more[1]
    try:
        for other, number, _ in rest:
            if other == path:
                count = number
    except ValueError:  # a later line cannot be read: the count stays a lower bound
        pass
    short, long_ = f"{ended[0]} has {ended[1]} lines", f"{path} has {count} lines"
    first, second = (long_, short) if not source_ended else (short, long_)
    return ValueError(
        f"Line-aligned files differ in length: {first} but {second} ({ended[0]} ends after "
        f"line {ended[1]}; {path} goes on at line {more[1]})."
    )


# Bytes read at a time by the block readers below (whole lines are handed out).
_BLOCK = 1 << 23


def _blocks(path):
    """Yields the bytes of `path` (gzip-decompressed for `*.gz`) in blocks of whole lines,
    each ending at a line end (the last may not). Damaged files raise what `gzip` raises."""
    name = os.fspath(path)
    with open(name, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if name.endswith(".gz") else raw
        rest = b""
        while data := stream.read(_BLOCK):
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                yield data[:cut]
        if rest:
            yield rest


def _block_lines(block):
    """The number of lines of a block of `_blocks`."""
    return block.count(b"\n") + (not block.endswith(b"\n"))


def count_lines(path):
    """The number of lines `file_lines` yields for `path`, in blocks (fast: no line is split
    off); the bytes are checked to be UTF-8.

    Raises:
        ValueError, OSError, EOFError, zlib.error: the file cannot be read; `file_lines`
            names the line (this function does not).
    """
    lines = 0
    for block in _blocks(path):
        block.decode("utf-8")  # UnicodeDecodeError is a ValueError
        lines += _block_lines(block)
    return lines


def pick_lines(paths, positions):
    """The lines at `positions` (increasing, 0-based, counted over `paths` read in order),
    as `file_lines` gives them, without splitting the blocks that hold none of them."""
    picked, start, wanted = [], 0, iter(positions)
    position = next(wanted, None)
    for path in paths:
        first = start  # the file's first line: a byte-order mark is removed from it
        for block in _blocks(path):
            end = start + _block_lines(block)
            if position is not None and position < end:
                lines = block.split(b"\n")
                while position is not None and position < end:
                    data = lines[position - start].rstrip(b"\r")
                    line = data.decode("utf-8")
                    picked.append(line.removeprefix("\ufeff") if position == first else line)
                    position = next(wanted, None)
            start = end
    return picked
