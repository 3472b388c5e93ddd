"""examples/pre_vs_post_ln.py trains four ways and writes a loss-curve PNG and tables."""

import csv
import importlib.util
import json
import math
import sys

import pytest

from tests.scripts import ROOT, run_script
from tfblocks._files import replace_directory

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


def test_pre_vs_post_ln_small_settings(tmp_path):
    result = run_script(
        "examples/pre_vs_post_ln.py",
        *("--layers", "1", "--steps", "4", "--log-every", "2", "--warmup-steps", "2"),
        *("--learning-rate", "1e-3", "--phrasebook-size", "1000", "--vocab-size", "1000"),
        *("--batch-tokens", "256", "--no-jit-compile", "--output-dir", tmp_path),
    )
    png = (tmp_path / "pre_vs_post_ln.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with open(tmp_path / "pre_vs_post_ln.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    assert header == ["run", "final train loss", "dev loss", "dev accuracy"]
    assert [row[0] for row in rows] == [
        "Pre-LN, warm-up 2",
        "Pre-LN, no warm-up",
        "Post-LN, warm-up 2",
        "Post-LN, no warm-up",
    ]
    for row in rows:
        loss, dev_loss, accuracy = map(float, row[1:])
        assert math.isfinite(loss) and math.isfinite(dev_loss) and 0.0 <= accuracy <= 1.0, row
        assert 0.0 < loss < 10.0, row  # label-smoothed cross-entropy over 300 ids: ln 300 ≈ 5.7
    markdown = (tmp_path / "pre_vs_post_ln.md").read_text().splitlines()
    assert len(markdown) == 2 + 4 and all(line in result.stdout for line in markdown)
    # The folder was written as a whole, with the marker that lets a rerun replace it.
    marker = json.loads((tmp_path / "tfblocks_export.json").read_text())
    assert marker["kind"] == "tfblocks-pre-vs-post-ln"
    assert sorted(marker["files"]) == ["pre_vs_post_ln.csv", "pre_vs_post_ln.md",
                                       "pre_vs_post_ln.png"]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == [*marker["files"], "tfblocks_export.json"]


class TrainingReachedError(Exception):
    """Raised in place of the training: the output folder's check let the run start."""


def test_the_output_folder_is_checked_before_training(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(
        "pre_vs_post_ln", ROOT / "examples" / "pre_vs_post_ln.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    def datasets(args):
        raise TrainingReachedError

    monkeypatch.setattr(example, "datasets", datasets)

    def main(folder):
        monkeypatch.setattr(sys, "argv", ["pre_vs_post_ln.py", "--output-dir", str(folder)])
        example.main()

    # Refused: a folder holding a user's file, a file, another tfblocks output.
    notes = tmp_path / "notes.txt"
    notes.write_text("a user's notes\n")
    other = replace_directory(tmp_path / "maps", lambda staging: None, "tfblocks-attention-maps")
    for folder, message in [(tmp_path, "did not write"), (notes, "is a file"),
                            (other, "'tfblocks-attention-maps', not a")]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            main(folder)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"--output-dir={str(folder)!r}" in err and message in err, err
    assert notes.read_text() == "a user's notes\n"
    # Accepted: a new folder (not created before the training), an earlier output.
    earlier = replace_directory(tmp_path / "earlier", lambda staging: None, example.KIND)
    for folder in (tmp_path / "new", earlier):
        with pytest.raises(TrainingReachedError):
            main(folder)
    assert not (tmp_path / "new").exists()
