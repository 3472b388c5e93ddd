"""The phases of a training job as a person sees them: a time-limited stop counts and plots
only completed epochs; the phases after training announce themselves and show progress;
a rerun of a finished folder skips them; a TSV needs its columns or a header naming the
languages, and its held-out rows are written into the run folder, where
`tfblocks-evaluate` repeats the test score with them."""

import json
import re

import pytest

from tests.cli.test_commands import TRAIN, in_process
from tests.cli.test_train import made_up_pairs
from tests.translation.run_job import options, parts, train
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.training.callbacks import TimeLimit
from tfblocks.translation import job_fit as job_module
from tfblocks.translation import progress
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole (tiny) jobs: scheduled first


class _CutInEpochThree(TimeLimit):
    """A time limit that runs out after the first step of epoch 3, whatever the clock says
    (a deterministic stand-in for the clock of `TimeLimit`)."""

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 3:
            self.model.stop_training = True
            self.stopped_early = True


def test_a_time_limited_stop_counts_and_plots_only_completed_epochs(tmp_path, monkeypatch):
    splits, tokenizer, hp = parts()
    # Weights that cannot move: every epoch ties on dev BLEU, and a tie goes to the later
    # epoch, so a cut epoch that competed would become the best one.
    frozen = hp.__class__(**{**hp.__dict__, "learning_rate_constant": 1e-12})
    drawn = {}

    def plot(path, history, best_epoch=None, averaged_epochs=None, title=None):
        drawn.update(epochs=[r["epoch"] for r in history], best=best_epoch, title=title)
        return path

    monkeypatch.setattr(job_module, "TimeLimit", _CutInEpochThree)
    monkeypatch.setattr(job_module, "plot_curves", plot)
    folder = RunFolder(tmp_path / "run")
    lines = []
    limited = options(4, dev_sentences=4, time_limit=3600)
    _, report = train(folder, splits, tokenizer, frozen, limited, log=lines.append)
    assert report["stopped"] == "time limit" and report["epochs"] == 2
    assert [h["epoch"] for h in report["history"]] == [1, 2]
    assert report["history"][0]["dev_bleu"] == report["history"][1]["dev_bleu"]
    assert report["best_epoch"] == 2 and report["final_weights"] == "best (epoch 2)"
    recorded = folder.progress()
    assert (recorded["epochs"], recorded["best_epoch"]) == (2, 2)
    assert drawn["epochs"] == [1, 2] and drawn["best"] == 2 and "epoch 2" in drawn["title"]
    assert not any("cut epoch" in line for line in lines)
    # After epochs 1 and 2 the estimate covers the 3 and 2 epochs still to go.
    left = [line for line in lines if line.startswith("training time")]
    assert [re.search(r"of the (\d) remaining", line).group(1) for line in left] == ["3", "2"]
    assert lines[-1] == (
        "training stopped: time limit of 60.0 min reached in epoch 3 (2 of 4 epochs done); "
        "rerun the command to continue"
    )
    metrics = {"bleu": 1.0, "chrf": 2.0, "sentences": 2, "bleu_signature": "tok:13a"}
    text = progress.summary(metrics, report, folder, "export", "metrics.json", exact_match=False)
    assert "  2 epochs (" in text and "best dev-BLEU epoch: 2" in text
    assert "stopped by the time limit" in text

    # The rerun repeats the cut epoch 3 from the state after epoch 2.
    _, report = train(folder, splits, tokenizer, frozen, options(3, dev_sentences=4),
                      log=lines.append)  # fmt: skip
    assert report["stopped"] == "epochs" and [h["epoch"] for h in report["history"]] == [1, 2, 3]
    assert report["best_epoch"] == 3 and drawn["epochs"] == [1, 2, 3]


def test_time_lines_estimate_from_the_last_epoch_and_name_a_stop_between_epochs():
    # 50 minutes left at 290 s an epoch (the last epoch's time, whatever the first took).
    assert progress.time_left(600, 3600, 290, 20).endswith(
        "min left: about 10 of the 20 remaining epochs fit (290 s an epoch)"
    )
    assert progress.time_left(600, 3600, 290, 0) == "training time 10.0 of 60.0 min, 50.0 min left"
    line = progress.stop_line("time limit", {"epochs": 5}, options(8, time_limit=60), cut=False)
    assert line == (
        "training stopped: time limit of 1.0 min reached after epoch 5 (5 of 8 epochs done); "
        "rerun the command to continue"
    )


def _write_tsv(path, pairs, header):
    """`pairs` as `ID<TAB>yy<TAB>xx` rows: the target before the source."""
    rows = ["id\tyy\txx"] if header else []
    rows += [f"{i}\t{target}\t{source}" for i, (source, target) in enumerate(pairs)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_tsv_run_writes_its_held_out_rows_shows_its_phases_and_a_rerun_skips_them(
    tmp_path, monkeypatch, capsys
):
    pairs = made_up_pairs(400, 0)  # 2 %: 4 dev and 4 test rows
    run = tmp_path / "run"
    command = [*TRAIN, "--source-lang", "xx", "--target-lang", "yy", "--vocab-size", "60",
               "--dev-sentences", "0", "--beam-size", "1", "--output", str(run)]  # fmt: skip

    # Without a header naming xx and yy, the columns must be given: one line, nothing made.
    plain = _write_tsv(tmp_path / "plain.tsv", pairs, header=False)
    with pytest.raises(ValueError) as refused:
        train_cli.main([*command, "--tsv", str(plain)])
    message = f"`--source-column` is needed: --tsv={str(plain)!r} has no first line naming 'xx'"
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    assert not run.exists()

    # The header `id<TAB>yy<TAB>xx` gives the columns, and is not a pair.
    tsv = _write_tsv(tmp_path / "pairs.tsv", pairs, header=True)
    capsys.readouterr()
    metrics = train_cli.main([*command, "--tsv", str(tsv)])
    out = capsys.readouterr().out
    assert "pairs {'train': 392, 'dev': 4, 'test': 4}" in out
    held = run / "heldout"
    written = {}
    for split in ("dev", "test"):
        sides = [(held / f"{split}.{lang}").read_text(encoding="utf-8") for lang in ("xx", "yy")]
        written[split] = list(zip(*(side.splitlines() for side in sides), strict=True))
        assert len(written[split]) == 4 and set(written[split]) <= set(pairs), split
    assert metrics["sentences"] == 4
    recorded = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert recorded["heldout"] == {
        split: [str(held / f"{split}.xx"), str(held / f"{split}.yy")] for split in ("dev", "test")
    }
    assert f"  test:    {held / 'test.xx'}  {held / 'test.yy'}" in out  # in the summary

    # Every phase after training says so as it starts; the test translation counts.
    phases = ["training stopped", "translating the test split: 4 sentences, 64 at a time",
              "  test translation: 4/4 sentences (", "exporting the model to",
              "reloading the SavedModel", "\nsummary\n"]  # fmt: skip
    where = [out.find(phase) for phase in phases]
    assert -1 not in where and where == sorted(where), list(zip(phases, where, strict=True))

    # tfblocks-evaluate on the held-out files repeats the summary's scores.
    status, scores, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run,
                                     "--src", held / "test.xx", "--ref", held / "test.yy",
                                     "--beam-size", "1")  # fmt: skip
    assert status == 0, err[-2000:]
    scores = json.loads(scores)
    assert (scores["bleu"], scores["chrf"]) == (metrics["bleu"], metrics["chrf"])

    # The same command on the finished folder: the same final weights, test split and
    # search, so the test translation and the export are skipped, their results kept.
    saved_model = run / "export" / "1" / "saved_model.pb"
    stamp = saved_model.stat().st_mtime_ns
    capsys.readouterr()
    again = train_cli.main([*command, "--tsv", str(tsv)])
    out = capsys.readouterr().out
    assert "test translation and export skipped" in out
    assert "translating the test split" not in out and "exporting the model" not in out
    assert saved_model.stat().st_mtime_ns == stamp
    for key in ("bleu", "chrf", "sentences", "samples", "reload_matches", "final_digest"):
        assert again[key] == metrics[key], key
    assert set(again["seconds"]) == set(metrics["seconds"])
