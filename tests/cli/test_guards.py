"""Bad requests are refused before any work, in one line that names the flag or the file:
files the command reads are never its `--output`, bounds are checked before a run
folder is made, and what the system or TensorFlow says comes back short.

The commands run their `run()` in this process; none of these tests trains a model.
"""

import errno
import os
import re
import sys

import pytest

from tests.cli.test_commands import in_process
from tfblocks.cli import console
from tfblocks.cli import train as train_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.text import corpus, lines
from tfblocks.text.corpus import SPLITS
from tfblocks.translation.run_folder import RunFolder, run_languages


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


def test_a_score_target_longer_than_the_bound_is_refused_before_loading(
    tmp_path, monkeypatch, capsys
):
    source, targets = tmp_path / "test.ja", tmp_path / "test.en"
    source.write_text("a\nb\n", encoding="utf-8")
    length = translate_cli.MAX_SCORE_CHARACTERS + 1
    targets.write_text("x\n" + "y" * length + "\n", encoding="utf-8")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model",
                                  tmp_path / "no-model", "--input", source, "--score",
                                  targets)  # fmt: skip
    _one_error_line(status, err, "translate")
    assert f"--score={str(targets)!r}, line 2: {length} characters" in err and out == "", err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--model", "b", "--alignments"), "give one --model, got 2"),
        (("--max-length", "4097"), "--max-length=4097"),
    ],
)
def test_translate_refuses_at_argument_checking(args, words, monkeypatch, capsys):
    # Before any input is read or any model is looked for: argparse's exit status 2.
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", "a", *args,
                                  stdin="x\n")  # fmt: skip
    assert status == 2 and words in err and out == "", err
    assert "tfblocks-translate: error: " in err and "Traceback" not in err


def test_closed_standard_input_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", None)  # what Python makes of `<&-`
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model",
                                  tmp_path / "no-model")  # fmt: skip
    _one_error_line(status, err, "translate")
    assert "standard input is closed" in err and out == "", err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--vocab-size", str(10**12)), f"--vocab-size={10**12}"),
        (("--batch-tokens", str(10**12)), f"--batch-tokens={10**12} with --vocab-size=1000"),
        (("--init-from", "{tmp}"), "`--init-from` must be a run folder"),
    ],
)
def test_train_refuses_at_argument_checking_naming_the_flag(
    args, words, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    args = [arg.format(tmp=tmp_path / "empty") for arg in args]
    (tmp_path / "empty").mkdir()  # a folder, but no run folder: no model/config.json
    status, _, err = in_process(train_cli, monkeypatch, capsys, *args, "--output", run)
    _one_error_line(status, err, "train")
    assert words in err and not run.exists(), err
    if args[0] == "--init-from":
        assert f"--init-from={str(tmp_path / 'empty')!r}" in err and "path=" not in err


def test_batch_tokens_are_checked_against_the_machines_memory(monkeypatch):
    train_cli.check_batch_memory(4096, 32000, memory_mb=1024)  # 0.5 GiB of logits
    with pytest.raises(ValueError, match=r"--batch-tokens=8192 with --vocab-size=32000"):
        train_cli.check_batch_memory(8192, 32000, memory_mb=512)
    monkeypatch.setattr(train_cli, "physical_memory_mb", lambda: None)  # the system says nothing
    train_cli.check_batch_memory(10**12, 32000)


def test_a_folder_or_a_loop_of_links_where_a_corpus_file_should_be_says_so(tmp_path):
    (tmp_path / "train.de").mkdir()
    loop = tmp_path / "train.en"
    loop.symlink_to(loop)  # a link to itself
    with pytest.raises(IsADirectoryError) as error:
        lines.language_files(tmp_path, "train", "de")
    assert console.error_line(error.value) == f"Is a directory: '{tmp_path / 'train.de'}'"
    for find in (
        lambda: lines.language_files(tmp_path, "train", "en"),
        lambda: lines.expand_paths("--train-target", str(loop)),
    ):
        with pytest.raises(OSError) as error:
            find()
        assert error.value.errno == errno.ELOOP
        assert console.error_line(error.value) == f"{os.strerror(errno.ELOOP)}: '{loop}'"
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "dev.de"))):
        lines.language_files(tmp_path, "dev", "de")  # a missing file is named as before


def test_the_same_file_on_both_sides_of_a_split_is_refused(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.de").write_text("eins\n", encoding="utf-8")
        (tmp_path / f"{split}.en").write_text("one\n", encoding="utf-8")
    assert corpus.load_splits(tmp_path, source="de", target="en")["dev"] == [("eins", "one")]
    (tmp_path / "dev.en").unlink()
    (tmp_path / "dev.en").symlink_to(tmp_path / "dev.de")
    with pytest.raises(ValueError, match=r"the dev split's source .*dev\.de and target "
                                         r".*dev\.en are the same file"):  # fmt: skip
        corpus.load_splits(tmp_path, source="de", target="en")
    files = {split: ([tmp_path / "test.de"], [tmp_path / "test.de"]) for split in SPLITS}
    with pytest.raises(ValueError, match=r"the train split's source .* are the same file"):
        corpus.load_splits(source="de", target="en", files=files)


def test_a_python_error_inside_tensorflow_is_its_own_short_line(tmp_path):
    # A streamed corpus reaches the training step through tf.data's from_generator: what
    # its reader raises comes back as a TensorFlow error carrying the Python traceback.
    import tensorflow as tf

    message = f"{tmp_path / 'train.de'}, line 7: invalid UTF-8 (invalid start byte, byte b'\\xe4')."

    def sentences():
        yield "eins"
        raise ValueError(message)

    dataset = tf.data.Dataset.from_generator(
        sentences, output_signature=tf.TensorSpec([], tf.string)
    )
    with pytest.raises(tf.errors.OpError) as error:
        list(dataset)
    assert "Traceback" in error.value.message  # what made the line 1,776 characters long
    assert console.error_line(error.value) == f"ValueError: {message}"


def test_run_folder_json_files_of_the_wrong_shape_are_named(tmp_path):
    run = tmp_path / "run"
    with RunFolder(run):  # a new run folder: run.json, state/
        pass
    progress = run / "state" / "progress.json"
    for text, words in [
        ('["epochs", 3]', "must hold a JSON object, got ['epochs', 3]"),
        ('{"epochs": "3"}', "epochs has the wrong type, got epochs='3'"),
        ('{"epochs": 3, "history": {}}', "history has the wrong type"),
        ('{"epochs": true}', "epochs has the wrong type, got epochs=True"),
        ('{"epochs": 3, "hist', "is not the JSON tfblocks wrote"),
    ]:
        progress.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError) as error:
            RunFolder(run)
        line = console.error_line(error.value)
        assert line.startswith(f"{progress}") and words in line, line
    progress.unlink()
    for text, words in [
        ('{"format": 1, "settings": [1]}', "settings has the wrong type"),
        ('{"format": 1, "sett', "is not the JSON tfblocks wrote"),
        ("[1]", "must hold a JSON object"),
    ]:
        (run / "run.json").write_text(text, encoding="utf-8")
        with RunFolder(run) as folder, pytest.raises(ValueError) as error:
            folder.settings()
        line = console.error_line(error.value)
        assert line.startswith(f"{run / 'run.json'}") and words in line, line
        assert run_languages(run) is None  # what reads only the languages does without them


def test_a_preset_whose_tokenizer_names_a_class_outside_keras_is_one_line(tmp_path):
    import json

    import tfblocks
    from tfblocks.models import load_preset, save_preset
    from tfblocks.text import train_tokenizer

    tokenizer = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 20,
                                vocab_size=40)  # fmt: skip
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, hidden_size=16,
        filter_size=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
    )  # fmt: skip
    path = save_preset(tfblocks.build_transformer(hp), tokenizer, tmp_path / "model", hp)
    config = tmp_path / "model" / "tokenizer.json"
    saved = json.loads(config.read_text(encoding="utf-8"))
    saved.update(module="os", class_name="system", registered_name="os>system")
    config.write_text(json.dumps(saved), encoding="utf-8")  # Keras' safe mode refuses it
    with pytest.raises(ValueError) as error:
        load_preset(path)
    line = console.error_line(error.value)
    assert line.startswith(f"{config} cannot be loaded: ") and len(line) < 300 + len(str(config))
