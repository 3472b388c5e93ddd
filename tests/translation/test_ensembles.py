"""`tfblocks-translate --model A --model B`: the ensemble of two run folders (presets)."""

import numpy as np
import tensorflow as tf

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import BeamSearch, Ensemble
from tfblocks.models import save_preset
from tfblocks.serving import Translator
from tfblocks.text import train_tokenizer

LINES = ["Today's lunch is curry.", "", "curry today"]


def test_translate_and_score_with_an_ensemble(tmp_path, monkeypatch, capsys):
    tokenizer = train_tokenizer(LINES * 20, vocab_size=40)
    other = train_tokenizer(["Kenta reads a book at school."] * 20, vocab_size=30)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size, max_length=8)
    a, b = tiny_model(hp, seed=0), tiny_model(hp, seed=1)
    save_preset(a, tokenizer, tmp_path / "a", hp)
    save_preset(b, tokenizer, tmp_path / "b", hp)
    save_preset(a, other, tmp_path / "c", hp)
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "saved_model.pb").write_bytes(b"")  # found, never loaded
    source = tmp_path / "source.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    both = ("--model", tmp_path / "a", "--model", tmp_path / "b")
    translator = Translator(Ensemble([a, b]), tokenizer, tokenizer, max_length=8,
                            search=BeamSearch(2, alpha=0.6))  # fmt: skip
    # Run step by step in Python: tracing and compiling the tiny searches costs more.
    tf.config.run_functions_eagerly(True)
    try:
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *both,
                                      "--beam-size", "2", "--input", source)  # fmt: skip
        assert status == 0, err
        assert "an ensemble of 2 models" in err
        assert out.splitlines() == [t.decode("utf-8") for t in translator(LINES).numpy()]
        targets = tmp_path / "targets.txt"
        targets.write_text("curry\nlunch\nToday's lunch\n", encoding="utf-8")
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *both, "--input",
                                      source, "--score", targets)  # fmt: skip
        assert status == 0, err
        want = translator.score(LINES, targets.read_text(encoding="utf-8").splitlines())
        np.testing.assert_allclose([float(v) for v in out.splitlines()], want, atol=2e-6)
    finally:
        tf.config.run_functions_eagerly(False)
    for extra, words in [
        (("--model", tmp_path / "c"), "has another tokenizer than --model="),
        (("--model", tmp_path / "saved"), "is a SavedModel: an ensemble"),
        (("--engine", "ctranslate2"), "CTranslate2's Translator has no ensembles"),
    ]:
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *both, *extra,
                                    "--input", source)  # fmt: skip
        assert status == 2 and words in err, err
