"""`tfblocks-train` refuses every option that cannot work before its run folder is created
or touched, so the corrected command works; `~` in a path is the home folder; a folder
another run holds is refused. `main` runs in this process, with tiny settings."""

import json
import re

import pytest

from tests.translation.test_commands import TINY, TRAIN
from tfblocks import text
from tfblocks.translation import train_command
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # one whole (tiny) run

FAST = (*TRAIN, "--limit-train", "100", "--limit-test", "2", "--dev-sentences", "0",
        "--beam-size", "1")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vocab-size", "0"), "--vocab-size=0"),
        (("--epochs", "0"), "--epochs=0"),
        (("--seed", "-1"), "--seed=-1"),
        (("--batch-tokens", "-5"), "--batch-tokens=-5"),
        (("--limit-train", "-3"), "--limit-train=-3"),
        (("--limit-test", "0"), "--limit-test=0"),
        (("--max-train-minutes", "nan"), "--max-train-minutes=nan"),
        (("--alpha", "inf"), "--alpha=inf"),
        (("--early-stopping", "2"), "--early-stopping=2 with --dev-sentences=0"),
        (("--hparams-override", f"{TINY},max_length=0"), "max_length=0"),
        (("--hparams-override", f"{TINY},max_length=1"), "max_length=1"),
        (("--hparams-override", f"{TINY},learning_rate_constant=inf"), "constant=inf"),
        (("--hparams-override", f"{TINY},optimizer_adam_epsilon=inf"), "epsilon=inf"),
        (("--hparams-override", f"{TINY},vocab_size=300"), "use --vocab-size"),
        (("--batch-tokens", "16"), "--batch-tokens=16"),  # below max_length=24
        (("--corpus-dir", ""), "--corpus-dir=''"),
        (("--accumulate-steps", "0"), "--accumulate-steps=0"),
        (("--hparams-override", f"{TINY},accumulate_steps=2"), "use --accumulate-steps"),
        (("--ema", "1.0"), "--ema=1.0"),
        (("--ema", "0"), "--ema=0.0"),
        (("--ema", "nan"), "--ema=nan"),
        (("--lora-rank", "2"), "--lora-rank=2 without --init-from"),
        (("--init-from", "run", "--lora-rank", "0"), "--lora-rank=0"),
        (("--lora-ffn",), "--lora-ffn without --lora-rank"),
        (("--strategy", "multi_worker", "--max-train-minutes", "5"), "--max-train-minutes=5.0"),
    ],
)
def test_a_bad_option_is_refused_before_the_folder_is_touched(tmp_path, args, message):
    output = tmp_path / "run"
    with pytest.raises(ValueError, match=re.escape(message)):
        train_command.main([*FAST, *args, "--output", str(output)])
    assert not output.exists()


@pytest.mark.parametrize(
    ("cluster", "task", "output", "expected"),
    [
        ({"worker": ["a:1", "b:1"]}, ("worker", 0), "runs/x", "runs/x"),
        ({"worker": ["a:1", "b:1"]}, ("worker", 1), "runs/x/", "runs/x-worker-1"),
        ({"chief": ["c:1"], "worker": ["a:1"]}, ("worker", 0), "runs/x", "runs/x-worker-0"),
        ({"chief": ["c:1"], "worker": ["a:1"]}, ("chief", 0), "runs/x", "runs/x"),
        ({"worker": ["a:1", "b:1"]}, ("worker", 1), None, None),  # a temporary folder
    ],
)
def test_only_the_chief_writes_the_run_folder(monkeypatch, cluster, task, output, expected):
    config = {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert train_command.worker_output(output) == expected


def test_after_a_failed_start_the_corrected_command_works(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # `~` is tmp_path
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    splits = text.load_phrasebook(size=1000)
    for split, size in (("train", 100), ("dev", 4), ("test", 2)):
        pairs = splits[split][:size]
        for side, language in enumerate(("ja", "en")):
            if (split, language) != ("dev", "en"):  # missing: the first command fails
                lines = "".join(pair[side] + "\n" for pair in pairs)
                (corpus / f"{split}.{language}").write_text(lines, encoding="utf-8")
    command = [*FAST, "--corpus-dir", "~/corpus", "--output", "~/run"]
    with pytest.raises(FileNotFoundError, match=re.escape(str(corpus / "dev.en"))):
        train_command.main(command)
    assert not (tmp_path / "run").exists()  # the corpus is read first

    # A start that fails in the folder (before an epoch is recorded) binds nothing: the
    # next command may use other settings.
    (corpus / "dev.en").write_text("".join(p[1] + "\n" for p in splits["dev"][:4]), "utf-8")

    def failing_tokenizer(*args, **kwargs):
        raise ValueError("the tokenizer failed")

    with monkeypatch.context() as patch:
        patch.setattr(text, "train_tokenizers", failing_tokenizer)
        with pytest.raises(ValueError, match="the tokenizer failed"):
            train_command.main([*command, "--vocab-size", "300"])
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["vocab_size"] == 300

    held = r"in use by another tfblocks run \(process id"
    with RunFolder(tmp_path / "run"), pytest.raises(ValueError, match=held):  # another run's
        train_command.main(command)

    metrics = train_command.main(command)
    assert metrics["epochs"] == 1 and metrics["sentences"] == 2
    settings = json.loads((tmp_path / "run" / "run.json").read_text())["settings"]
    assert settings["vocab_size"] == 250 and settings["init_from"] is None
    assert (tmp_path / "run" / "export" / "1" / "saved_model.pb").exists()
