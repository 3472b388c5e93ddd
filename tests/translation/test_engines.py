"""The engines of `tfblocks-translate` on random Unicode: one line out per line in, and a
blank line (any Unicode whitespace) translated to an empty line by every engine; n-best
lists (`--n-best`) and scores (`--score`) written as the engine returns them."""

import importlib.util

import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import random_unicode_lines, tiny_hparams, tiny_model
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import Greedy
from tfblocks.serving import Translator
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.text.corpus import split_lines
from tfblocks.translation import engines

MAX_LENGTH = 8


@pytest.fixture(scope="module")
def translators(tmp_path_factory):
    """`{engine: translate(list[str]) -> list[str]}` of one tiny untrained model: its
    `Translator` and, where CTranslate2 is installed, its CTranslate2 export."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    model = tiny_model(tiny_hparams(vocab_size=tokenizer.vocabulary_size), seed=0)
    translator = Translator(model, tokenizer, tokenizer, MAX_LENGTH, search=Greedy(),
                            jit_compile=False)  # fmt: skip
    made = {"tensorflow": lambda lines: [t.decode("utf-8") for t in translator(lines).numpy()]}
    if importlib.util.find_spec("ctranslate2") is not None:  # the optional extra
        from tfblocks.serving.ctranslate2 import CTranslate2Translator
        from tfblocks.serving.ctranslate2_export import export_ctranslate2

        path = export_ctranslate2(model, tokenizer, tmp_path_factory.mktemp("ct2") / "model")
        made["ctranslate2"] = CTranslate2Translator(
            path, beam_size=1, max_length=MAX_LENGTH, intra_threads=1
        )
    return made


def test_random_unicode_one_line_out_per_line_in(translators, tmp_path, monkeypatch, capsys):
    lines = random_unicode_lines(150, seed=7)
    blank = [not line.strip() for line in lines]
    assert 10 < sum(blank) < len(lines) and max(map(len, lines)) == 5000
    source = tmp_path / "input.txt"
    source.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    outputs = {}
    for name, translate in translators.items():
        monkeypatch.setattr(engines, "load_translate", lambda *a, t=translate, **k: (t, "m"))
        output = tmp_path / f"{name}.txt"
        status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", tmp_path,
                                    "--input", source, "--output", output,
                                    "--batch-size", 32)  # fmt: skip
        assert status == 0, err
        text = output.read_bytes().decode("utf-8")
        got = split_lines(text)
        assert len(got) == len(lines) == len(text.splitlines()), name  # for any reader
        assert [got[i] for i, b in enumerate(blank) if b] == [""] * sum(blank), name
        assert any(got), name  # the model said something
        outputs[name] = got
    if len(outputs) == 2:  # greedy: the same ids, but for a rare near-tie of the logits
        # (150 of 150 on an AVX2 CPU; the margin leaves room for other kernels' near-ties)
        same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
        assert same >= 0.75 * len(lines), same


def _translate_file(monkeypatch, capsys, tmp_path, lines, *args):
    """`tfblocks-translate ARGS --input FILE` of `lines`: (status, stdout, stderr)."""
    source = tmp_path / "input.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return in_process(translate_cli, monkeypatch, capsys, "--input", source, *args)


def test_n_best_and_score_lines_with_ctranslate2(translators, tmp_path, monkeypatch, capsys):
    if "ctranslate2" not in translators:
        pytest.skip("CTranslate2 is not installed")
    from tfblocks.serving.ctranslate2 import CTranslate2Translator

    path = translators["ctranslate2"].model_dir
    lines = ["今日のランチはカレーだ。", "", "健太は学校で本を読む。"]
    model = ("--model", path, "--engine", "ctranslate2")
    status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model,
                                       "--beam-size", "3", "--n-best", "2")  # fmt: skip
    assert status == 0, err
    want = CTranslate2Translator(path, beam_size=3, num_hypotheses=2).n_best(lines)
    assert out.splitlines() == [
        f"{i} ||| {text} ||| {score:.6f}" for i, row in enumerate(want) for text, score in row
    ]
    assert out.splitlines()[2:4] == ["1 |||  ||| 0.000000"] * 2  # the blank line
    # --target-prefix through CTranslate2's own target_prefix: translations start with it.
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("Today's\nToday's\n\n", encoding="utf-8")
    status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model,
                                       "--target-prefix", prefixes)  # fmt: skip
    assert status == 0, err
    got = out.split("\n")[:-1]
    want = CTranslate2Translator(path, beam_size=4)(lines)
    assert got[0].startswith("Today's") and got[1] == "" and got[2] == want[2], got
    targets = tmp_path / "targets.txt"
    targets.write_text("Today's lunch is curry.\n\nKenta reads.\n", encoding="utf-8")
    status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model,
                                       "--score", targets)  # fmt: skip
    assert status == 0, err
    scores = CTranslate2Translator(path).score(lines, targets.read_text().splitlines())
    assert out.splitlines() == [f"{score:.6f}" for score in scores]
    assert "scoring 3 lines" in err


def test_n_best_and_score_flags(tmp_path, monkeypatch, capsys):
    # Stand-in engines: what the command asks of them and how it writes their answers.
    from tfblocks.serving import Hypothesis

    asked = {}

    def load_translate(*args, n_best=None, stop_early=False, **kwargs):
        asked.update(n_best=n_best, stop_early=stop_early, beam_size=args[1])

        def n_best_lists(lines):
            return [[Hypothesis(f"{line}|{k}\nx", -1.0 - k) for k in range(n_best)]
                    for line in lines]  # fmt: skip

        return n_best_lists, "a stand-in"

    def load_score(*args, **kwargs):
        return (lambda pairs: [-float(len(s) + len(t)) for s, t in pairs]), "a stand-in"

    monkeypatch.setattr(engines, "load_translate", load_translate)
    monkeypatch.setattr(engines, "load_score", load_score)
    lines = ["bb", "a", "ccc"]  # batched by length, written in input order
    model = ("--model", tmp_path)
    flags = ("--n-best", "2", "--stop-early", "--batch-size", "2")
    status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model, *flags)
    assert status == 0, err
    assert asked == {"n_best": 2, "stop_early": True, "beam_size": None}
    assert out.splitlines() == [f"{i} ||| {line}|{k} x ||| {-1.0 - k:.6f}"
                                for i, line in enumerate(lines) for k in range(2)]  # fmt: skip
    targets = tmp_path / "targets.txt"
    targets.write_text("x\nyyyy\n\n", encoding="utf-8")
    status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model,
                                       "--score", targets)  # fmt: skip
    assert status == 0 and out.splitlines() == ["-3.000000", "-5.000000", "-3.000000"], err
    short = tmp_path / "short.txt"
    short.write_text("x\n", encoding="utf-8")
    for args, words in [
        (("--n-best", "0"), "--n-best must be a positive integer, got --n-best=0"),
        (("--n-best", "3", "--beam-size", "2"), "--n-best=3 and --beam-size=2"),
        (("--score", targets, "--n-best", "2"), "--score scores given translations: --n-best"),
        (("--score", targets, "--stop-early"), "--stop-early does not apply"),
        (("--score", short), f"--score={str(short)!r} has 1 lines but the input"),
        (("--score", tmp_path / "none.txt"), "is not a file"),
        (("--score", targets, "--target-prefix", targets), "--target-prefix does not apply"),
        (("--target-prefix", tmp_path / "none.txt"), "--target-prefix="),
    ]:
        status, out, err = _translate_file(monkeypatch, capsys, tmp_path, lines, *model, *args)
        assert status == 2 and words in err and out == "", (args, err)
