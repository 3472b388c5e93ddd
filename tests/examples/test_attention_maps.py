"""examples/attention_maps.py translates, checks its rebuilt forward pass and draws PNGs."""

import importlib.util
import json
import re
import struct
import sys

import numpy as np
import pytest

from tests.scripts import ROOT, run_script

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

KINDS = ("encoder_self_attention", "decoder_self_attention", "cross_attention")


def png_size(path):
    """(width, height) of a PNG file, asserting its signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def load_example():
    spec = importlib.util.spec_from_file_location(
        "attention_maps", ROOT / "examples" / "attention_maps.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attention_maps_small_settings(tmp_path):
    result = run_script(
        "examples/attention_maps.py",
        *("--steps", "2", "--phrasebook-size", "1000", "--vocab-size", "1000"),
        *("--batch-tokens", "256", "--no-jit-compile", "--output-dir", tmp_path),
    )
    assert "Glyph" not in result.stderr, result.stderr[-3000:]  # every token was drawable
    assert re.search(r"^今日のランチはカレーだ。 → .*$", result.stdout, re.MULTILINE), result.stdout
    for kind in KINDS:
        assert f"wrote {tmp_path / kind}.png: 2 layers × 4 heads" in result.stdout, result.stdout
        width, height = png_size(tmp_path / f"{kind}.png")
        assert width > 300 and height > 150, (kind, width, height)
    marker = json.loads((tmp_path / "tfblocks_export.json").read_text())
    assert marker["kind"] == "tfblocks-attention-maps"
    assert sorted(marker["files"]) == sorted(f"{kind}.png" for kind in KINDS)


def test_a_folder_it_did_not_write_is_refused_before_training(tmp_path, monkeypatch, capsys):
    example = load_example()
    monkeypatch.setattr(example, "train_model", lambda args: pytest.fail("trained first"))
    (tmp_path / "cross_attention.png").write_bytes(b"a user's own figure")
    monkeypatch.setattr(sys, "argv", ["attention_maps.py", "--output-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        example.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--output-dir={str(tmp_path)!r}" in err and "did not write" in err, err
    assert (tmp_path / "cross_attention.png").read_bytes() == b"a user's own figure"


def test_label_font_escapes_what_no_font_draws():
    example = load_example()
    font, show = example.label_font(["▁今日", "</s>"], "none")
    assert font is None
    assert show("▁今日") == "▁\\u4eca\\u65e5" and show("</s>") == "</s>"
    font, show = example.label_font(["▁Today", "'s"], None)
    assert font is not None and show("'s") == "'s"


def test_plot_draws_escaped_tokens_without_warnings(tmp_path):
    # pytest turns warnings into errors: a missing glyph would fail here.
    example = load_example()
    font, show = example.label_font(["今日", "カレー"], "none")
    keys = [show(t) for t in ("▁今日", "の", "カレー", "</s>")]
    weights = [np.full((2, 3, 4), 0.25, "float32")]
    queries = ["<s>", "▁Today", "'s"]
    example.plot(weights, queries, keys, show("cross: 今日"), tmp_path / "a.png", font, "query")
    assert png_size(tmp_path / "a.png")[0] > 100
