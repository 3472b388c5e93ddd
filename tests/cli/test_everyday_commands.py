"""Everyday commands: `tfblocks-export ctranslate2`, `tfblocks-evaluate --output`,
`tfblocks-translate --interactive` (a line in, a line out), `--score` / `--target-prefix`
from a pipe, and the hint at `--source-lang` / `--target-lang` when a corpus folder has
no train file of the pair.

The model is one tiny untrained Transformer saved as a run folder's `model/` preset (no
training); the other tests replace the model with a stand-in, so what the commands read
and write shows. The interactive test runs `tfblocks-translate` as a process of its own
and reads each translation while its input is still open.
"""

import io
import json
import os
import subprocess
import sys
import threading

import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tests.scripts import ROOT
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import export as export_cli
from tfblocks.cli import train as train_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import Greedy
from tfblocks.models import save_preset
from tfblocks.serving import Translator
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import engines

pytestmark = pytest.mark.heavy  # a translation process of its own, and exports

MAX_LENGTH = 8
LINES = ["今日のランチはカレーだ。", "健太は学校で本を読む。", "私は学生です。"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """`(run, greedy)`: a folder whose `model/` is the preset of a tiny untrained model
    (`max_length` 8), as a run folder holds it, and that model's greedy translations of
    `LINES` (its own `Translator`)."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size, max_length=MAX_LENGTH)
    model = tiny_model(hp, seed=0)
    run = tmp_path_factory.mktemp("run")
    save_preset(model, tokenizer, run / "model", hp)
    translator = Translator(model, tokenizer, tokenizer, MAX_LENGTH, search=Greedy(),
                            jit_compile=False)  # fmt: skip
    return run, [text.decode("utf-8") for text in translator(LINES).numpy()]


def test_export_ctranslate2_writes_a_model_that_translates_as_the_run(
    run_folder, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("ctranslate2")  # the optional extra
    from tfblocks.serving.ctranslate2 import CTranslate2Translator

    run, greedy = run_folder
    output = tmp_path / "exports" / "ct2"  # its folder is made
    status, _, err = in_process(export_cli, monkeypatch, capsys, "ctranslate2", "--model", run,
                                "--output", output)  # fmt: skip
    assert status == 0, err
    assert (output / "model.bin").is_file() and f"wrote {output}" in err
    translate = CTranslate2Translator(output, beam_size=1, max_length=MAX_LENGTH, intra_threads=1)
    assert translate(LINES) == greedy

    # int8 weights: a smaller model.bin that CTranslate2 loads and runs.
    small = tmp_path / "int8"
    status, _, err = in_process(export_cli, monkeypatch, capsys, "ctranslate2", "--model",
                                run / "model", "--output", small, "--quantization",
                                "int8")  # fmt: skip
    assert status == 0, err
    assert (small / "model.bin").stat().st_size < (output / "model.bin").stat().st_size
    assert len(CTranslate2Translator(small, beam_size=1, max_length=MAX_LENGTH)(LINES)) == 3

    # Refused in one line before anything is written: an existing --output (even an
    # earlier export), a folder without a model; by argparse: a quantization it does
    # not offer, no format.
    before = sorted(p.name for p in output.iterdir())
    mine = tmp_path / "notes"
    mine.mkdir()
    for args, words in [
        (("--model", run, "--output", output), f"--output={str(output)!r} exists"),
        (("--model", run, "--output", mine), f"--output={str(mine)!r} exists"),
        (("--model", tmp_path, "--output", tmp_path / "new"), "is not a run folder"),
    ]:
        status, _, err = in_process(export_cli, monkeypatch, capsys, "ctranslate2", *args)
        assert status == 2 and words in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith("tfblocks-export: error: "), err
    status, _, err = in_process(export_cli, monkeypatch, capsys, "ctranslate2", "--model", run,
                                "--output", tmp_path / "new", "--quantization", "int4")  # fmt: skip
    assert status == 2 and "invalid choice: 'int4'" in err, err
    status, _, err = in_process(export_cli, monkeypatch, capsys)
    assert status == 2 and "FORMAT" in err, err
    assert sorted(p.name for p in output.iterdir()) == before and not any(mine.iterdir())
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["ct2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "int8", "notes"]


def _within(seconds, call):
    """`call()`'s result; a failed test (not a hang) when it takes more than `seconds`."""
    result = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"no answer within {seconds} s"
    return result[0]


def test_interactive_translation_answers_each_line_before_the_input_ends(run_folder, tmp_path):
    run, greedy = run_folder
    command = [sys.executable, "-m", "tfblocks.cli.translate", "--model",
               str(run), "--interactive", "--beam-size", "1"]  # fmt: skip
    with open(tmp_path / "stderr.txt", "wb") as errors:
        process = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors
        )
        try:
            answers = []
            for line in LINES[:2]:
                process.stdin.write(line.encode("utf-8") + b"\n")
                process.stdin.flush()
                # The input stays open: the translation comes before its end.
                answers.append(_within(240, process.stdout.readline).decode("utf-8"))
            process.stdin.close()
            rest = _within(60, process.stdout.read)
            status = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
    stderr = (tmp_path / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    assert status == 0 and rest == b"", stderr[-3000:]
    assert answers == [text + "\n" for text in greedy[:2]]
    assert "translating each line as it is read" in stderr


class _Terminal(io.TextIOWrapper):
    """Standard input as a terminal gives it (`isatty()`), with the bytes it was given."""

    def isatty(self):
        return True


def test_interactive_translates_one_line_at_a_time(tmp_path, monkeypatch, capsys):
    batches = []

    def upper(batch):
        batches.append(list(batch))
        return [line.upper() for line in batch]

    monkeypatch.setattr(engines, "load_translate", lambda *a, **k: (upper, "a stand-in"))
    model = ("--model", tmp_path)
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, "--interactive",
                                  stdin="ab\n\ncaf\u00e9\r\n")  # fmt: skip
    assert status == 0 and out == "AB\n\nCAFÉ\n", err
    # The warm-up's line (translated while the first is typed, its result dropped), then one
    # line a batch, in the input's order.
    assert batches == [["a"], ["ab"], [""], ["café"]]
    # A terminal on standard input: the same without the flag; a pipe: one batch at the end.
    batches.clear()
    monkeypatch.setattr(sys, "stdin", _Terminal(io.BytesIO(b"x\nyy\n"), encoding="utf-8"))
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model)
    assert status == 0 and out == "X\nYY\n" and batches == [["a"], ["x"], ["yy"]], err
    batches.clear()
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, stdin="x\nyy\n")
    assert status == 0 and out == "X\nYY\n" and batches == [["x", "yy"]], err
    # --input is read a line at a time too, a *.ja file joined as training joins it.
    (tmp_path / "test.ja").write_text("今日 は 。\n私 は 学生 。\n", encoding="utf-8")
    batches.clear()
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, "--interactive",
                                  "--input", tmp_path / "test.ja")  # fmt: skip
    assert status == 0 and batches == [["a"], ["今日は。"], ["私は学生。"]], err
    # A line of invalid UTF-8 is named and skipped (an empty line out); the session goes on.
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, "--interactive",
                                  stdin=b"ok\ncaf\xe9\nno\n")  # fmt: skip
    assert status == 0 and out == "OK\n\nNO\n", err
    assert "standard input, line 2: invalid UTF-8" in err and "The line is skipped." in err
    targets = tmp_path / "targets.txt"
    targets.write_text("x\n", encoding="utf-8")
    for args, words in [
        (("--output", tmp_path / "out.txt"), "--interactive writes each translation to standard"),
        (("--score", targets), "--score (a file of as many lines as the input) does not apply"),
        (("--target-prefix", targets), "--target-prefix (a file of as many lines"),
    ]:
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, "--interactive",
                                    *args, stdin="x\n")  # fmt: skip
        assert status == 2 and words in err, (args, err)


def _pipe(text):
    """A path that reads `text` from a pipe, as `<(...)` gives one (`/dev/fd/N`), and the
    pipe's descriptor to close."""
    read, write = os.pipe()
    os.write(write, text.encode("utf-8"))  # small: the pipe's buffer holds it
    os.close(write)
    return f"/dev/fd/{read}", read


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="no /dev/fd on this system")
def test_score_and_target_prefix_read_a_pipe(tmp_path, monkeypatch, capsys):
    def load_score(*args, **kwargs):
        return (lambda pairs: [-float(len(s) + len(t)) for s, t in pairs]), "a stand-in"

    def load_translate(*args, **kwargs):
        return (lambda pairs: [f"{prefix}|{text}" for text, prefix in pairs]), "a stand-in"

    monkeypatch.setattr(engines, "load_score", load_score)
    monkeypatch.setattr(engines, "load_translate", load_translate)
    source = tmp_path / "input.txt"
    source.write_text("bb\na\n", encoding="utf-8")
    model = ("--model", tmp_path, "--input", source)
    for flag, text, want in [
        ("--score", "x\nyyyy\n", "-3.000000\n-5.000000\n"),
        ("--target-prefix", "P\n\n", "P|bb\n|a\n"),
    ]:
        path, descriptor = _pipe(text)
        try:
            status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, flag, path)
        finally:
            os.close(descriptor)
        assert status == 0 and out == want, (flag, err)
    # A folder is still refused, and an --output that is the --score file.
    targets = tmp_path / "targets.txt"
    targets.write_text("x\ny\n", encoding="utf-8")
    for args, words in [
        (("--score", tmp_path), "is not a file or a pipe"),
        (("--score", targets, "--output", targets, "--overwrite"), "is the file --score="),
    ]:
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, *args)
        assert status == 2 and words in err, (args, err)
    assert targets.read_text(encoding="utf-8") == "x\ny\n"


def test_constraints_reads_tab_separated_phrases_per_line(tmp_path, monkeypatch, capsys):
    # A stand-in model writes what it was given: each line's phrases (tabs separate them,
    # blank ones are dropped, an empty line gives none), with or without --target-prefix.
    given, real = {}, engines.load_translate

    def load_translate(*args, **kwargs):
        given.update(kwargs)
        return (lambda items: ["|".join(map(str, item)) for item in items]), "a stand-in"

    monkeypatch.setattr(engines, "load_translate", load_translate)
    source, constraints = tmp_path / "input.txt", tmp_path / "glossary.tsv"
    source.write_text("bb\na\nc\n", encoding="utf-8")
    constraints.write_text("curry\tToday's lunch\n\n \tbook\t\n", encoding="utf-8")
    model = ("--model", tmp_path, "--input", source, "--constraints", constraints)
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model)
    assert status == 0, err
    assert out == "bb|['curry', \"Today's lunch\"]\na|[]\nc|['book']\n"
    assert given["constraints"] is True and given["prefix"] is False
    starts = tmp_path / "starts.txt"
    starts.write_text("P\n\nQ\n", encoding="utf-8")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model,
                                  "--target-prefix", starts)  # fmt: skip
    assert status == 0 and out.splitlines()[0] == "bb|P|['curry', \"Today's lunch\"]", err
    # Refused in one line: a file of another line count; CTranslate2 (it has none, before
    # any model loads); options that do not translate with them.
    constraints.write_text("curry\n", encoding="utf-8")
    status, _, err = in_process(translate_cli, monkeypatch, capsys, *model)
    assert status == 2 and "--constraints=" in err and "has 1 lines but the input" in err, err
    monkeypatch.setattr(engines, "load_translate", real)
    for args, words in [
        (("--engine", "ctranslate2"), "CTranslate2 has no lexical constraints"),
        (("--sampling-topk", "5"), "samples instead of searching a beam: --constraints="),
        (("--replace-unknowns",), "drop --replace-unknowns or --constraints"),
        (("--score", source), "--constraints does not apply"),
        (("--interactive",), "--constraints (a file of as many lines"),
    ]:
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, *args)
        assert status == 2 and words in err.strip().splitlines()[-1], (args, err)


def test_evaluate_writes_its_translations_with_output(tmp_path, monkeypatch, capsys):
    seen = []

    def upper(batch):
        seen.extend(batch)
        return [line.upper() for line in batch]

    monkeypatch.setattr(engines, "load_translate", lambda *a, **k: (upper, "a stand-in"))
    src, ref, hyp = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt"
    src.write_text("b a\n\nc\n", encoding="utf-8")
    ref.write_text("B A\n\nX\n", encoding="utf-8")
    files = ("--model", tmp_path, "--src", src, "--ref", ref)
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *files, "--output", hyp,
                                  "--batch-size", "2")  # fmt: skip
    assert status == 0, err
    assert hyp.read_text(encoding="utf-8") == "B A\n\nC\n"  # one line each, in --src's order
    assert json.loads(out)["sentences"] == 3 and json.loads(out)["exact_match"] == 2 / 3
    # Refused before anything is translated: an existing file without --overwrite, --src
    # or --ref even with it, standard output (the scores' place).
    seen.clear()
    for output, more, words in [
        (hyp, (), "exists; pass --overwrite to replace it"),
        (src, ("--overwrite",), "is the file the input comes from"),
        (ref, ("--overwrite",), f"is the file --ref={str(ref)!r} reads"),
        ("-", (), "would mix the translations with the scores"),
    ]:
        status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *files, "--output",
                                      output, *more)  # fmt: skip
        assert status == 2 and words in err and out == "", (output, err)
    assert not seen and src.read_text(encoding="utf-8") == "b a\n\nc\n"
    assert ref.read_text(encoding="utf-8") == "B A\n\nX\n"
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, *files, "--output", hyp,
                                "--overwrite")  # fmt: skip
    assert status == 0 and hyp.read_text(encoding="utf-8") == "B A\n\nC\n", err


def test_a_corpus_folder_without_the_pair_names_the_language_flags(tmp_path, monkeypatch, capsys):
    corpus, run = tmp_path / "corpus", tmp_path / "run"
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        (corpus / f"{split}.de").write_text("eins\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("one\n", encoding="utf-8")
    (corpus / "train.de").rename(corpus / "train.de-00000-of-00001")  # shards count too
    for args, words in [
        ((), "has no train.ja (--source-lang='ja'): it has train files of de, en;"),
        (("--source-lang", "de", "--target-lang", "fr"), "has no train.fr (--target-lang='fr')"),
    ]:
        status, _, err = in_process(train_cli, monkeypatch, capsys, "--corpus-dir", corpus,
                                    *args, "--output", run)  # fmt: skip
        assert status == 2 and err.startswith("tfblocks-train: error:"), err
        assert words in err and "--source-lang and --target-lang" in err, err
        assert not run.exists()


def test_a_refused_phrase_is_named_by_its_line_of_constraints(run_folder, tmp_path, monkeypatch,
                                                              capsys):  # fmt: skip
    # The lines are translated sorted by length, so the refused phrase's batch row is not
    # its line: the message names the line of --constraints. A phrase of more subwords than
    # max_length leaves, and one of characters the vocabulary lacks (the search would
    # "meet" it with <unk>), are refused in one line.
    run, _ = run_folder
    source, constraints = tmp_path / "input.txt", tmp_path / "glossary.tsv"
    source.write_text("今日のランチはカレーだ。\n私は学生です。\n健太は学校で本を読む。\n本\n",
                      encoding="utf-8")  # fmt: skip
    model = ("--model", run, "--input", source, "--constraints", constraints)
    long = " ".join(["lunch"] * MAX_LENGTH)
    for lines, words in [
        (["", "", long, ""], f"line 3, phrase 1 ('{long[:39]}…') has "),
        (
            ["", "", "", "lunch\t🍛"],
            "line 4, phrase 2 ('🍛') holds characters the target vocabulary lacks ('🍛')",
        ),
    ]:
        constraints.write_text("\n".join(lines) + "\n", encoding="utf-8")
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model)
        last = err.strip().splitlines()[-1]
        assert status == 2 and f"--constraints={str(constraints)!r} {words}" in last, err
