"""tfblocks.translation.evaluation: BLEU's tokenizer follows the target language, in the
library, `tfblocks-evaluate`, `tfblocks-train` and the training job's dev and test BLEU;
a Japanese target's score is that of sacrebleu's own command on the same files.

The translations are stand-ins (no model): what is tested is the scoring."""

import json
import re
import subprocess
import sys

import pytest
import sacrebleu
import tensorflow as tf

from tests.cli.test_commands import FAST, in_process
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.translation import engines, evaluation, job
from tfblocks.translation.options import TrainingOptions

# Translations and their references in Japanese, written without spaces as Japanese is.
REFERENCES = [
    "今日の昼ご飯はカレーです。",
    "健太は学校で本を読んでいる。",
    "私は東京に住んでいます。",
]
HYPOTHESES = [
    "今日の昼食はカレーです。",
    "健太は図書館で本を読んでいる。",
    "私は東京に住んでいます。",
]


def _sacrebleu_command(ref, hyp, tokenize):
    """The BLEU of `python -m sacrebleu REF -i HYP -tok TOKENIZE`, to 2 decimals."""
    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-tok", tokenize,
               "-b", "-w", "2"]  # fmt: skip
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def test_a_japanese_target_is_scored_with_mecab_as_sacrebleus_own_command(tmp_path):
    ref, hyp = tmp_path / "test.ja", tmp_path / "test.hyp"
    ref.write_text("".join(line + "\n" for line in REFERENCES), encoding="utf-8")
    hyp.write_text("".join(line + "\n" for line in HYPOTHESES), encoding="utf-8")
    japanese = evaluation.score(HYPOTHESES, REFERENCES, target_lang="ja")
    words = evaluation.score(HYPOTHESES, REFERENCES, tokenize="13a")
    assert "tok:ja-mecab" in japanese["bleu_signature"]
    assert "tok:13a" in words["bleu_signature"]
    # 13a sees each sentence as one word: only the identical third sentence matches.
    assert japanese["bleu"] != words["bleu"]
    assert japanese["bleu"] == _sacrebleu_command(ref, hyp, "ja-mecab")
    assert words["bleu"] == _sacrebleu_command(ref, hyp, "13a")
    assert japanese["chrf"] == words["chrf"]  # chrF has no tokenizer


@pytest.mark.parametrize(
    ("language", "tokenize"),
    [
        ("ja", "ja-mecab"), ("ja-JP", "ja-mecab"), ("JPN", "ja-mecab"),
        ("zh", "zh"), ("zh-Hans", "zh"), ("zh_TW", "zh"), ("yue", "zh"),
        ("ko", "ko-mecab"), ("kor", "ko-mecab"),
        ("th", "char"), ("lo", "char"), ("km", "char"), ("my", "char"),
        ("en", "13a"), ("de", "13a"), ("pt_BR", "13a"), ("jam", "13a"), (None, "13a"),
    ],
)  # fmt: skip
def test_each_language_has_its_bleu_tokenizer(language, tokenize):
    assert evaluation.bleu_tokenize_for(language) == tokenize


def test_the_tokenizers_are_sacrebleus_and_the_help_says_the_mapping():
    assert set(evaluation.BLEU_TOKENIZERS) <= set(sacrebleu.BLEU.TOKENIZERS)
    # "ja-mecab for ja, zh for zh, ..., char for th, lo, km and my, else 13a"
    text = evaluation.BLEU_TOKENIZE_DEFAULTS
    said = re.findall(r"(\S+) for (.+?)(?=, \S+ for |, else 13a$)", text)
    assert len(said) == 4 and text.endswith(", else 13a")
    for tokenize, codes in said:
        for code in re.split(r", | and ", codes):
            assert evaluation.bleu_tokenize_for(code) == tokenize, (code, tokenize)


def test_bleu_tokenize_overrides_the_language_and_is_checked(monkeypatch):
    chars = evaluation.score(HYPOTHESES, REFERENCES, target_lang="ja", tokenize="char")
    assert "tok:char" in chars["bleu_signature"]
    with pytest.raises(ValueError, match=r"`tokenize` must be one of 13a, .* got tokenize='ja'"):
        evaluation.score(HYPOTHESES, REFERENCES, tokenize="ja")
    monkeypatch.setitem(sys.modules, "MeCab", None)  # as if mecab-python3 were missing
    with pytest.raises(ImportError, match=r"needs mecab-python3 and ipadic.*tfblocks\[ja\]"):
        evaluation.score(HYPOTHESES, REFERENCES, target_lang="ja")
    assert "tok:13a" in evaluation.score(HYPOTHESES, REFERENCES, tokenize="13a")["bleu_signature"]
    # A training job is refused when its options are made, before anything trains.
    with pytest.raises(ImportError, match="mecab-python3"):
        TrainingOptions(epochs=1, source_lang="en", target_lang="ja")
    assert TrainingOptions(epochs=1, target_lang="ja", bleu_tokenize="zh").bleu_tokenize == "zh"


def _english_to_japanese_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    settings = {"source_lang": "en", "target_lang": "ja"}
    (run / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
    return run


def test_evaluate_scores_a_japanese_target_with_mecab(tmp_path, monkeypatch, capsys):
    answers = dict(zip(map(str, range(len(HYPOTHESES))), HYPOTHESES, strict=True))
    monkeypatch.setattr(
        engines, "load_translate",
        lambda *a, **k: (lambda batch: [answers[s] for s in batch], "a stand-in"),
    )  # fmt: skip
    src, ref = tmp_path / "test.en", tmp_path / "test.ja"
    src.write_text("".join(f"{i}\n" for i in range(len(HYPOTHESES))), encoding="utf-8")
    ref.write_text("".join(line + "\n" for line in REFERENCES), encoding="utf-8")
    files = ("--model", _english_to_japanese_run(tmp_path), "--src", src, "--ref", ref)
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *files)
    assert status == 0, err
    scores = json.loads(out)
    assert "tok:ja-mecab" in scores["bleu_signature"]
    assert scores["bleu"] == evaluation.score(HYPOTHESES, REFERENCES, target_lang="ja")["bleu"]
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *files,
                                  "--bleu-tokenize", "13a")  # fmt: skip
    assert status == 0 and "tok:13a" in json.loads(out)["bleu_signature"], err
    assert json.loads(out)["bleu"] != scores["bleu"]
    # Without MeCab: one line naming the packages, before anything is translated.
    monkeypatch.setattr(engines, "load_translate", None)
    monkeypatch.setitem(sys.modules, "MeCab", None)
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *files)
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("tfblocks-evaluate: error: BLEU with the ja-mecab tokenizer needs "
                          "mecab-python3 and ipadic")  # fmt: skip


def test_train_takes_bleu_tokenize_and_its_job_scores_and_records_with_it():
    args = train_cli.parse_args([*FAST, "--bleu-tokenize", "char"])
    assert train_cli.training_options(args).bleu_tokenize == "char"
    with pytest.raises(SystemExit):  # argparse: not one of sacrebleu's
        train_cli.parse_args([*FAST, "--bleu-tokenize", "mecab"])
    answers = dict(zip(map(str, range(len(HYPOTHESES))), HYPOTHESES, strict=True))

    def translator(sources):
        return tf.constant([answers[s] for s in sources])

    pairs = list(zip(answers, REFERENCES, strict=True))
    for bleu_tokenize, tokenize in [(None, "ja-mecab"), ("char", "char")]:
        options = TrainingOptions(epochs=1, source_lang="en", target_lang="ja",
                                  bleu_tokenize=bleu_tokenize)  # fmt: skip
        training = job.TrainingJob(options, {"train": pairs, "test": pairs}, log=lambda _: None)
        training.translator, training.dev_pairs = translator, pairs
        expected = evaluation.score(HYPOTHESES, REFERENCES, tokenize=tokenize)
        assert training.evaluate(translator)["bleu_signature"] == expected["bleu_signature"]
        assert training._dev_scores()["dev_bleu"] == expected["bleu"]
        assert training.settings()["bleu_tokenize"] == bleu_tokenize
