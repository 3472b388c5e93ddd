"""The translation job end to end through its command lines, with tiny settings.

`examples/translate.py` (= `tfblocks-train`, what `make demo` runs) trains into a run
folder; `tfblocks-translate` and `tfblocks-evaluate` use that folder and its export;
a rerun with another vocabulary is refused; `--init-from --lora-rank` fine-tunes the
folder's model (its adapters) on other data. The training run (`trained`, made once for
the module) and `tfblocks-translate` on the run folder are real processes (the entry
points); the other commands (`tfblocks-evaluate` on the SavedModel among them) run their
`run()` in this process, where TensorFlow is already loaded, with the same arguments.
"""

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.scripts import ROOT, run_script
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import BeamSearch
from tfblocks.models import load_preset
from tfblocks.serving import Translator
from tfblocks.text import load_phrasebook

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "max_length=24,learning_rate_warmup_steps=20,learning_rate_constant=1.0"
)
TRAIN = ("--epochs", "1", "--vocab-size", "250", "--hparams-override", TINY,
         "--batch-tokens", "1024")  # fmt: skip
FIRST = (*TRAIN, "--limit-train", "600", "--limit-test", "8", "--beam-size", "2",
         "--dev-sentences", "8")  # fmt: skip
FAST = (*TRAIN, "--limit-train", "100", "--limit-test", "2", "--dev-sentences", "0",
        "--beam-size", "1")  # fmt: skip


def command(name, *args, stdin=None):
    """Runs an installed console script (`tfblocks-NAME`) from the repository root."""
    script = os.path.join(os.path.dirname(sys.executable), f"tfblocks-{name}")
    return subprocess.run(
        [script, *map(str, args)], input=stdin, cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def in_process(module, monkeypatch, capsys, *args, stdin=None):
    """`module.run()` (a console script's entry) with `args` as its command line, here.

    Returns (exit status, stdout, stderr).
    """
    name = module.__name__.rsplit(".", 1)[1]
    monkeypatch.setattr(sys, "argv", [f"tfblocks-{name}", *map(str, args)])
    if stdin is not None:  # str (written as UTF-8) or bytes, read as the console reads them
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    capsys.readouterr()
    try:
        module.run()
        status = 0
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`(run, metrics, process)`: the run folder `examples/translate.py` trains with `FIRST`
    (in a process of its own), its metrics.json and the finished process. The tests read
    it, try to rerun it with another vocabulary (refused) and fine-tune from it."""
    run = tmp_path_factory.mktemp("trained") / "run"
    result = run_script("examples/translate.py", *FIRST, "--output", run, timeout=600)
    return run, json.loads((run / "metrics.json").read_text(encoding="utf-8")), result


def test_train_translate_and_evaluate(trained, tmp_path, monkeypatch, capsys):
    run, metrics, result = trained
    assert metrics["sentences"] == 8 and 0.0 <= metrics["bleu"] <= 100.0
    assert 0.0 <= metrics["chrf"] <= 100.0 and 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["epochs"] == 1 and metrics["reload_matches"] is True
    assert "dev_bleu" in metrics["history"][0] and metrics["best_epoch"] == 1
    assert "今日のランチはカレーだ。" in metrics["samples"]
    assert set(metrics["seconds"]) == {"data", "train", "evaluate", "export", "reload"}
    for name in ("export/1/saved_model.pb", "model/config.json", "model/hparams.json",
                 "tokenizer.model", "run.json", "state/training.weights.h5", "best.npz",
                 "last.npz", "checkpoints/epoch-0001.npz"):  # fmt: skip
        assert (run / name).exists(), name
    assert any((run / "logs").rglob("events.out.tfevents.*"))
    assert "test BLEU" in result.stdout and "tok:13a" in result.stdout
    # The epoch's line ends with the updates and the learning rate; the summary counts them.
    updates = metrics["history"][0]["updates"]
    assert re.search(rf"- updates: {updates} - learning_rate: \S+\n", result.stdout)
    assert f"  1 epochs ({updates} updates)," in result.stdout
    # The closing summary names where things are; the picture is a PNG.
    assert f"curves:  {run / 'curves.png'}" in result.stdout
    assert f"export:  {run / 'export' / '1'}" in result.stdout
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # conftest sets TF_CPP_MIN_LOG_LEVEL=2, which keeps ERROR lines such as cuInit's on a
    # CPU machine; tests/examples/test_quickstart.py checks the full quieting without it.
    assert "I0000" not in result.stderr

    # tfblocks-translate on the run folder (its model in memory, beam 2): one line out per
    # line in, in order, empty lines kept, in batches of 3, as the reloaded SavedModel
    # translated them during training (metrics.json's samples). (--input / --output are
    # tested below, on a stand-in model.)
    samples = list(metrics["samples"])
    lines = [samples[0], "", samples[1], samples[2]]
    out = command("translate", "--model", run, "--beam-size", "2", "--batch-size", "3",
                  stdin="\n".join(lines) + "\n")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    want = [metrics["samples"][samples[0]], "", *(metrics["samples"][s] for s in samples[1:])]
    assert out.stdout.split("\n")[:-1] == want
    # Said first, before TensorFlow loads; its progress, piped, in whole lines.
    assert out.stderr.startswith("tfblocks-translate: loading TensorFlow...\n"), out.stderr
    assert "\r" not in out.stderr
    assert re.search(r"^3/4 lines \(\d+ s\)\n4/4 lines \(\d+ s\)$", out.stderr, re.M), out.stderr
    source = tmp_path / "src.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # tfblocks-evaluate on the SavedModel (its beam 2 is in the export): JSON scores
    # against references.
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(want) + "\n", encoding="utf-8")
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model",
                                  run / "export" / "1", "--src", source, "--ref",
                                  reference)  # fmt: skip
    assert status == 0, err[-3000:]
    scores = json.loads(out)
    assert scores["exact_match"] == 1.0 and scores["sentences"] == 4

    # --n-best on the run folder: two Moses lines per input line, the first of each the
    # translation above; --score on its SavedModel (the export's `score` signature): one
    # log-probability per line. The export has no `n_best` signature (one hypothesis).
    n_best = ("--beam-size", "2", "--n-best", "2", "--input", source)
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, *n_best)
    assert status == 0, err[-3000:]
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert [int(row[0]) for row in rows] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [row[1] for row in rows[::2]] == want and rows[2][1:] == ["", "0.000000"]
    saved = run / "export" / "1"
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", saved,
                                  "--input", source, "--score", reference)  # fmt: skip
    assert status == 0, err[-3000:]
    assert len(out.splitlines()) == 4 and all(float(v) < 0 for v in out.splitlines()), out
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", saved,
                                "--n-best", "2", stdin="x\n")  # fmt: skip
    assert status == 2 and "has no `n_best` signature" in err, err
    # --target-prefix, on the run folder and on its SavedModel (the `prefix` signature):
    # each translation starts with its line of the file; an empty line forces nothing.
    starts = [" ".join(want[0].split()[:1]), "", "", " ".join(want[3].split()[:2])]
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("\n".join(starts) + "\n", encoding="utf-8")
    for model in (("--model", run, "--beam-size", "2"), ("--model", saved)):
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, "--input",
                                      source, "--target-prefix", prefixes)  # fmt: skip
        assert status == 0, err[-3000:]
        got = out.split("\n")[:-1]
        assert len(got) == 4 and got[1] == "" and got[2] == want[2], (model, got)
        assert all(text.startswith(start) for text, start in zip(got, starts, strict=True))
    prefixes.write_text("one line\n", encoding="utf-8")
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, "--input",
                                source, "--target-prefix", prefixes)  # fmt: skip
    assert status == 2 and "has 1 lines but the input" in err and "has 4" in err, err

    # Another vocabulary in the same folder is an error naming both, not a silent reuse.
    before = (run / "tokenizer.model").read_bytes()
    status, _, err = in_process(train_cli, monkeypatch, capsys, *FIRST, "--vocab-size", "300",
                                "--output", run)  # fmt: skip
    assert status == 2
    assert "vocab_size: the folder has 250, this run asks for 300" in err
    assert (run / "tokenizer.model").read_bytes() == before


def test_constraints_hold_in_every_translation_of_the_trained_run(trained):
    # 50 test sentences in one batch, translated by the module's trained model with
    # constraints (phrases of their reference's words: one phrase of two words, two
    # phrases, or none): each of the 2 best translations of a sentence holds every phrase
    # of it. Step by step in Python: for this tiny model, tracing and compiling the
    # search's loops costs far more than running them (--constraints itself:
    # test_everyday_commands.py).
    preset = load_preset(trained[0] / "model")
    translator = Translator(preset.model, preset.tokenizer, preset.tokenizer,
                            preset.hparams.max_length, search=BeamSearch(2),
                            jit_compile=False, num_hypotheses=2)  # fmt: skip
    pairs = load_phrasebook(size=2000)["test"][:50]
    words = [[w for w in english.split() if w.isalpha()] for _, english in pairs]
    phrases = [
        [] if i % 5 == 0 else [" ".join(w[:2])] if i % 2 else [w[-1], w[0]]
        for i, w in enumerate(words)
    ]
    assert sum(map(len, phrases)) > 50 and all(words)
    tf.config.run_functions_eagerly(True)
    try:
        n_best = translator.n_best([japanese for japanese, _ in pairs], constraints=phrases)
    finally:
        tf.config.run_functions_eagerly(False)
    assert [len(row) for row in n_best] == [2] * 50
    for row, in_line in zip(n_best, phrases, strict=True):
        assert all(phrase in h.text for h in row for phrase in in_line), (row, in_line)


def npz(path):
    with np.load(path) as stored:
        return {k: stored[k] for k in stored.files}


def test_lora_fine_tuning_trains_the_adapters_and_exports_merged_kernels(
    trained, tmp_path, monkeypatch, capsys
):
    # Fine-tuning on other data (FAST's) starts from the module's run: its model (TINY's, as
    # FAST's runs have) and tokenizer; here its adapters only (the full fine-tuning of an
    # --init-from model: tests/cli/test_import.py). Packed rows, 5 a step: several steps, so
    # the adapters move after the first (whose learning rate, at step 0, is 0).
    base, run = trained[0], tmp_path / "lora"
    status, printed, err = in_process(train_cli, monkeypatch, capsys, *FAST, "--shapes", "packed",
                                      "--batch-tokens", "128", "--init-from", base,
                                      "--lora-rank", "2", "--output", run)  # fmt: skip
    assert status == 0, err[-3000:]
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert (run / "tokenizer.model").read_bytes() == (base / "tokenizer.model").read_bytes()
    assert json.loads((run / "run.json").read_text())["settings"]["init_from"] == str(base)
    assert (run / "init.npz").exists() and (run / "export" / "1" / "saved_model.pb").exists()
    # Width 32, one encoder and one decoder layer: 3 attention layers of 4 projections.
    adapters = 12 * (32 * 2 + 2 * 32)
    assert re.search(
        rf"LoRA rank 2 on 12 projections: {adapters:,} trainable parameters of ", printed
    )
    assert metrics["trainable_parameters"] == adapters < metrics["parameters"]

    # Before merging, training changed only the adapters.
    initial, state = npz(run / "init.npz"), npz(run / "state" / "variables.npz")
    for path, value in initial.items():
        np.testing.assert_array_equal(state[path], value, err_msg=path)
    a_paths = sorted(p for p in state if p.endswith("/lora_kernel_a"))
    assert len(a_paths) == 12 and len(state) == len(initial) + 24

    # The final model: W + (alpha / rank) · A · B (alpha = rank) in the plain layout.
    model, _, _ = load_preset(str(run / "model"))
    final = {v.path: np.asarray(v) for v in model.weights}
    assert sorted(final) == sorted(initial)
    changed = 0
    for a_path in a_paths:
        layer = a_path.removesuffix("lora_kernel_a")
        want = initial[layer + "kernel"] + state[a_path] @ state[layer + "lora_kernel_b"]
        np.testing.assert_allclose(final[layer + "kernel"], want, rtol=1e-5, atol=1e-6)
        changed += not np.allclose(want, initial[layer + "kernel"])
    assert changed == len(a_paths)  # every adapter trained
    # The export serves the plain model: the base run's variables, no adapters.
    served = {folder: _served_variables(folder) for folder in (base, run)}
    assert not [name for name in served[run] if "lora" in name]
    shapes = {folder: sorted(s for n, s in v.items() if n.startswith("_signature_variables/"))
              for folder, v in served.items()}  # fmt: skip
    assert shapes[run] == shapes[base] and len(shapes[run]) > len(initial)  # + seed states


def _served_variables(run):
    """`{name: shape}` of the variables in a run's SavedModel."""
    path = str(run / "export" / "1" / "variables" / "variables")
    return {name: tuple(shape) for name, shape in tf.train.list_variables(path)}


def test_bad_hparams_are_a_clear_error_before_any_write(tmp_path, monkeypatch, capsys):
    for args, names in [
        (("--hparams-override", "hiden_size=3"), ("hiden_size", "hidden_size")),
        (("--hparams-override", "hidden_size=100,num_heads=3"), ("num_heads",)),
        (("--hparams", "transformer_huge"), ("transformer_huge", "transformer_tiny")),
    ]:
        status, _, err = in_process(train_cli, monkeypatch, capsys, *args, "--output", tmp_path)
        assert status == 2 and err.startswith("tfblocks-train: error:"), err
        assert all(name in err for name in names), err
        assert not any(tmp_path.iterdir())  # refused before anything was written


def test_translate_and_evaluate_join_japanese_files_as_training_does(tmp_path, monkeypatch, capsys):
    # The model is replaced by one that returns its input, so what the commands read shows.
    from tfblocks.translation import engines

    seen = []

    def identity(batch):
        seen.extend(batch)
        return list(batch)

    monkeypatch.setattr(engines, "load_translate", lambda *a, **k: (identity, "an identity"))
    spaced = "今日 の ランチ は カレー だ 。\n\n私 は Windows 10 を 使 う 。\n"
    joined = ["今日のランチはカレーだ。", "", "私はWindows 10を使う。"]
    (tmp_path / "test.ja").write_text(spaced, encoding="utf-8")
    (tmp_path / "spaced.txt").write_text(spaced, encoding="utf-8")
    (tmp_path / "ref.en").write_text("\n".join(joined) + "\n", encoding="utf-8")
    model = ("--model", tmp_path)
    for args, want in [
        (("--input", tmp_path / "test.ja"), joined),  # *.ja: joined, as tfblocks-train reads
        (("--input", tmp_path / "spaced.txt"), spaced.splitlines()),  # other files as they are
        (("--input", tmp_path / "test.ja", "--japanese-spaces", "keep"), spaced.splitlines()),
        (("--input", tmp_path / "spaced.txt", "--japanese-spaces", "remove"), joined),
    ]:
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, *args)
        assert status == 0, err
        assert out.split("\n")[:-1] == want, args
        # auto left spaced Japanese as it is: said on stderr (a choice given: not said)
        assert ("warning" in err) == (args == ("--input", tmp_path / "spaced.txt")), args
    status, out, _ = in_process(translate_cli, monkeypatch, capsys, *model,
                                "--japanese-spaces", "remove", stdin="\ufeff" + spaced)  # fmt: skip
    assert status == 0 and out.split("\n")[:-1] == joined

    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, stdin=spaced)
    assert status == 0 and out.split("\n")[:-1] == spaced.splitlines()  # stdin: as it is,
    assert "warning: 2 of the 3 lines of standard input look like pre-tokenized" in err  # said
    status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, stdin="\n".join(joined))
    assert status == 0 and "warning" not in err
    # Bytes that are not UTF-8: the line is named, nothing is translated.
    seen.clear()
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model,
                                  stdin=b"ok\ncaf\xe9\n")  # fmt: skip
    assert status == 2 and out == "" and not seen
    assert "standard input, line 2: invalid UTF-8" in err and "b'\\xe9'" in err, err
    # --output: an existing file is replaced only with --overwrite, the input never; each
    # refusal comes before any translation.
    mine = tmp_path / "mine.txt"
    mine.write_text("a user's notes\n", encoding="utf-8")
    os.mkfifo(tmp_path / "pipe")
    monkeypatch.chdir(tmp_path)
    source = ("--input", tmp_path / "test.ja")
    for output, more, message in [
        (mine, (), "exists; pass --overwrite to replace it"),
        ("./test.ja", (*source, "--overwrite"), "is the file the input comes from"),
        (tmp_path, (), "exists and is not a regular file"),
        (tmp_path / "pipe", ("--overwrite",), "exists and is not a regular file"),
        ("", (), "must name a file"),
        ("new/", (), "must name a file"),
        (tmp_path / "no" / "hyp.txt", (), "does not exist"),
    ]:
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, *more,
                                      "--output", output, stdin="x\n")  # fmt: skip
        assert status == 2 and f"--output={str(output)!r}" in err and message in err, err
        assert out == ""
    for more, message in [(("--input", "missing.ja"), "--input='missing.ja' does not exist"),
                          (("--input", tmp_path), "is a folder")]:  # fmt: skip
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, *more)
        assert status == 2 and message in err, err
    with open(mine, encoding="utf-8") as redirected:  # `< mine.txt --output mine.txt`
        monkeypatch.setattr(sys, "stdin", redirected)
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, "--output",
                                    "mine.txt", "--overwrite")  # fmt: skip
    assert status == 2 and "is the file the input comes from" in err, err
    assert not seen and mine.read_text(encoding="utf-8") == "a user's notes\n"
    assert (tmp_path / "test.ja").read_text(encoding="utf-8") == spaced
    status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, "--output", mine,
                                "--overwrite", stdin="x\n")  # fmt: skip
    assert status == 0 and mine.read_text(encoding="utf-8") == "x\n", err
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *model, "--output", "-",
                                  stdin="y\n")  # fmt: skip
    assert status == 0 and out == "y\n" and not os.path.exists("-"), err
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]

    # tfblocks-evaluate scores the joined sentences, like the test BLEU of tfblocks-train;
    # --japanese-spaces is for --src only, --ref follows the *.ja rule.
    (tmp_path / "ref.ja").write_text(spaced, encoding="utf-8")
    (tmp_path / "spaced_ref.en").write_text(spaced, encoding="utf-8")
    as_is = spaced.splitlines()
    for args, source, exact in [
        (("--src", tmp_path / "test.ja", "--ref", tmp_path / "ref.en"), joined, 1.0),
        (("--src", tmp_path / "test.ja", "--ref", tmp_path / "ref.ja"), joined, 1.0),
        (("--src", tmp_path / "test.ja", "--ref", tmp_path / "ref.en",
          "--japanese-spaces", "keep"), as_is, 1 / 3),  # only the empty line matches
        (("--src", tmp_path / "spaced.txt", "--ref", tmp_path / "spaced_ref.en",
          "--japanese-spaces", "remove"), joined, 1 / 3),  # the reference kept its spaces
    ]:  # fmt: skip
        seen.clear()
        status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *model, *args)
        assert status == 0, err
        assert sorted(seen) == sorted(source), args  # what the model was given
        assert "warning" not in err, args  # --src joined or as asked; --ref never warns
        assert json.loads(out)["exact_match"] == exact, args
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, *model, *args[:4],
                                "--japanese-spaces", "maybe")  # fmt: skip
    assert status == 2 and "--japanese-spaces" in err and "'maybe'" in err


def test_translate_and_evaluate_follow_the_languages_of_the_run(tmp_path, monkeypatch, capsys):
    # A run folder records its languages; Japanese is joined on the side it names as ja,
    # whatever the file is called (standard input too), and never on another language.
    from tfblocks.translation import engines

    monkeypatch.setattr(engines, "load_translate", lambda *a, **k: (list, "an identity"))
    spaced, joined = "今日 の ランチ は カレー だ 。\n", "今日のランチはカレーだ。\n"
    for name in ("test.ja", "test.ko", "ref.ja"):
        (tmp_path / name).write_text(spaced, encoding="utf-8")
    for source, target, run_file in [("ja", "en", "run.json"), ("ko", "ja", "run.json"),
                                     ("ja", "en", "nothing.json")]:  # fmt: skip
        run = tmp_path / f"{source}-{target}-{run_file}"
        (run / "model").mkdir(parents=True)
        settings = {"source_lang": source, "target_lang": target}
        (run / run_file).write_text(json.dumps({"format": 1, "settings": settings}))
        recorded = run_file == "run.json"
        for model in (run, run / "model"):  # the run folder or its preset
            for args in (("--input", tmp_path / "test.ko"), ()):
                status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model",
                                              model, *args, stdin=spaced)  # fmt: skip
                want = joined if recorded and source == "ja" else spaced
                assert status == 0 and out == want, (model, args, err)
                assert ("warning" in err) == (not recorded), err  # unknown: advised
            status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", model,
                                          "--src", tmp_path / "test.ja", "--ref",
                                          tmp_path / "ref.ja")  # fmt: skip
            # The reference is joined when the target is Japanese (or, unrecorded, by name).
            exact = (source == "ja") == (target == "ja" or not recorded)
            assert status == 0 and json.loads(out)["exact_match"] == exact, (model, err)
