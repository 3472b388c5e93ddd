"""What a person sees while a translator trains: epoch headers of the whole run, the time
left under a time limit, why training stopped, `curves.png`, and the closing summary."""

import re

import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.translation import progress
from tfblocks.translation.run_folder import RunFolder

PNG = b"\x89PNG\r\n\x1a\n"


def _headers(out):
    return [tuple(map(int, m)) for m in re.findall(r"^Epoch (\d+)/(\d+)$", out, re.M)]


def test_headers_time_left_stop_line_and_curves_across_a_continued_run(tmp_path, capsys):
    job = parts()
    folder = RunFolder(tmp_path / "run")
    lines = []
    capsys.readouterr()
    _, report = train(folder, *job, options(3, verbose=2, time_limit=3600), log=lines.append)
    assert _headers(capsys.readouterr().out) == [(1, 3), (2, 3), (3, 3)]
    left = [line for line in lines if line.startswith("training time")]
    assert len(left) == 3, lines
    pattern = r"training time \d+\.\d of 60\.0 min, \d+\.\d min left"
    estimate = r"(?:: about (\d+) of the (\d) remaining epochs fit \(\d+ s an epoch\))?"
    counts = [re.fullmatch(pattern + estimate, line).groups() for line in left]
    # An hour holds every epoch; after the last one no estimate (no "0 of the 0").
    assert counts == [("2", "2"), ("1", "1"), (None, None)]
    assert lines[-1] == "training stopped: all 3 epochs done"
    curves = tmp_path / "run" / "curves.png"
    assert report["curves"] == str(curves) and curves.read_bytes()[:8] == PNG
    first = curves.read_bytes()

    # The same command with more epochs continues: epochs 4 and 5 of 5, a new picture.
    lines.clear()
    _, report = train(folder, *job, options(5, verbose=2), log=lines.append)
    assert _headers(capsys.readouterr().out) == [(4, 5), (5, 5)]
    assert not any(line.startswith("training time") for line in lines)  # no time limit
    assert lines[-1] == "training stopped: all 5 epochs done"
    assert curves.read_bytes()[:8] == PNG and curves.read_bytes() != first
    assert [h["epoch"] for h in report["history"]] == [1, 2, 3, 4, 5]

    # A rerun with nothing left to train says so, and prints no epoch.
    lines.clear()
    train(folder, *job, options(5, verbose=2), log=lines.append)
    assert _headers(capsys.readouterr().out) == []
    assert lines[-1] == "training stopped: all 5 epochs done"


def test_the_stop_line_names_the_time_limit(tmp_path):
    lines = []
    _, report = train(RunFolder(tmp_path), *parts(), options(2, time_limit=1e-3), log=lines.append)
    assert report["stopped"] == "time limit"
    assert lines[-1] == (
        "training stopped: time limit of 0.0 min reached in epoch 1 (0 of 2 epochs done); "
        "rerun the command to continue"
    )


@pytest.mark.parametrize("phrasebook", [True, False])
def test_the_summary_fits_one_screen_and_names_the_paths(tmp_path, phrasebook):
    folder = RunFolder(tmp_path / "run")
    metrics = {"bleu": 31.5, "chrf": 52.25, "exact_match": 0.125, "sentences": 8,
               "bleu_signature": "nrefs:1|tok:13a"}  # fmt: skip
    report = {"epochs": 4, "train_seconds": 12.5, "stopped": "early stopping", "best_epoch": 2,
              "final_weights": "best (epoch 2)", "curves": folder.join("curves.png")}  # fmt: skip
    text = progress.summary(
        metrics, report, folder, folder.join("export", "1"), folder.join("metrics.json"),
        exact_match=phrasebook,
    )  # fmt: skip
    lines = text.splitlines()
    assert len(lines) <= 12 and max(map(len, lines)) < 200
    assert "test BLEU 31.5  chrF 52.25" in lines[1] and "tok:13a" in lines[1]
    assert ("exact match 0.1250" in text) == phrasebook
    assert "4 epochs, 12.5 s of training" in text and "best dev-BLEU epoch: 2" in text
    assert "stopped early" in text and "final weights: best (epoch 2)" in text
    for name in ("model", "export/1", "curves.png", "metrics.json"):
        assert str(tmp_path / "run" / name) in text, name
