"""replace_directory writes a directory whole and never deletes what tfblocks did not write;
replace_file writes a file whole."""

import json
import os
import subprocess
import sys

import pytest

from tfblocks._files import (
    MARKER,
    check_directory,
    clean_stale_files,
    replace_directory,
    replace_file,
    write_json,
    write_text,
)


def _writer(content):
    """A cheap write_fn: one file and one nested file (no TensorFlow)."""

    def write(staging):
        with open(os.path.join(staging, "model.txt"), "w") as f:
            f.write(content)
        os.mkdir(os.path.join(staging, "variables"))
        with open(os.path.join(staging, "variables", "data"), "w") as f:
            f.write(content * 2)

    return write


def _entries(folder):
    return sorted(os.listdir(folder))


def _dead_pid():
    """The id of a process that has exited (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_writes_a_new_directory_with_its_marker(tmp_path):
    target = tmp_path / "sub" / "export"
    assert replace_directory(target, _writer("one")) == str(target)
    assert (target / "model.txt").read_text() == "one"
    info = json.loads((target / MARKER).read_text())
    assert info["kind"] == "tfblocks-export"
    assert info["files"] == ["model.txt", "variables", "variables/data"]
    assert _entries(tmp_path / "sub") == ["export"]  # no staging left behind
    (tmp_path / "plain").mkdir()  # permissions follow the umask (tempfile would give 0o700)
    assert target.stat().st_mode == (tmp_path / "plain").stat().st_mode


def test_replaces_its_own_earlier_write_and_an_empty_directory(tmp_path):
    target = tmp_path / "export"
    target.mkdir()
    replace_directory(target, _writer("one"))
    replace_directory(target, _writer("two"))
    assert (target / "model.txt").read_text() == "two"
    assert (target / "variables" / "data").read_text() == "twotwo"
    assert _entries(tmp_path) == ["export"]


def test_refuses_a_directory_holding_a_users_file(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.tex").write_bytes(b"\x00years of work\n")
    with pytest.raises(ValueError, match=r"`path`.*did not write.*mine"):
        replace_directory(target, _writer("one"))
    assert (target / "thesis.tex").read_bytes() == b"\x00years of work\n"
    assert _entries(target) == ["thesis.tex"]
    assert _entries(tmp_path) == ["mine"]


def test_refuses_an_export_a_user_added_a_file_to(tmp_path):
    target = tmp_path / "export"
    replace_directory(target, _writer("one"))
    (target / "variables" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"did not write \(variables/notes.txt\)"):
        replace_directory(target, _writer("two"))
    assert (target / "variables" / "notes.txt").read_text() == "keep me"
    assert (target / "model.txt").read_text() == "one"


def test_refuses_an_export_whose_files_a_user_changed_or_a_foreign_marker(tmp_path):
    """The marker holds each file's SHA-256: a listed file a user edited or replaced (or a
    marker copied beside other files of the same names) never lets an export delete it."""
    target = tmp_path / "export"
    replace_directory(target, _writer("one"))
    digests = json.loads((target / MARKER).read_text())["sha256"]
    assert sorted(digests) == ["model.txt", "variables/data"]  # files, not folders
    (target / "variables" / "data").write_text("a user's own variables")
    with pytest.raises(ValueError, match=r"changed since tfblocks wrote them \(variables/data\)"):
        replace_directory(target, _writer("two"))
    assert (target / "variables" / "data").read_text() == "a user's own variables"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.txt").write_text("my notes")
    (mine / MARKER).write_bytes((target / MARKER).read_bytes())
    with pytest.raises(ValueError, match=r"changed since tfblocks wrote them \(model.txt\)"):
        check_directory(mine)
    info = json.loads((target / MARKER).read_text())
    del info["sha256"]  # a marker of an older tfblocks: names only
    (mine / MARKER).write_text(json.dumps({**info, "format": 1}))
    with pytest.raises(ValueError, match=r"of another format \(1, not 2"):
        replace_directory(mine, _writer("two"))
    assert (mine / "model.txt").read_text() == "my notes"


def test_refuses_an_unmarked_saved_model_and_another_kind(tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "saved_model.pb").write_bytes(b"pb")
    with pytest.raises(ValueError, match=r"without tfblocks' marker.*remove it yourself"):
        replace_directory(legacy, _writer("one"))
    assert _entries(legacy) == ["saved_model.pb"]
    run = tmp_path / "run"
    replace_directory(run, _writer("one"), kind="tfblocks-run")
    with pytest.raises(ValueError, match=r"holds a tfblocks 'tfblocks-run', not a"):
        replace_directory(run, _writer("two"))
    assert (run / "model.txt").read_text() == "one"


@pytest.mark.parametrize("path", ["", ".", "  ", "..", "/"])
def test_refuses_the_current_directory_and_its_parents(tmp_path, monkeypatch, path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    monkeypatch.chdir(work)
    with pytest.raises(ValueError, match=rf"`path`.*path={path!r}"):
        replace_directory(path, _writer("one"))
    assert _entries(work) == ["keep.txt"]
    assert _entries(tmp_path) == ["work"]


def test_refuses_cwd_by_absolute_path_and_names_the_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"`output` is the current working directory"):
        replace_directory(str(tmp_path), _writer("one"), arg="output")
    with pytest.raises(ValueError, match=r"current working directory or one of its parents"):
        replace_directory(tmp_path.parent, _writer("one"))
    assert _entries(tmp_path) == []


def test_refuses_a_regular_file_and_a_symlink_before_writing(tmp_path):
    target = tmp_path / "export"
    target.write_bytes(b"not a directory")
    called = []
    with pytest.raises(ValueError, match=r"`path` is a file, not a directory"):
        replace_directory(target, called.append)
    assert called == []
    assert target.read_bytes() == b"not a directory"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"symbolic link"):
        replace_directory(link, called.append)
    assert called == []
    assert _entries(tmp_path) == ["export", "link"]


def test_refuses_a_mount_point_before_writing(tmp_path, monkeypatch):
    """An empty mount point (a Docker bind mount) cannot be replaced by a rename: refused
    first, not after the whole export was written (EBUSY)."""
    target = tmp_path / "out"
    target.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: p == str(target) or real_ismount(p))
    called = []
    for refuse in (lambda: replace_directory(target, called.append, arg="output_dir"),
                   lambda: check_directory(target, arg="output_dir")):  # fmt: skip
        with pytest.raises(ValueError, match=r"`output_dir` is a mount point.*out/export"):
            refuse()
    assert called == [] and _entries(target) == [] and _entries(tmp_path) == ["out"]
    assert check_directory(target / "export") == str(target / "export")  # inside it: fine


def test_write_fn_raising_leaves_nothing_behind(tmp_path):
    def broken(staging):
        _writer("half")(staging)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_directory(tmp_path / "export", broken)
    assert _entries(tmp_path) == []
    replace_directory(tmp_path / "export", _writer("one"))
    with pytest.raises(OSError, match="disk full"):
        replace_directory(tmp_path / "export", broken)
    assert (tmp_path / "export" / "model.txt").read_text() == "one"
    assert _entries(tmp_path) == ["export"]


def test_a_failure_between_the_renames_restores_the_old_export(tmp_path, monkeypatch):
    target = tmp_path / "export"
    replace_directory(target, _writer("one"))
    real_rename = os.rename
    calls = []

    def flaky_rename(src, dst):
        calls.append((os.path.basename(src), os.path.basename(dst)))
        if len(calls) == 2:  # staging -> export, after export -> .export.old-*
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", flaky_rename)
    with pytest.raises(OSError, match="rename failed"):
        replace_directory(target, _writer("two"))
    assert calls[0][0] == "export" and calls[0][1].startswith(".export.old-")
    assert calls[1][0].startswith(".export.tmp-") and calls[1][1] == "export"
    assert calls[2] == (calls[0][1], "export")  # put back
    assert (target / "model.txt").read_text() == "one"
    assert _entries(tmp_path) == ["export"]


def test_a_change_at_path_while_writing_is_refused(tmp_path):
    target = tmp_path / "export"

    def user_creates_it(staging):
        _writer("one")(staging)
        target.mkdir()
        (target / "mine.txt").write_text("x")

    with pytest.raises(ValueError, match="did not write"):
        replace_directory(target, user_creates_it)
    assert _entries(target) == ["mine.txt"]
    assert _entries(tmp_path) == ["export"]


def test_cleans_what_killed_writers_left_and_nothing_else(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    names = [
        f".export.tmp-{dead}-abc123",  # killed while writing: removed
        f".export.old-{dead}-beef",  # killed after replacing: removed (export exists)
        f".export.tmp-{alive}-abc123",  # a writer still running: kept
        ".export.tmp-fresh123",  # no process id: not ours, kept
        f".other.tmp-{dead}-abc123",  # another target: kept
        f".export.tmp-{dead}-abc123.bak",  # not our pattern: kept
        "export.tmp-1-a",  # not our pattern: kept
    ]
    for name in names:
        (tmp_path / name).mkdir()
    replace_directory(tmp_path / "export", _writer("one"))
    replace_directory(tmp_path / "export", _writer("two"))  # the cleanup ran with export present
    assert _entries(tmp_path) == sorted(["export", *names[2:]])
    assert (tmp_path / "export" / "model.txt").read_text() == "two"


def test_an_export_stranded_between_the_renames_is_restored_first(tmp_path):
    # A writer killed after `export -> .export.old-*` and before `staging -> export`.
    dead = _dead_pid()
    replace_directory(tmp_path / "export", _writer("one"))
    os.rename(tmp_path / "export", tmp_path / f".export.old-{dead}-cafe")

    def broken(staging):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_directory(tmp_path / "export", broken)
    assert (tmp_path / "export" / "model.txt").read_text() == "one"
    assert _entries(tmp_path) == ["export"]


def test_bad_path_type():
    with pytest.raises(ValueError, match=r"`path` must be a str or path-like, got path=3"):
        replace_directory(3, _writer("one"))


def test_replace_file_writes_whole_files_and_a_failure_changes_nothing(tmp_path):
    path = tmp_path / "out.txt"
    assert write_text(path, "één\n") == path and path.read_text(encoding="utf-8") == "één\n"
    write_json(tmp_path / "m.json", {"bleu": 1.5, "名": [1]})
    assert json.loads((tmp_path / "m.json").read_text(encoding="utf-8")) == {"bleu": 1.5, "名": [1]}
    seen = []

    def half_then_fail(tmp):
        seen.append(tmp)
        with open(tmp, "w") as f:
            f.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(path, half_then_fail)
    assert path.read_text(encoding="utf-8") == "één\n"  # the old file, untouched
    assert _entries(tmp_path) == ["m.json", "out.txt"]  # the temporary file removed
    assert os.path.dirname(seen[0]) == str(tmp_path)  # beside the target: an atomic rename
    replace_file(tmp_path / "w", lambda tmp: seen.append(tmp) or open(tmp, "w").close(), ".npz")
    assert seen[-1].endswith(".npz") and _entries(tmp_path) == ["m.json", "out.txt", "w"]


def test_replace_file_never_touches_a_file_at_a_temporary_name(tmp_path, monkeypatch):
    import tfblocks._files as atomic

    names = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    other = tmp_path / f"out.txt.tmp-{os.getpid()}-aaaa"
    other.write_text("someone else's", encoding="utf-8")
    link = tmp_path / f"m.json.tmp-{os.getpid()}-aaaa"
    os.symlink(other, link)  # a link at the name: not written through

    def fail(tmp):
        assert os.path.basename(tmp) == f"out.txt.tmp-{os.getpid()}-bbbb"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(tmp_path / "out.txt", fail)
    assert other.read_text(encoding="utf-8") == "someone else's"  # not removed
    names = iter(["aaaa", "cccc"])
    write_json(tmp_path / "m.json", [1])
    assert other.read_text(encoding="utf-8") == "someone else's" and link.is_symlink()
    assert json.loads((tmp_path / "m.json").read_text()) == [1]
    assert not (tmp_path / "m.json").is_symlink()


def test_clean_stale_files_removes_only_killed_writers_files(tmp_path):
    dead = _dead_pid()
    stale = [f"out.txt.tmp-{dead}-0a1b2c3d", f"w.npz.tmp-{dead}-0a1b2c3d.npz",
             f"t.weights.h5.tmp-{dead}-0a1b2c3d.weights.h5"]  # fmt: skip
    kept = [f"out.txt.tmp-{os.getpid()}-0a1b2c3d",  # this process: may be writing
            f"out.txt.tmp-{dead}-0A1B2C3D", f"out.txt.tmp-{dead}", "out.txt",  # other names
            f"dir.tmp-{dead}-0a1b2c3d"]  # fmt: skip
    for name in stale + kept[:-1]:
        (tmp_path / name).write_text("x")
    os.mkdir(tmp_path / kept[-1])  # a folder of that pattern is replace_directory's business
    assert clean_stale_files(tmp_path) == sorted(stale)
    assert _entries(tmp_path) == sorted(kept)
