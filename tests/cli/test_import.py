"""`tfblocks-import marian DIR --output RUN`: a run folder the other commands read
(`tfblocks-translate`, `tfblocks-evaluate`, `tfblocks-train --init-from`, full and LoRA), and
nothing left behind when the import is refused."""

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.cli.test_commands import in_process
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.cli.import_ import main
from tfblocks.models import load_preset, load_target_tokenizer
from tfblocks.text import make_dataset
from tfblocks.translation import engines, importing
from tfblocks.translation.job import TrainingJob

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return main(
        [
            "marian",
            os.path.join(DATA, "shared"),
            "--output",
            str(tmp_path_factory.mktemp("runs") / "run"),
        ]
    )


def test_import_writes_a_run_folder_that_translates_like_hugging_face(run):
    for name in ("run.json", "tokenizer.model", "model/config.json", "export/1/saved_model.pb"):
        assert os.path.isfile(os.path.join(run, name)), name
    with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
        settings = json.load(f)["settings"]
    assert settings["generation"] == {"num_beams": 4, "max_length": 64}
    assert settings["import_format"] == "marian"
    expected = np.load(os.path.join(DATA, "shared.npz"))
    _, tokenizer, hp = load_preset(os.path.join(run, "model"))
    assert hp.max_length == 63  # generation_config's max_length without the decoder start
    # The greedy translations start with Hugging Face's greedy ids, as text (HF stopped
    # them at 16 tokens, the last one a forced EOS; the run's max_length is longer).
    translate, _ = engines.load_translate(run, beam_size=1, notice=lambda message: None)
    sources = [str(s) for s in expected["sources"]]
    with open(os.path.join(DATA, "shared", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    to_tf = np.arange(config["vocab_size"]) + 2
    to_tf[[config["pad_token_id"], config["eos_token_id"], 1]] = [0, 1, 2]
    target = load_target_tokenizer(os.path.join(run, "model")) or tokenizer
    want = target.detokenize(tf.constant(to_tf[expected["greedy"]], tf.int32)).numpy()
    got = translate(sources)
    for got_one, want_one, ids in zip(got, want, expected["greedy"], strict=True):
        forced = config["eos_token_id"] not in ids[:-1].tolist()
        assert got_one.startswith(want_one.decode()) if forced else got_one == want_one.decode()


def test_an_imported_run_exports_to_litert(run, tmp_path):
    """`tfblocks-export litert --model RUN` of an imported run (its tokenizers hold the
    joint vocabulary's other side as UNUSED pieces): the file translates as the preset."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar

    from tfblocks.cli import export as export_cli

    path = export_cli.main(["litert", "--model", run, "--output", str(tmp_path / "m.tflite"),
                            "--beam-size", "1"])  # fmt: skip
    sources = ["the cat sits on the mat.", "rain\tand sun", "", "dog?"]
    interpreter = InterpreterWithCustomOps(
        model_path=path, custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
    )
    out = interpreter.get_signature_runner()(text=np.array(sources, object))
    translate, _ = engines.load_translate(run, beam_size=1, notice=lambda message: None)
    assert [t.decode() for t in out["translation"]] == translate(sources)


# Sentences the shared fixture translates differently with beams 1 and 4 (max_length 8).
BEAM_SOURCES = ["the cat sits on the mat.", "a frog reads the book, quietly!", "rain", "the dog"]


def test_an_imported_run_translates_with_its_num_beams_as_its_export(tmp_path, monkeypatch, capsys):
    """One beam size a run (`run.json`'s `beam_size`, the folder's `num_beams`): what
    `tfblocks-translate` (and `tfblocks-evaluate`: the same `engines.load_translate`) and
    `tfblocks-export litert` use without --beam-size, and export/1."""
    from tfblocks.cli import translate as translate_cli

    folder = tmp_path / "greedy"
    shutil.copytree(os.path.join(DATA, "shared"), folder)
    values = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(
        json.dumps({**values, "num_beams": 1, "max_length": 9})
    )
    run = main(["marian", str(folder), "--output", str(tmp_path / "run")])
    with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
        assert json.load(f)["settings"]["beam_size"] == 1
    saved = tf.saved_model.load(os.path.join(run, "export", "1")).signatures["serving_default"]
    exported = [t.decode() for t in saved(text=tf.constant(BEAM_SOURCES))["translation"].numpy()]
    beam_4, _ = engines.load_translate(run, beam_size=4, notice=lambda message: None)
    assert beam_4(BEAM_SOURCES) != exported  # else the test could not tell them apart
    (tmp_path / "in.txt").write_text("\n".join(BEAM_SOURCES) + "\n", encoding="utf-8")
    status, out, err = in_process(
        translate_cli, monkeypatch, capsys, "--model", run, "--input", tmp_path / "in.txt"
    )
    assert status == 0 and out.splitlines() == exported, err
    assert "(beam 1," in err  # the decoding it says it uses
    # tfblocks-export litert without --beam-size: the run's too (the file's search).
    from tfblocks.cli import export as export_cli
    from tfblocks.serving import Translator

    asked = []
    monkeypatch.setattr(
        Translator, "export_litert", lambda self, path, **kw: asked.append(kw["beam_size"]) or path
    )
    export_cli.main(["litert", "--model", run, "--output", str(tmp_path / "run.tflite")])
    assert asked == [1]


def test_refused_import_leaves_no_folder(tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(os.path.join(DATA, "shared"), folder)
    os.remove(folder / "vocab.json")
    output = tmp_path / "run"
    with pytest.raises(ValueError, match=r"vocab\.json: missing"):
        main(["marian", str(folder), "--output", str(output)])
    assert sorted(os.listdir(tmp_path)) == ["broken"]


def test_a_symlinked_output_is_refused_before_the_import(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("imported before the output was checked")

    monkeypatch.setattr("tfblocks.models.marian.import_marian", never)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match=r"--output=.*link' is a symbolic link"):
        importing.import_run(str(tmp_path / "missing"), str(tmp_path / "link"))
    assert os.listdir(tmp_path / "real") == []


def test_a_failed_write_removes_only_its_own_staging_folder(tmp_path, monkeypatch):
    # The user's folders beside --output, even ones named like a staging folder, stay.
    mine = tmp_path / f"run.importing-{os.getpid()}"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")

    def fail(folder, *args):
        os.makedirs(folder)
        Path(folder, "half.txt").touch()
        raise OSError(28, "No space left on device", folder)

    monkeypatch.setattr(importing, "_write", fail)
    with pytest.raises(OSError, match="No space left"):
        main(["marian", os.path.join(DATA, "shared"), "--output", str(tmp_path / "run")])
    assert sorted(os.listdir(tmp_path)) == [mine.name]
    assert os.listdir(mine) == ["notes.txt"]


def test_existing_output_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"--output=.*exists and is not an empty folder"):
        main(["marian", os.path.join(DATA, "shared"), "--output", str(tmp_path / "run")])
    assert os.listdir(tmp_path / "run") == ["notes.txt"]


# Fine-tuning the tiny imported model on a made-up en->de corpus: few steps, no dropout, a
# learning rate that moves it in them (the import keeps Marian's, made for long runs), and
# max_length 32 instead of the import's 63 (a training setting; the longest pair has 23
# pieces a side): the searches of its evaluation, export and reload then grow their caches
# through 16 and 32 only, which leaves one loop fewer to trace and compile.
WORDS = {"the": "die", "cat": "katze", "dog": "hund", "sits": "sitzt", "sleeps": "schläft",
         "garden": "garten", "mat": "matte", "rice": "reis"}  # fmt: skip
FINE_TUNE = ("--source-lang", "en", "--target-lang", "de", "--batch-tokens", "128",
             "--dev-sentences", "0", "--beam-size", "1", "--hparams-override",
             "learning_rate_schedule=constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size,"
             "learning_rate_constant=0.5,learning_rate_warmup_steps=10,max_length=32,"
             "layer_prepostprocess_dropout=0.0")  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus folder of 40 + 6 + 4 made-up en->de pairs (word by word)."""
    rng = random.Random(0)
    pairs = []
    for _ in range(50):
        words = [rng.choice(list(WORDS)) for _ in range(rng.randint(2, 4))]
        pairs.append((" ".join(words) + ".", " ".join(WORDS[w] for w in words) + "."))
    folder = tmp_path_factory.mktemp("corpus")
    for split, part in (("train", pairs[:40]), ("dev", pairs[40:46]), ("test", pairs[46:])):
        for side, language in enumerate(("en", "de")):
            lines = "".join(pair[side] + "\n" for pair in part)
            (folder / f"{split}.{language}").write_text(lines, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tuned(run, corpus, tmp_path_factory):
    output = tmp_path_factory.mktemp("tuned") / "run"
    metrics = train_cli.main([*FINE_TUNE, "--corpus-dir", str(corpus), "--epochs", "2",
                                  "--init-from", run, "--output", str(output)])  # fmt: skip
    return output, metrics


def load_run(run):
    """`(model, tokenizer, target tokenizer, hp)` of the run folder's model/ (the target
    tokenizer is `tokenizer` when the run shares one)."""
    model, tokenizer, hp = load_preset(os.path.join(run, "model"))
    return model, tokenizer, load_target_tokenizer(os.path.join(run, "model")) or tokenizer, hp


def dev_cross_entropy(loaded, corpus):
    """The token mean of the cross-entropy of a `load_run` model on the dev pairs."""
    model, tokenizer, target, hp = loaded
    sides = [(corpus / f"dev.{lang}").read_text("utf-8").splitlines() for lang in ("en", "de")]
    data = make_dataset(list(zip(*sides, strict=True)), tokenizer, target, batch_tokens=512,
                        max_length=hp.max_length, shuffle=False)  # fmt: skip
    total = count = 0.0
    for features, labels in data:
        losses = keras.losses.sparse_categorical_crossentropy(
            labels, model(features), from_logits=True
        )
        real = tf.cast(labels != 0, tf.float32)
        total += float(tf.reduce_sum(losses * real))
        count += float(tf.reduce_sum(real))
    return total / count


@pytest.mark.heavy
def test_fine_tuning_an_import_keeps_its_architecture_and_lowers_the_dev_loss(run, corpus, tuned):
    output, metrics = tuned
    assert metrics["epochs"] == 2 and metrics["reload_matches"] is True
    # The imported architecture whole (swish, biases, epsilon, logits bias, timing rule,
    # Post-LN, the extra BOS row), only the training settings overridden.
    imported, fine_tuned = load_run(run), load_run(output)  # each preset loaded once
    assert fine_tuned[3] == dataclasses.replace(
        imported[3], learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
        learning_rate_constant=0.5, learning_rate_warmup_steps=10, max_length=32,
        layer_prepostprocess_dropout=0.0,
    )  # fmt: skip
    # Its two tokenizers (reordered SentencePiece models), unchanged.
    for name in ("tokenizer.model", "target_tokenizer.model"):
        assert (output / name).read_bytes() == Path(run, name).read_bytes(), name
    assert dev_cross_entropy(fine_tuned, corpus) < dev_cross_entropy(imported, corpus)
    assert all(np.isfinite(epoch["val_loss"]) for epoch in metrics["history"])


class _TrainedError(Exception):
    """Raised where a job would translate its test split: its training is done."""


@pytest.mark.heavy
def test_lora_on_an_import_keeps_the_base_weights_bit_identical(run, corpus, tmp_path, monkeypatch):
    # What is checked here is what the training wrote, so the job stops where it would
    # evaluate (the tuned run above evaluates, exports and reloads an import; the LoRA run
    # of test_commands.py exports merged kernels).
    def trained(job, translator):
        raise _TrainedError

    monkeypatch.setattr(TrainingJob, "evaluate", trained)
    output = tmp_path / "lora"
    with pytest.raises(_TrainedError):
        train_cli.main([*FINE_TUNE, "--corpus-dir", str(corpus), "--epochs", "1", "--init-from",
                            run, "--lora-rank", "2", "--output", str(output)])  # fmt: skip
    with np.load(output / "init.npz") as init, np.load(output / "state/variables.npz") as state:
        for path in init.files:
            np.testing.assert_array_equal(state[path], init[path], err_msg=path)
        trained = [p for p in state.files if p.endswith("lora_kernel_b")]
        assert trained and any(state[p].any() for p in trained)  # B starts at zero
    model, _, _ = load_preset(os.path.join(run, "model"))
    with np.load(output / "init.npz") as init:  # the import's own weights
        for variable in model.weights:
            np.testing.assert_array_equal(init[variable.path], np.asarray(variable))


@pytest.mark.heavy
def test_the_tuned_export_translates_in_a_fresh_process(tuned, corpus):
    output, metrics = tuned
    source = next(iter(metrics["samples"]))
    program = (
        "import sys, tensorflow as tf, tensorflow_text\n"
        "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "print(serve(text=tf.constant([sys.argv[2]]))['translation'].numpy()[0].decode())\n"
        "assert not [m for m in sys.modules if m.startswith('tfblocks')]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(output / "export" / "1"), source],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == metrics["samples"][source]
    # The fixture's SentencePiece models have no normalization table; the ops say nothing.
    assert "precompiled_charsmap" not in done.stderr, done.stderr[-3000:]


def test_evaluate_prints_the_bleu_of_an_imported_run(run, corpus, monkeypatch, capsys):
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run,
                                  "--src", corpus / "test.en", "--ref", corpus / "test.de",
                                  "--beam-size", "1")  # fmt: skip
    assert status == 0, err[-3000:]
    scores = json.loads(out)
    assert scores["sentences"] == 4 and 0.0 <= scores["bleu"] <= 100.0


def test_an_init_from_override_of_the_architecture_is_refused(run, corpus, tmp_path):
    output = tmp_path / "refused"
    architecture = r"architecture, hidden_size=16, got --hparams-override with hidden_size=32"
    with pytest.raises(ValueError, match=architecture):
        train_cli.main([*FINE_TUNE[:-1], "hidden_size=32", "--corpus-dir", str(corpus),
                            "--init-from", run, "--output", str(output)])  # fmt: skip
    with pytest.raises(ValueError, match=r"--hparams='transformer_tiny' with hidden_size=128"):
        train_cli.main([*FINE_TUNE, "--hparams", "transformer_tiny", "--corpus-dir",
                            str(corpus), "--init-from", run, "--output", str(output)])  # fmt: skip
    assert not output.exists()  # refused before the run folder
