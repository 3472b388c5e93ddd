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


# The end of an epoch's line: the run's updates so far and the learning rate of the next.
EPOCH_END = re.compile(r"^\d+/\d+ - .* - loss: [\d.e+-]+ .*- updates: (\d+) - learning_rate: "
                       r"(\d\.\d{3}e[+-]\d\d)$", re.M)  # fmt: skip
WARM_UP = re.compile(r"^warning: this run ends after about (\d+) updates \((\d+) epochs of "
                     r"(\d+)\), before its learning-rate warm-up of 8000 updates does")  # fmt: skip


def test_headers_time_left_stop_line_and_curves_across_a_continued_run(tmp_path, capsys):
    job = parts()
    folder = RunFolder(tmp_path / "run")
    lines = []
    capsys.readouterr()
    _, report = train(folder, *job, options(3, verbose=2, time_limit=3600), log=lines.append)
    out = capsys.readouterr().out
    assert _headers(out) == [(1, 3), (2, 3), (3, 3)]
    # Each epoch's line ends with the updates and the learning rate, which the history
    # keeps; the rate still climbs: the run's updates end long before its warm-up of 8000
    # (transformer_tiny's), which a line says after the first epoch and the report keeps.
    ends = [(int(u), float(r)) for u, r in EPOCH_END.findall(out)]
    per_epoch = ends[0][0]
    assert [u for u, _ in ends] == [per_epoch, 2 * per_epoch, 3 * per_epoch], out
    assert ends == [(h["updates"], pytest.approx(h["learning_rate"], rel=1e-3))
                    for h in report["history"]]  # fmt: skip
    assert 0 < ends[0][1] < ends[1][1] < ends[2][1]
    warned = [WARM_UP.match(line) for line in lines]
    assert [m.groups() for m in warned if m] == [(str(3 * per_epoch), "3", str(per_epoch))]
    assert report["updates"] == 3 * per_epoch and report["warmup_steps"] == 8000
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
    out = capsys.readouterr().out
    assert _headers(out) == [(4, 5), (5, 5)]
    # The continued run counts on from the updates it restored.
    assert [int(u) for u, _ in EPOCH_END.findall(out)] == [4 * per_epoch, 5 * per_epoch]
    warned = [WARM_UP.match(line) for line in lines]
    assert [m.group(1) for m in warned if m] == [str(5 * per_epoch)]
    assert not any(line.startswith("training time") for line in lines)  # no time limit
    assert lines[-1] == "training stopped: all 5 epochs done"
    assert curves.read_bytes()[:8] == PNG and curves.read_bytes() != first
    assert [h["epoch"] for h in report["history"]] == [1, 2, 3, 4, 5]

    # A rerun with nothing left to train says so, and prints no epoch.
    lines.clear()
    _, report = train(folder, *job, options(5, verbose=2), log=lines.append)
    assert _headers(capsys.readouterr().out) == []
    assert lines[-1] == "training stopped: all 5 epochs done"
    assert not any(WARM_UP.match(line) for line in lines)  # nothing left to train
    assert report["updates"] == 5 * per_epoch  # the summary's warning still says it


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


def test_the_summary_says_the_updates_an_unfinished_warm_up_and_how_a_tie_is_won(tmp_path):
    folder = RunFolder(tmp_path / "run")
    metrics = {"bleu": 1.61, "chrf": 20.0, "sentences": 8, "bleu_signature": "tok:13a"}
    history = [{"epoch": e, "dev_bleu": b} for e, b in enumerate([0.5, 1.2, 0.9, 1.2, 1.2], 1)]
    report = {"epochs": 5, "train_seconds": 30.0, "stopped": "epochs", "best_epoch": 5,
              "history": history, "final_weights": "best (epoch 5)", "curves": None,
              "updates": 60, "warmup_steps": 200}  # fmt: skip

    def text(**changes):
        return progress.summary(
            metrics, {**report, **changes}, folder, "export", "metrics.json", exact_match=False
        )

    lines = text().splitlines()
    assert len(lines) <= 12 and max(map(len, lines)) < 200
    assert "  5 epochs (60 updates), 30.0 s of training in all" in lines[2]
    assert lines[2].endswith(
        "best dev-BLEU epoch: 5 (the latest of 3 epochs tied at dev BLEU 1.2: a tie goes to "
        "the later epoch)"
    )
    assert lines[3] == (
        "  warning: training ended after 60 updates, before the learning-rate warm-up of 200 "
        "did: the learning rate never reached its peak"
    )
    # No tie, a finished warm-up: the rule alone, no warning.
    untied = text(best_epoch=3, updates=600)
    assert "best dev-BLEU epoch: 3 (a tie goes to the later epoch)" in untied
    assert "warning" not in untied and "(600 updates)" in untied
    # A folder from before updates were recorded, no dev BLEU: neither is said.
    old = text(best_epoch=None, updates=None)
    assert "  5 epochs, 30.0 s" in old and "best dev-BLEU epoch: none (no dev BLEU)" in old
    assert "warning" not in old


def test_the_warm_up_line_says_the_updates_against_the_warm_up():
    line = progress.warmup_warning(60, 200, 5, 12)
    assert line.startswith(
        "warning: this run ends after about 60 updates (5 epochs of 12), before its "
        "learning-rate warm-up of 200 updates does: its learning rate never reaches its peak"
    )
    assert "\n" not in line and "--epochs" in line and "learning_rate_warmup_steps" in line
    assert "epochs of 12.5)" in progress.warmup_warning(125, 200, 10, 12.5)
    assert progress.warmup_warning(200, 200, 5, 40) is None  # the warm-up ends with the run
    assert progress.warmup_warning(60, 0, 5, 12) is None  # no warm-up
