"""examples/language_model.py trains, reports perplexity, continues prompts, exports, reloads."""

import re

import pytest

from tests.scripts import run_script

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


def test_language_model_example_small_settings(tmp_path):
    result = run_script(
        "examples/language_model.py",
        "--phrasebook-size", "1000", "--epochs", "2", "--vocab-size", "300",
        "--prompts", "2", "--output", tmp_path / "lm",
    )  # fmt: skip
    perplexity = float(re.search(r"held-out perplexity: ([\d.]+)", result.stdout).group(1))
    vocab = int(re.search(r"vocabulary (\d+)", result.stdout).group(1))
    assert 1.0 < perplexity < vocab / 4, result.stdout  # far better than a uniform guess
    assert result.stdout.count("greedy:") == 2
    assert "reloaded continuations equal: True" in result.stdout
    assert (tmp_path / "lm" / "export" / "1" / "saved_model.pb").exists()
