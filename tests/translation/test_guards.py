"""Bad requests are refused before any work, in one line that names the flag or the file:
files the command reads are never its `--output`, bounds are checked before a run
folder is made, and what the system or TensorFlow says comes back short.

The commands run their `run()` in this process; none of these tests trains a model.
"""

import os

from tests.translation.test_commands import in_process
from tfblocks.translation import translate_command as translate_cli


def _one_error_line(status, err, name):
    assert status == 2, err
    assert err.startswith(f"tfblocks-{name}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_output_is_never_a_file_the_command_reads(tmp_path, monkeypatch, capsys):
    # --score's and --target-prefix's files are read as the input is: --output may not
    # replace them, even with --overwrite, by any name (a link, a hard link, `./`).
    source, targets = tmp_path / "test.ja", tmp_path / "test.en"
    source.write_text("今日 は 。\n", encoding="utf-8")
    targets.write_text("Today.\n", encoding="utf-8")
    (tmp_path / "link.en").symlink_to(targets)
    os.link(targets, tmp_path / "hard.en")
    monkeypatch.chdir(tmp_path)
    model = ("--model", tmp_path / "no-model", "--input", source, "--overwrite")
    for flag, output in [
        ("--score", targets),
        ("--score", "link.en"),
        ("--target-prefix", "./test.en"),
        ("--target-prefix", tmp_path / "hard.en"),
    ]:
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *model,
                                      flag, "test.en", "--output", output)  # fmt: skip
        _one_error_line(status, err, "translate")
        assert f"--output={str(output)!r} is the file {flag}='test.en' reads" in err, err
        assert out == "" and targets.read_text(encoding="utf-8") == "Today.\n"
    assert source.read_text(encoding="utf-8") == "今日 は 。\n"
