"""`tfblocks-train --hparams-override` sets only the fields it names over the command's
defaults (the small-data regime and max_length=32), which `--help`, the start of the run
and the run folder show; `hparams(..., regime="small_data")` gives the library the same
schedule by name. Only the last test trains (a tiny run through the command)."""

import dataclasses
import json
import math

import pytest

from tests.cli.test_train import made_up_pairs
from tfblocks.cli import train as train_cli
from tfblocks.models.hyperparameters import hparams, parse_overrides
from tfblocks.translation.options import TrainingOptions

FIELDS = ("learning_rate_warmup_steps", "learning_rate_constant", "max_length")


def recipe(*flags):
    """`(preset, override_text)` of `tfblocks-train FLAGS`: what its run folder records."""
    return train_cli.training_options(train_cli.parse_args(list(flags))).recipe()


def command_hparams(*flags):
    """The HParams `tfblocks-train FLAGS` trains with (before its tokenizer sets the
    vocabulary); nothing is read or trained."""
    preset, overrides = recipe(*flags)
    return hparams(preset, **parse_overrides(overrides))


def schedule(hp):
    return tuple(getattr(hp, name) for name in FIELDS)


def test_an_override_changes_only_the_fields_it_names():
    default = command_hparams()
    assert schedule(default) == (200, 0.35, 32)
    assert schedule(command_hparams("--hparams-override", "max_length=64")) == (200, 0.35, 64)
    warm = command_hparams("--hparams-override", "learning_rate_warmup_steps=1000")
    assert warm == dataclasses.replace(default, learning_rate_warmup_steps=1000)
    # The preset's own schedule comes back only when named; another preset keeps the rest.
    named = "learning_rate_warmup_steps=8000,learning_rate_constant=2.0"
    preset_schedule = command_hparams("--hparams-override", named)
    assert preset_schedule == dataclasses.replace(hparams("transformer_tiny"), max_length=32)
    small = command_hparams("--hparams", "transformer_small")
    assert (small.hidden_size, *schedule(small)) == (256, 200, 0.35, 32)


def test_a_rerun_with_the_same_settings_asks_for_the_same_run():
    # A run folder compares its recorded overrides with a rerun's (run.json): the same
    # command, or one that names a default's own value, asks for the same run.
    assert recipe()[0] == "transformer_tiny"
    assert recipe() == recipe("--hparams-override", "learning_rate_constant=0.35,max_length=32")
    assert recipe("--hparams-override", "max_length=64") != recipe()
    # --init-from: the init run's settings, changed only where an override names them.
    tuned = TrainingOptions(epochs=1, init_from="run", hparams_override="relu_dropout=0.0")
    assert tuned.recipe() == (None, "relu_dropout=0.0")


def test_help_shows_the_defaults(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps the help at this width
    with pytest.raises(SystemExit):
        train_cli.parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "learning_rate_warmup_steps=200, learning_rate_constant=0.35, max_length=32" in shown
    assert "8000" in shown  # the preset's own warm-up, for comparison


def test_the_library_gets_the_commands_schedule_by_name():
    assert hparams("transformer_tiny", regime="small_data", max_length=32) == command_hparams()
    mine = hparams("transformer_tiny", regime="small_data", learning_rate_constant=1.0)
    assert schedule(mine) == (200, 1.0, 256)  # a field named in the call wins
    with pytest.raises(ValueError, match=r"regime='tiny_data'"):
        hparams("transformer_tiny", regime="tiny_data")
    with pytest.warns(DeprecationWarning, match=r"regime=\.\.\."):
        assert hparams("transformer_tiny", schedule="small_data") == hparams(
            "transformer_tiny", regime="small_data"
        )


@pytest.mark.heavy  # one tiny run through the command: scheduled first
def test_an_override_naming_no_schedule_field_still_learns(tmp_path, capsys):
    # A made-up pair xx -> yy (each word one subword) and an override that names
    # max_length and a tiny architecture but no learning-rate field: the small-data
    # schedule stays (the run's first line, metrics.json, run.json and model/hparams.json
    # say so), and in its ~500 steps the dev loss falls far below an untrained model's
    # (about ln V). With t2t's 8000 warm-up steps the rate would stay below 3e-4.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    splits = {"train": made_up_pairs(4000, 0), "dev": made_up_pairs(32, 1)}
    splits["test"] = made_up_pairs(4, 2)
    for split, pairs in splits.items():
        for side, language in enumerate(("xx", "yy")):
            lines = "".join(pair[side] + "\n" for pair in pairs)
            (corpus / f"{split}.{language}").write_text(lines, encoding="utf-8")
    override = (
        "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
        "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0,max_length=16"
    )
    run = tmp_path / "run"
    metrics = train_cli.main(
        ["--source-lang", "xx", "--target-lang", "yy", "--corpus-dir", str(corpus),
         "--hparams-override", override, "--epochs", "2", "--batch-tokens", "128",
         "--vocab-size", "100", "--dev-sentences", "0", "--beam-size", "1",
         "--output", str(run)]
    )  # fmt: skip
    first = "hparams: transformer_tiny; overrides: learning_rate_warmup_steps=200,"
    assert first in capsys.readouterr().out
    recorded = json.loads((run / "run.json").read_text(encoding="utf-8"))["settings"]
    saved = json.loads((run / "model" / "hparams.json").read_text(encoding="utf-8"))
    shown = parse_overrides(metrics["hparams_override"])
    for values in (shown, recorded["hparams_override"], saved):
        assert tuple(values[name] for name in FIELDS) == (200, 0.35, 16), values
    assert saved["hidden_size"] == 32
    losses = [epoch["val_loss"] for epoch in metrics["history"]]
    assert losses[-1] < math.log(saved["vocab_size"]) / 4, losses
