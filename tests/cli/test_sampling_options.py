"""Sampling from the command line: `--sampling-topk/-topp/-temperature`, `--seed` and
`--n-best K` samples in `tfblocks-translate`, and the options refused with them (in
`tfblocks-evaluate` too), on a tiny untrained model saved as a run folder's preset."""

import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import Sampling
from tfblocks.models import save_preset
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import engines

LINES = ["今日のランチはカレーだ。", "健太は学校で本を読む。", "私は学生です。"]
# A high temperature: samples of an untrained model that differ between seeds.
SAMPLING = ["--sampling-topk", "100", "--sampling-topp", "0.99", "--sampling-temperature", "3"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A folder whose `model/` is the preset of a tiny untrained model (`max_length` 6)."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size, max_length=6)
    folder = tmp_path_factory.mktemp("run")
    save_preset(tiny_model(hp, seed=0), tokenizer, folder / "model", hp)
    return folder


def test_the_same_seed_gives_the_same_samples(run, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    outputs = []
    for seed in (1, 1, 2):
        status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                      "--input", source, *SAMPLING, "--seed", seed,
                                      "--n-best", 3)  # fmt: skip
        assert status == 0, err
        assert "Sampling(temperature=3.0, top_k=100, top_p=0.99" in err
        outputs.append(out)
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
    # --n-best 3: three samples a line, in Moses' format, sorted by their log-probability.
    rows = [line.split(" ||| ") for line in outputs[0].splitlines()]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    scores = [float(row[2]) for row in rows]
    for line in range(3):
        assert scores[3 * line : 3 * line + 3] == sorted(scores[3 * line : 3 * line + 3])[::-1]
    assert all(score < 0 for score in scores)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sampling-topk", "5", "--beam-size", "4"], "--beam-size=4 does not apply"),
        (["--sampling-temperature", "2", "--stop-early"], "--stop-early=True does not apply"),
        (["--sampling-topp", "0.9", "--engine", "ctranslate2"], "--engine=ctranslate2 does"),
        (["--sampling-topk", "5", "--score", "in.txt"], "--score=in.txt does not apply"),
        (["--seed", "3"], "got --seed=3 alone"),
        (["--sampling-topp", "1.5"], "got --sampling-topp=1.5"),
        (["--sampling-topk", "-1"], "got --sampling-topk=-1"),
        (["--sampling-temperature", "0"], "got --sampling-temperature=0.0"),
        (["--sampling-topk", "5", "--seed", "-1"], "got --seed=-1"),
    ],
)
def test_sampling_options_are_refused_with_what_does_not_apply(monkeypatch, capsys, args, message):
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", "m", *args)
    assert status == 2 and message in err.splitlines()[-1], err


def test_evaluate_and_the_engines_refuse_sampling_where_it_cannot_work(run, monkeypatch, capsys):
    args = ["--src", "a", "--ref", "b", "--sampling-topk", "5", "--beam-size", "2"]
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run, *args)
    assert status == 2 and "--beam-size=2 does not apply" in err.splitlines()[-1], err
    with pytest.raises(ValueError, match="is a CTranslate2 model: sampling"):
        engines.load_translate(run, engine="ctranslate2", search=Sampling(top_k=5))
