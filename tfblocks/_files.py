"""Write a file or a directory as a whole, never leaving half of one at the path.

`replace_file(path, write_fn)` is the one place where tfblocks writes a file through a
temporary name beside it (`NAME.tmp-<pid>-<random><suffix>`, created new, so no existing
file or link is written through or removed) renamed into place: readers see the old file
or the new one, and a failed write removes its temporary file and leaves `path` as it
was. Whether `path` may be replaced is the caller's decision. `clean_stale_files(folder)`
removes the temporary files of writers that were killed (the same pattern, a process id
that no longer runs on this machine).

Directories: write a directory as a whole, replacing only what tfblocks itself wrote there.

`replace_directory(path, write_fn)` is the one place where tfblocks puts a finished
directory (a SavedModel export, a run folder's artifact) at a user-given path:

* It refuses, with a `ValueError` naming the argument and its value and before
  writing anything: `""`, `.`, the current working directory and any of its parents,
  a symbolic link, a mount point, a regular file, and an existing directory that
  tfblocks did not write (`check_directory` makes the same checks, for writers with
  slow work to do first). A directory counts as written by tfblocks when it holds the marker file
  `tfblocks_export.json` of the same `kind`, nothing that the marker does not list, and
  every listed file unchanged (its SHA-256 is the marker's): a file a user added, edited
  or put in place of one of tfblocks' later is never deleted. An empty directory is
  replaced.
* `write_fn(staging)` fills a fresh staging directory beside `path`
  (`.NAME.tmp-<pid>-<random>`, same file system, so renames are atomic); the marker is
  added, then the staging directory is renamed into place. An existing export is first
  renamed to `.NAME.old-<pid>-<random>` and deleted only after the new one is in place,
  so `path` is missing only between two renames; if the second rename fails the old
  export is renamed back.
* Staging and old folders left by killed writers (same naming pattern, a process id
  that no longer runs on this machine) are removed; an old export whose replacement
  never arrived is first put back at `path`. Nothing else beside `path` is touched.

Nothing here imports TensorFlow.
"""

import hashlib
import json
import os
import re
import secrets
import shutil

from tfblocks._version import __version__

MARKER = "tfblocks_export.json"
_FORMAT = 2  # 2: the marker holds each file's SHA-256


def replace_file(path, write_fn, suffix=""):
    """Writes the file `path` with `write_fn(tmp)` and renames `tmp` onto it.

    Args:
        path: the file to write (str or path-like).
        write_fn: called with the temporary path (a str beside `path`) and writes the
            whole file there.
        suffix: ends the temporary name, for writers that need a file extension.

    Returns:
        `path`.
    """
    while True:  # a name nothing else holds: O_EXCL fails on any existing file or link
        tmp = f"{os.fspath(path)}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}"
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        break
    try:
        write_fn(tmp)  # the writers truncate the empty file reserved here
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)  # created above by this call
        raise
    return path


_TMP_FILE = re.compile(r".+\.tmp-(\d+)-[0-9a-f]{8}(\.[A-Za-z0-9]+)*")


def clean_stale_files(folder):
    """Removes what `replace_file` calls left in `folder` when their process was killed.

    Only regular files named by `replace_file`'s pattern whose process id no longer runs
    here; returns their names.
    """
    removed = []
    for entry in sorted(os.listdir(folder)):
        match = _TMP_FILE.fullmatch(entry)
        full = os.path.join(folder, entry)
        regular = os.path.isfile(full) and not os.path.islink(full)
        if match and regular and not _alive(int(match.group(1))):
            os.remove(full)
            removed.append(entry)
    return removed


def write_text(path, text):
    """Writes `text` (UTF-8) to the file `path` with `replace_file`; returns `path`."""

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    return replace_file(path, write)


def write_json(path, data):
    """Writes `data` as indented UTF-8 JSON to `path` with `replace_file`; returns `path`."""
    return write_text(path, json.dumps(data, ensure_ascii=False, indent=2))


def read_json(path, what, *, holds="a JSON object", fix=""):
    """The JSON object (a dict) of the UTF-8 file `path`, e.g. one `write_json` wrote.

    A file a user edited or a writer cut short is a `ValueError` that names the file,
    so the caller's message need not.

    Args:
        path: the file.
        what: what the file should be, in the message for one that is not JSON
            (`"{path} is not {what} (...)"`).
        holds: what it should hold, in the message for JSON that is not an object
            (`"{path} must hold {holds}, got ..."`).
        fix: what the user can do about a bad file, appended to both messages.

    Returns:
        The decoded dict.

    Raises:
        ValueError: the file is not UTF-8 JSON, or its JSON is not an object.
        OSError: the file cannot be opened (a missing file: FileNotFoundError).

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> read_json(write_json(os.path.join(folder, "a.json"), {"epochs": 3}), "a JSON file")
    {'epochs': 3}
    >>> path = write_json(os.path.join(folder, "b.json"), [1])
    >>> read_json(path, "a JSON file", fix="write it again")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...b.json must hold a JSON object, got [1]; write it again.
    """
    end = f"; {fix}." if fix else "."
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not {what} ({error}){end}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} must hold {holds}, got {values!r:.80}{end}")
    return values


def replace_directory(path, write_fn, kind="tfblocks-export", *, arg="path"):
    """Writes `path` as a whole with `write_fn`, replacing only an earlier tfblocks write.

    Args:
        path: the directory to write (str or path-like).
        write_fn: called with the staging directory (a str, existing and empty) and
            writes everything there; its return value is ignored.
        kind: what is written, stored in the marker; an existing directory is replaced
            only if its marker has the same kind.
        arg: the caller's name for `path`, used in error messages.

    Returns:
        `path` as an absolute path (str).

    Raises:
        ValueError: `path` is refused (see the module docstring); nothing was written.
    """
    path = _check_path(path, kind, arg)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    _clean_stale(parent, name)
    pid = os.getpid()
    staging = _make_staging(parent, name, pid)
    try:
        write_fn(staging)
        _write_marker(staging, kind)
        _check_path(path, kind, arg)  # `path` may have changed while write_fn ran.
        if os.path.lexists(path):
            old = os.path.join(parent, f".{name}.old-{pid}-{secrets.token_hex(4)}")
            os.rename(path, old)
            try:
                os.rename(staging, path)
            except BaseException:
                os.rename(old, path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def check_directory(path, kind="tfblocks-export", *, arg="path"):
    """Raises the `ValueError` that `replace_directory(path, ..., kind, arg=arg)` would.

    For writers with slow work to do before `replace_directory` runs: a refused path
    is reported first. Returns `path` as an absolute path (str).
    """
    return _check_path(path, kind, arg)


def _make_staging(parent, name, pid):
    """A new empty `.NAME.tmp-<pid>-<random>`, with the umask's permissions (not 0o700)."""
    while True:
        staging = os.path.join(parent, f".{name}.tmp-{pid}-{secrets.token_hex(4)}")
        try:
            os.mkdir(staging)
        except FileExistsError:
            continue
        return staging


def _check_path(path, kind, arg):
    """`path` as an absolute path, or a ValueError if writing there could destroy data."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`{arg}` must be a str or path-like, got {arg}={path!r}.")
    raw = os.fspath(path)
    if not isinstance(raw, str) or raw.strip() in ("", "."):
        raise ValueError(
            f"`{arg}` must name a new directory, got {arg}={raw!r} "
            "(the current directory is never replaced)."
        )
    absolute = os.path.abspath(raw)
    try:
        cwd = os.path.realpath(os.getcwd())
    except FileNotFoundError:  # the working directory was deleted: nothing to protect
        cwd = None
    for candidate in {absolute, os.path.realpath(absolute)}:
        if cwd is not None and os.path.commonpath([candidate, cwd]) == candidate:
            raise ValueError(
                f"`{arg}` is the current working directory or one of its parents, got "
                f"{arg}={raw!r}; choose a new directory such as {os.path.join(raw, 'export')!r}."
            )
    if os.path.islink(absolute):
        raise ValueError(f"`{arg}` is a symbolic link, got {arg}={raw!r}; it is not replaced.")
    if os.path.ismount(absolute):
        raise ValueError(
            f"`{arg}` is a mount point, got {arg}={raw!r}; a directory is put in place by a "
            f"rename, which cannot replace it: write to a folder inside it such as "
            f"{os.path.join(raw, 'export')!r}."
        )
    if os.path.lexists(absolute) and not os.path.isdir(absolute):
        raise ValueError(f"`{arg}` is a file, not a directory, got {arg}={raw!r}.")
    if os.path.isdir(absolute):
        _check_replaceable(absolute, raw, kind, arg)
    return absolute


def _check_replaceable(path, raw, kind, arg):
    """Raises unless `path` is empty or holds exactly an earlier write of this `kind`."""
    present = _listing(path)
    if not present:
        return
    marker = os.path.join(path, MARKER)
    if not os.path.isfile(marker):
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            raise ValueError(
                f"`{arg}` holds a SavedModel without tfblocks' marker file {MARKER} "
                f"(an export by an older tfblocks or by another program), got {arg}={raw!r}. "
                "tfblocks does not delete it: remove it yourself or choose another path."
            )
        raise ValueError(
            f"`{arg}` is an existing directory that tfblocks did not write "
            f"(no {MARKER}), got {arg}={raw!r}; choose a new or empty directory."
        )
    try:
        with open(marker, encoding="utf-8") as f:
            info = json.load(f)
        written = set(info["files"])
        found_kind = info["kind"]
        found_format = info["format"]
        digests = info.get("sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"`{arg}` has an unreadable {MARKER} ({error!r}), got {arg}={raw!r}; "
            "remove the directory yourself or choose another path."
        ) from error
    if found_format != _FORMAT or not isinstance(digests, dict):
        raise ValueError(
            f"`{arg}` has a {MARKER} of another format ({found_format!r}, not {_FORMAT}: "
            f"written by another tfblocks version), got {arg}={raw!r}; remove the directory "
            "yourself or choose another path."
        )
    if found_kind != kind:
        raise ValueError(
            f"`{arg}` holds a tfblocks {found_kind!r}, not a {kind!r}, got {arg}={raw!r}; "
            "choose another path."
        )
    added = sorted(present - written - {MARKER})
    if added:
        raise ValueError(
            f"`{arg}` holds files that tfblocks did not write ({_shown(added)}), got "
            f"{arg}={raw!r}; move them away or choose another path."
        )
    changed = sorted(
        name for name in present & written if not _as_written(path, name, digests.get(name))
    )
    if changed:
        raise ValueError(
            f"`{arg}` holds files that changed since tfblocks wrote them ({_shown(changed)}), "
            f"got {arg}={raw!r}; move them away or choose another path."
        )


def _shown(names):
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _as_written(root, name, digest):
    """Whether `root/name` is as the marker recorded it: a real directory (no digest) or a
    regular file whose SHA-256 is `digest`."""
    full = os.path.join(root, name)
    if os.path.islink(full):
        return False
    if digest is None:
        return os.path.isdir(full)
    return os.path.isfile(full) and _sha256(full) == digest


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _listing(root):
    """Relative paths of every file and directory under `root`, with '/' separators."""
    found = set()
    for folder, dirs, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        for entry in dirs + files:
            found.add(entry if relative == "." else f"{relative}/{entry}".replace(os.sep, "/"))
    return found


def _write_marker(staging, kind):
    files = sorted(_listing(staging) - {MARKER})
    regular = [
        name
        for name in files
        if os.path.isfile(os.path.join(staging, name))
        and not os.path.islink(os.path.join(staging, name))
    ]
    info = {
        "kind": kind,
        "format": _FORMAT,
        "tfblocks_version": __version__,
        "files": files,
        "sha256": {name: _sha256(os.path.join(staging, name)) for name in regular},
    }
    with open(os.path.join(staging, MARKER), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def _clean_stale(parent, name):
    """Removes what killed writers of `parent/name` left; restores a stranded old export."""
    ours = re.compile(rf"\.{re.escape(name)}\.(tmp|old)-(\d+)-[A-Za-z0-9_]+")
    path = os.path.join(parent, name)
    stale_old = []
    for entry in sorted(os.listdir(parent)):
        full = os.path.join(parent, entry)
        if os.path.islink(full) or not os.path.isdir(full):
            continue
        match = ours.fullmatch(entry)
        if match and not _alive(int(match.group(2))):
            if match.group(1) == "old":
                stale_old.append(full)
            else:
                shutil.rmtree(full, ignore_errors=True)
    if stale_old and not os.path.lexists(path):
        # Killed between its two renames: the newest old export is the last good one.
        stale_old.sort(key=os.path.getmtime)
        os.rename(stale_old.pop(), path)
    for old in stale_old:
        shutil.rmtree(old, ignore_errors=True)


def _alive(pid):
    if pid == os.getpid() or os.name == "nt":
        # Another thread of this process may be writing; on Windows `os.kill(pid, 0)`
        # would terminate the process instead of probing it.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True
