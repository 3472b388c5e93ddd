"""A run folder keeps the XLA programs its commands compile (`RUN/xla-cache/KEY/`,
`tfblocks.translation.xla_cache`): written by one `tfblocks-translate`, loaded by the
next (which compiles none), safe with two processes filling it at once; the flags it
sets before TensorFlow loads, a read-only folder, the user's own setting."""

import os
import subprocess
import sys

import pytest

from tests.cli.runs import marian_run
from tfblocks.translation import xla_cache

pytestmark = pytest.mark.heavy  # three processes that load TensorFlow: scheduled first
LINES = ["the cat sleeps!", "the dog sits in the garden!", "a small cat!"]


def _translate(run, source):
    """A `tfblocks-translate --model run` process on the file `source`, with TensorFlow's
    log of the XLA cache's loads on (a line `Loading cached entry` a loaded program)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0",
           "TF_CPP_VMODULE": "device_executable_persistor=1"}  # fmt: skip
    env.pop("TF_XLA_FLAGS", None)
    script = os.path.join(os.path.dirname(sys.executable), "tfblocks-translate")
    command = [script, "--model", str(run), "--input", str(source), "--xla", "on",
               "--beam-size", "1"]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def _programs(run):
    """The compiled programs in `run`'s cache: `{file name}`."""
    folder = os.path.join(run, xla_cache.CACHE_FOLDER, xla_cache.cache_key())
    return {name for name in os.listdir(folder) if not name.endswith(".tmp")}


def test_a_second_command_loads_what_the_first_two_compiled_at_once(tmp_path):
    run = marian_run(tmp_path / "a run")  # a space in its path: quoted in the flag
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    # Two processes fill the empty cache at once: both translate, neither fails.
    first = [_translate(run, source) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in first]
    for process, (_out, err) in zip(first, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    assert outputs[0][0] == outputs[1][0] and len(outputs[0][0].splitlines()) == len(LINES)
    written = _programs(run)
    assert written, os.listdir(run)
    # A third compiles nothing: it loads every program it needs (no new file), and
    # translates the same.
    third = _translate(run, source)
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, err[-3000:]
    assert out == outputs[0][0]
    assert _programs(run) == written
    assert err.count("Loading cached entry") == len(written), err[-3000:]


@pytest.fixture
def command(monkeypatch, tmp_path):
    """A run folder (its run.json), and this process as a command before TensorFlow
    loads: `TF_XLA_FLAGS` unset, TensorFlow taken as not loaded (restored after)."""
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.setattr(xla_cache, "_tensorflow_loaded", lambda: False)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    return tmp_path / "run"


def test_the_flags_name_the_run_folders_cache(command, monkeypatch):
    run = command
    for given in (run, run / "model", run / "export" / "1", [run.parent / "other", run]):
        assert xla_cache.run_folder_of(given) == str(run)
    assert xla_cache.run_folder_of(run.parent) is None
    folder = xla_cache.use_run_cache(str(run), "tfblocks-translate")
    key = xla_cache.cache_key()
    assert folder == os.path.join(str(run), "xla-cache", key)
    assert os.environ["TF_XLA_FLAGS"] == (
        f'--tf_xla_persistent_cache_directory="{folder}" --tf_xla_persistent_cache_device_types=CPU'
    )
    assert not os.path.exists(folder)  # created by TensorFlow when it writes a program
    # The key: TensorFlow's version, the machine, and a hash of the CPU and XLA_FLAGS.
    assert key.startswith("tf2.") and len(key.rsplit("-", 1)[1]) == 10
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_other=1")
    assert xla_cache.cache_key() != key


def test_a_read_only_folder_is_read_or_said_in_one_line(command, monkeypatch, capsys):
    run = command
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a read-only file system
    assert xla_cache.use_run_cache(str(run), "tfblocks-translate") is None
    assert "TF_XLA_FLAGS" not in os.environ
    err = capsys.readouterr().err
    assert err == (f"tfblocks-translate: {run} cannot be written to: the XLA programs compiled "
                   "now are not kept for the next command\n")  # fmt: skip
    # With a cache already there: read, not written.
    os.makedirs(run / "xla-cache" / xla_cache.cache_key())
    folder = xla_cache.use_run_cache(str(run), "tfblocks-translate")
    assert os.environ["TF_XLA_FLAGS"] == (
        f'--tf_xla_persistent_cache_directory="{folder}" '
        "--tf_xla_persistent_cache_device_types=CPU "
        "--tf_xla_persistent_cache_read_only=true"
    )
    assert capsys.readouterr().err == ""


def test_the_users_own_setting_and_a_loaded_tensorflow_are_left_alone(command, monkeypatch):
    run = command
    for own in ("--tf_xla_persistent_cache_directory=", "/etc/xla-flags.txt"):  # none; a file
        monkeypatch.setenv("TF_XLA_FLAGS", own)
        assert xla_cache.use_run_cache(str(run), "tfblocks-translate") is None
        assert os.environ["TF_XLA_FLAGS"] == own
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")  # other flags are kept
    folder = xla_cache.use_run_cache(str(run), "tfblocks-translate")
    assert os.environ["TF_XLA_FLAGS"].startswith(
        f'--tf_xla_auto_jit=0 --tf_xla_persistent_cache_directory="{folder}"'
    )
    monkeypatch.delenv("TF_XLA_FLAGS")
    monkeypatch.setattr(xla_cache, "_tensorflow_loaded", lambda: True)  # read at its start
    assert xla_cache.use_run_cache(str(run), "tfblocks-translate") is None
    assert "TF_XLA_FLAGS" not in os.environ


def test_xla_auto_compiles_large_jobs_only_and_both_translate_alike(tmp_path, monkeypatch,
                                                                    capsys):  # fmt: skip
    from tests.cli.test_commands import in_process
    from tfblocks.cli import translate as translate_cli

    run = marian_run(tmp_path / "run")
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    got = {}
    for xla in ("on", "auto"):  # auto: 3 lines, a small job, so off
        status, got[xla], err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                           "--input", source, "--xla", xla)  # fmt: skip
        assert status == 0, err
        assert ("no XLA)" in err) == (xla == "auto"), err
    assert got["on"] == got["auto"] and len(got["on"].splitlines()) == 3
    assert [xla_cache.use_xla("auto", n) for n in (None, 1, 15000, 15001)] == [
        False, False, False, True]  # fmt: skip
    with pytest.raises(ValueError, match=r"`xla` must be 'auto', 'on' or 'off', got xla='yes'"):
        xla_cache.use_xla("yes")
