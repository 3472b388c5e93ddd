"""Every bad input to the console scripts ends in one line `NAME: error: ...` naming it.

A file the system refuses (OSError) or TensorFlow's file system refuses
(`tf.errors.OpError`) is reported like a bad argument, with the path; `--verbose` shows
the traceback. The commands run their `run()` in this process, on stand-in models.
"""

import errno
import os
import sys

import pytest
import tensorflow as tf

from tests.cli.test_commands import in_process
from tfblocks.cli import console
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.translation import engines, evaluation


def _one_error_line(status, err, name):
    assert status == 2, err
    assert err.startswith(f"tfblocks-{name}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_error_line_names_the_path_on_one_line(tmp_path):
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "runs/x/dev.ja")
    assert console.error_line(missing) == "No such file or directory: 'runs/x/dev.ja'"
    moved = OSError(errno.EXDEV, "Invalid cross-device link", "a", None, "b")
    assert console.error_line(moved) == "Invalid cross-device link: 'a' -> 'b'"
    with pytest.raises(tf.errors.NotFoundError) as tf_error:
        tf.io.read_file(str(tmp_path / "x.txt")).numpy()
    line = console.error_line(tf_error.value)
    assert line.startswith(f"NotFoundError: {tmp_path / 'x.txt'}; No such file"), line
    assert console.error_line(ValueError("two\n  lines")) == "two lines"


def test_run_command_reports_os_and_tensorflow_errors_verbose_shows_them(
    tmp_path, monkeypatch, capsys
):
    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/enja/best.npz")

    def tensorflow_error():
        tf.io.read_file(str(tmp_path / "x.txt"))

    for main, words in [
        (full_disk, "No space left on device: '/runs/enja/best.npz'"),
        (tensorflow_error, f"NotFoundError: {tmp_path / 'x.txt'}; No such file"),
    ]:
        monkeypatch.setattr("sys.argv", ["tfblocks-x"])
        with pytest.raises(SystemExit) as stop:
            console.run_command("tfblocks-x", main)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1 and words in err, err
        monkeypatch.setattr("sys.argv", ["tfblocks-x", "--verbose"])
        with pytest.raises((OSError, tf.errors.OpError)):  # the traceback
            console.run_command("tfblocks-x", main)

    def bug():
        raise KeyError("a bug, not a bad input")

    monkeypatch.setattr("sys.argv", ["tfblocks-x"])
    with pytest.raises(KeyError):
        console.run_command("tfblocks-x", bug)


def test_train_reports_unusable_output_and_missing_corpus_files(tmp_path, monkeypatch, capsys):
    regular = tmp_path / "notes.txt"
    regular.write_text("mine\n")
    status, _, err = in_process(train_cli, monkeypatch, capsys, "--output", regular / "run")
    _one_error_line(status, err, "train")
    assert "Not a directory" in err and str(regular / "run") in err, err
    assert regular.read_text() == "mine\n"

    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: the system's refusal is simulated
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            if os.fspath(path).startswith(str(locked)):
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)
    else:
        locked.chmod(0o555)
    try:
        status, _, err = in_process(train_cli, monkeypatch, capsys, "--output", locked / "run")
    finally:
        locked.chmod(0o755)
        monkeypatch.undo()
    _one_error_line(status, err, "train")
    assert f"Permission denied: '{locked / 'run'}'" in err, err

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.ja", "train.en"):  # no dev or test split
        (corpus / name).write_text("今日 は 。\n", encoding="utf-8")
    status, _, err = in_process(train_cli, monkeypatch, capsys, "--corpus-dir", corpus,
                                "--output", tmp_path / "run")  # fmt: skip
    _one_error_line(status, err, "train")
    assert f"No such file or directory: '{corpus / 'dev.ja'}'" in err, err


def test_train_reports_unreadable_corpora_in_one_line_before_the_folder(
    tmp_path, monkeypatch, capsys
):
    corpus, run = tmp_path / "corpus", tmp_path / "run"
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        (corpus / f"{split}.de").write_text("eins\nzwei\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("one\ntwo\n", encoding="utf-8")
    pair = ("--source-lang", "de", "--target-lang", "en", "--corpus-dir", corpus)
    (corpus / "train.en").write_text("one\n", encoding="utf-8")
    uneven = f"{corpus / 'train.en'} ends after line 1; {corpus / 'train.de'} goes on at line 2"
    (corpus / "dev.de").write_bytes(b"eins\nzw\xe4i\n")
    (corpus / "test.en").unlink()
    (corpus / "test.en.gz").write_text("not gzip\n")
    for fix, words in [
        (None, uneven),
        (("train.en", "one\ntwo\n"), f"{corpus / 'dev.de'}, line 2: invalid UTF-8"),
        (("dev.de", "eins\nzwei\n"), f"{corpus / 'test.en.gz'} is named .gz but is not gzip"),
    ]:
        if fix is not None:
            (corpus / fix[0]).write_text(fix[1], encoding="utf-8")
        status, _, err = in_process(train_cli, monkeypatch, capsys, *pair, "--output", run)
        _one_error_line(status, err, "train")
        assert words in err and not run.exists(), err
    (corpus / "test.en.gz").unlink()
    (corpus / "test.en").write_text("", encoding="utf-8")
    (corpus / "test.de").write_text("", encoding="utf-8")
    status, _, err = in_process(train_cli, monkeypatch, capsys, *pair, "--output", run)
    _one_error_line(status, err, "train")
    assert f"the test split of --corpus-dir={str(corpus)!r} (test.de, test.en) has no " in err
    assert not run.exists()


def test_evaluate_refuses_empty_files_naming_them(tmp_path, monkeypatch, capsys):
    # A BLEU of no sentences is no score: an error, before any model is loaded.
    src, ref = tmp_path / "test.ja", tmp_path / "test.en"
    src.write_text("")
    ref.write_text("")
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", tmp_path / "none",
                                  "--src", src, "--ref", ref)  # fmt: skip
    _one_error_line(status, err, "evaluate")
    assert f"--src={str(src)!r} and --ref={str(ref)!r} have no lines" in err and out == ""
    with pytest.raises(ValueError, match="empty"):
        evaluation.score([], [])
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", tmp_path,
                                "--src", tmp_path / "missing.ja", "--ref", ref)  # fmt: skip
    _one_error_line(status, err, "evaluate")
    assert f"No such file or directory: '{tmp_path / 'missing.ja'}'" in err


@pytest.mark.parametrize(
    ("module", "flag", "value"),
    [(translate_cli, "--max-length", 0), (translate_cli, "--max-length", 1),
     (evaluate_cli, "--max-length", 0), (evaluate_cli, "--batch-size", 0),
     (evaluate_cli, "--beam-size", -1)],
)  # fmt: skip
def test_decoding_flags_refuse_values_that_cannot_work(module, flag, value, monkeypatch, capsys):
    files = ("--src", "a", "--ref", "b") if module is evaluate_cli else ()
    status, _, err = in_process(module, monkeypatch, capsys, "--model", "m", *files, flag, value)
    assert status == 2 and f"{flag}={value}" in err, err  # argparse's exit status, one line
    with pytest.raises(ValueError, match="--max-length=0"):
        engines.load_translate("m", max_length=0)


def _stand_in_export(path, serve):
    """A SavedModel with a `serving_default(text) -> {"translation"}` signature."""
    module = tf.Module()
    module.serve = tf.function(serve, input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def test_a_saved_model_is_loaded_only_without_a_preset_and_said(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    _stand_in_export(run / "export" / "1", lambda text: {"translation": tf.strings.upper(text)})
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                  stdin="abc\n\nde\n")  # fmt: skip
    assert status == 0 and out == "ABC\n\nDE\n", err
    assert (
        f"tfblocks-translate: loading the SavedModel {run / 'export' / '1'} (it runs its own "
        "graph: use only models you trust)"
    ) in err
    for module in (translate_cli, evaluate_cli):  # --help says it too
        with pytest.raises(SystemExit):
            module.parse_args(["--help"])
        assert "give only models you trust" in " ".join(capsys.readouterr().out.split())

    # With a preset beside it (model/), the preset is loaded, not the SavedModel.
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text("{}")

    def load_preset(path):
        raise ValueError(f"loaded the preset {path}")

    monkeypatch.setattr("tfblocks.models.load_preset", load_preset)
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, stdin="a\n")
    _one_error_line(status, err, "translate")
    assert f"loaded the preset {run / 'model'}" in err and "SavedModel" not in err

    # A SavedModel's graph may read files: TensorFlow's error is one line naming the path.
    missing = tmp_path / "secret.txt"
    _stand_in_export(
        tmp_path / "reader",
        lambda text: {"translation": tf.fill(tf.shape(text), tf.io.read_file(str(missing)))},
    )
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model",
                                tmp_path / "reader", stdin="a\n")  # fmt: skip
    last = err.splitlines()[-1]
    assert status == 2 and "Traceback" not in err and "loading the SavedModel" in err, err
    assert last.startswith("tfblocks-translate: error: NotFoundError: ") and str(missing) in last


def test_an_interrupt_is_one_line_and_status_130(capsys, monkeypatch):
    def main():
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["tfblocks-train"])
    with pytest.raises(SystemExit) as stop:
        console.run_command("tfblocks-train", main, interrupted="; rerun to continue")
    assert stop.value.code == 130
    assert capsys.readouterr().err == "tfblocks-train: interrupted; rerun to continue\n"
    monkeypatch.setattr(sys, "argv", ["tfblocks-train", "--verbose"])
    with pytest.raises(KeyboardInterrupt):
        console.run_command("tfblocks-train", main)
