"""examples/translate.py end to end with tiny settings: train, evaluate, export, reload."""

import json

from tests.scripts import run_script

TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "max_length=24,learning_rate_warmup_steps=20,learning_rate_constant=1.0"
)


def test_translate_runs_end_to_end(tmp_path):
    result = run_script(
        "examples/translate.py", "--epochs", "1", "--limit-train", "600",
        "--limit-test", "16", "--vocab-size", "250", "--hparams-override", TINY,
        "--beam-size", "2", "--batch-tokens", "1024", "--output", tmp_path,
        timeout=600,
    )  # fmt: skip
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["sentences"] == 16 and 0.0 <= metrics["bleu"] <= 100.0
    assert 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["epochs"] == 1 and metrics["reload_matches"] is True
    assert "今日のランチはカレーだ。" in metrics["samples"]
    assert set(metrics["seconds"]) == {"data", "train", "evaluate", "export", "reload"}
    assert (tmp_path / "export" / "saved_model.pb").exists()
    assert (tmp_path / "tokenizer.model").exists()
    assert any((tmp_path / "logs").rglob("events.out.tfevents.*"))
    assert "test BLEU" in result.stdout and "tok:13a" in result.stdout


def test_bad_override_is_a_clear_error(tmp_path):
    result = run_script(
        "examples/translate.py",
        "--hparams-override",
        "hiden_size=3",
        "--output",
        tmp_path,
        expect_success=False,
    )
    assert result.returncode != 0
    assert "hiden_size" in result.stderr and "hidden_size" in result.stderr
