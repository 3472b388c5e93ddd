"""`tfblocks-import m2m100|nllb DIR --output RUN --source-lang CODE --target-lang CODE`: a run
folder that translates in its direction (the source language's token before the text, the
target language's token forced first), from the command, its preset and its export/1.

The folders are the tiny random ones of `tests/data/m2m100/` (made with transformers by
`tests/data/make_m2m100_fixture.py`), with what transformers' greedy search gave.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.test_commands import in_process
from tfblocks.cli import import_ as import_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.translation import engines

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "m2m100")
PAIR = ("eng_Latn", "deu_Latn")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The NLLB folder imported en→de, its generation_config.json asking for greedy search
    and 64 tokens (the run's beam 1 and max_length 63: no source of the fixture is cut)."""
    folder = tmp_path_factory.mktemp("folders") / "nllb"
    shutil.copytree(os.path.join(DATA, "nllb"), folder)
    generation = _json(folder / "generation_config.json")
    (folder / "generation_config.json").write_text(
        json.dumps({**generation, "num_beams": 1, "max_length": 64}), encoding="utf-8"
    )
    output = tmp_path_factory.mktemp("runs") / "nllb"
    return import_cli.main(["nllb", str(folder), "--output", str(output),
                            "--source-lang", PAIR[0], "--target-lang", PAIR[1]])  # fmt: skip


def _hugging_face_greedy(run, pair=PAIR):
    """`(sources, texts, stopped)`: the fixture's sources of the direction `pair` and the
    text of transformers' greedy output for each (its forced language token left out, as
    the run's target tokenizer decodes it), and whether transformers stopped it at its
    limit."""
    from tfblocks.models import load_target_tokenizer

    expected = np.load(os.path.join(DATA, "nllb.npz"))
    pairs = zip(expected["src_langs"], expected["tgt_langs"], strict=True)
    rows = [i for i, given in enumerate(pairs) if tuple(given) == pair]
    size = _json(os.path.join(DATA, "nllb", "config.json"))["vocab_size"]
    to_tf = np.zeros(size, "int64")
    to_tf[[1, 2, 3]] = [0, 1, 2]
    to_tf[[0, *range(4, size)]] = np.arange(4, size + 1)
    target = load_target_tokenizer(os.path.join(run, "model"))
    ids = to_tf[expected["greedy"][rows]]
    texts = target.detokenize(tf.constant(ids, tf.int32)).numpy()
    stopped = [1 not in row.tolist() for row in ids]
    return [str(expected["sources"][i]) for i in rows], [t.decode() for t in texts], stopped


def test_the_run_translates_in_its_direction_as_transformers(run, tmp_path, monkeypatch, capsys):
    settings = _json(os.path.join(run, "run.json"))["settings"]
    assert settings["import_format"] == "nllb"
    assert (settings["source_lang"], settings["target_lang"]) == PAIR
    assert settings["language_tokens"]["source"] == PAIR[0]
    assert settings["language_tokens"]["target_id"] > 3
    sources, want, stopped = _hugging_face_greedy(run)
    assert len(sources) >= 2
    (tmp_path / "in.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    command = ("--model", run, "--input", tmp_path / "in.en")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *command)
    assert status == 0 and "(beam 1, max_length 63, no XLA)" in err, err
    for got, text, limit in zip(out.splitlines(), want, stopped, strict=True):
        assert got.startswith(text) if limit else got == text, (got, text)
    # export/1 decodes as the command, the language tokens included.
    saved = tf.saved_model.load(os.path.join(run, "export", "1")).signatures["serving_default"]
    exported = saved(text=tf.constant([*sources, ""]))["translation"].numpy()
    assert [t.decode() for t in exported] == [*out.splitlines(), ""]


def test_a_score_leaves_out_the_forced_language_token_as_transformers_generation_does(run):
    # `score(source, target)`: the target's log-probability after the forced language token
    # (whose own counts 0, as in transformers' generation scores and in the search's), from
    # transformers' teacher-forced logits (pad left out of the softmax: never predicted).
    expected = np.load(os.path.join(DATA, "nllb.npz"))
    pairs = zip(expected["src_langs"], expected["tgt_langs"], expected["source_ids"], strict=True)
    # A source the run's max_length (15) does not cut.
    row = [tuple(p[:2]) == PAIR and (p[2] != 1).sum() < 15 for p in pairs].index(True)
    labels = expected["target_ids"][row]
    logits = np.delete(expected["logits"][row].astype("float64"), 1, axis=-1)  # without <pad>
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 1
    real[0] = False  # the forced language token
    columns = np.where(labels > 1, labels - 1, labels)  # the ids after <pad>'s column
    want = log_probs[np.arange(len(labels)), columns][real].sum()
    translator, _ = engines._preset_translator(os.path.join(run, "model"), None)
    got = translator.score([str(expected["sources"][row])], [str(expected["targets"][row])])
    np.testing.assert_allclose(got, [want], atol=1e-3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nllb", "--source-lang", "eng_Latn", "--target-lang", "deu_Latm"),
         r"--target-lang='deu_Latm' is not a language of this nllb model \(202 codes\); the "
         r"closest: deu_Latn"),
        (("nllb", "--source-lang", "eng_Latn"), "needs --source-lang and --target-lang"),
        (("m2m100", "--source-lang", "en", "--target-lang", "de", "--ctranslate2"),
         "--ctranslate2: not yet for m2m100 models"),
        (("marian", "--source-lang", "en", "--target-lang", "de"), "are for m2m100 and nllb"),
    ],
)  # fmt: skip
def test_bad_directions_are_refused_in_one_line(args, message, tmp_path):
    folder = os.path.join(DATA, "m2m100" if args[0] != "nllb" else "nllb")
    with pytest.raises(ValueError, match=message):
        import_cli.main([args[0], folder, "--output", str(tmp_path / "run"), *args[1:]])
    assert not (tmp_path / "run").exists()


def test_an_m2m100_run_takes_two_letter_codes():
    from tfblocks.models import import_m2m100, import_nllb
    from tfblocks.translation.targets import language_code as _code

    languages = import_m2m100(os.path.join(DATA, "m2m100")).languages
    assert _code(languages, "m2m100", "ja", "--source-lang") == "__ja__"
    assert _code(languages, "m2m100", "__en__", "--target-lang") == "__en__"
    nllb = import_nllb(os.path.join(DATA, "nllb")).languages
    assert _code(nllb, "nllb", "jpn", "--source-lang") == "jpn_Jpan"  # its one script
    with pytest.raises(ValueError, match=r"--target-lang='zho' .* closest: zho_Hans, zho_Hant"):
        _code(nllb, "nllb", "zho", "--target-lang")  # two scripts: which one is asked


def test_import_run_checks_the_format_and_direction_itself(tmp_path):
    from tfblocks.translation import importing

    assert import_cli.FORMATS == importing.FORMATS  # the command's choices (kept light)
    for kind, pair, words in [
        ("nllb200", (None, None), "`kind` must be one of marian, m2m100, nllb, got kind='nllb200'"),
        ("m2m100", ("en", None), "needs --source-lang and --target-lang"),
        ("marian", ("en", "de"), "are for m2m100 and nllb"),
    ]:
        with pytest.raises(ValueError, match=words):
            importing.import_run(os.path.join(DATA, "m2m100"), str(tmp_path / "run"), kind=kind,
                                 source_lang=pair[0], target_lang=pair[1])  # fmt: skip
    assert not (tmp_path / "run").exists()


def _json(file):
    with open(file, encoding="utf-8") as f:
        return json.load(f)


def test_the_commands_and_export_take_any_direction_of_the_model(run, tmp_path, monkeypatch,
                                                                  capsys):  # fmt: skip
    # --source-lang / --target-lang on the en->de run: ja->en as transformers translates it;
    # export/1's `languages` signature: each text in its own direction.
    sources, want, stopped = _hugging_face_greedy(run, ("jpn_Jpan", "eng_Latn"))
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    command = ("--model", run, "--input", tmp_path / "in.txt", "--source-lang", "jpn_Jpan",
               "--target-lang", "eng_Latn")  # fmt: skip
    status, out, err = in_process(translate_cli, monkeypatch, capsys, *command)
    assert status == 0 and "translating jpn_Jpan->eng_Latn" in err, err
    for got, text, limit in zip(out.splitlines(), want, stopped, strict=True):
        assert got.startswith(text) if limit else got == text, (got, text)
    # --score in that direction: the command's number is the Python API's.
    (tmp_path / "out.txt").write_text(out, encoding="utf-8")
    status, scored, _ = in_process(translate_cli, monkeypatch, capsys, *command,
                                   "--score", tmp_path / "out.txt")  # fmt: skip
    assert status == 0
    from tfblocks.translation.targets import run_direction

    direction = run_direction(run, "jpn_Jpan", "eng_Latn")
    translator, _ = engines._preset_translator(os.path.join(run, "model"), None,
                                               language_tokens=direction)  # fmt: skip
    np.testing.assert_allclose([float(line) for line in scored.splitlines()],
                               translator.score(sources, out.splitlines()), atol=1e-4)  # fmt: skip
    # tfblocks-evaluate in that direction: its own translations as references score 100.
    from tfblocks.cli import evaluate as evaluate_cli

    files = ("--src", tmp_path / "in.txt", "--ref", tmp_path / "out.txt")
    direction = ("--source-lang", "jpn", "--target-lang", "eng_Latn")  # jpn: its one script
    status, report, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run, *files,
                                     *direction)  # fmt: skip
    assert status == 0 and json.loads(report)["bleu"] == 100.0, (report, err)
    expected = np.load(os.path.join(DATA, "nllb.npz"))
    rows = {tuple(pair): _hugging_face_greedy(run, tuple(pair))
            for pair in zip(expected["src_langs"], expected["tgt_langs"], strict=True)}  # fmt: skip
    saved = tf.saved_model.load(os.path.join(run, "export", "1")).signatures["languages"]
    columns = [[], [], [], [], []]  # texts, source codes, target codes, HF's texts, stopped
    for (source, target), (given, texts_wanted, limits) in rows.items():
        for row in zip(given, [source] * len(given), [target] * len(given), texts_wanted,
                       limits, strict=True):  # fmt: skip
            for column, value in zip(columns, row, strict=True):
                column.append(value)
    texts, source_langs, target_langs, wanted, stopped = columns
    assert len(set(target_langs)) == 3
    out = saved(text=tf.constant(texts), source_lang=tf.constant(source_langs),
                target_lang=tf.constant(target_langs))["translation"]  # fmt: skip
    for got, text, limit in zip(out.numpy(), wanted, stopped, strict=True):
        got = got.decode()
        assert got.startswith(text) if limit else got == text, (got, text)


def test_an_unknown_code_on_the_command_line_is_refused_with_the_closest(run, tmp_path):
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    for flag, code, closest in [("--target-lang", "deu_Latm", "deu_Latn"),
                                ("--source-lang", "eng_latn", "eng_Latn")]:  # fmt: skip
        with pytest.raises(ValueError, match=rf"{flag}='{code}' is not a language .*{closest}"):
            translate_cli.main(["--model", run, "--input", str(tmp_path / "in.txt"), flag, code])


PAIRS = [
    ("猫は庭で寝ている。", "the cat sleeps in the garden."),
    ("私たちはお茶を飲む。", "we drink tea."),
    ("猫は寝ている。", "the cat sleeps."),
    ("庭で寝ている。", "sleeps in the garden."),
]


def test_fine_tuning_in_another_direction_trains_with_its_language_tokens(run, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    # tfblocks-train --init-from the en->de run on a ja->en corpus (--source-lang jpn, its one
    # script): the training data carry [jpn_Jpan] before each source and [eng_Latn] first in
    # each target, the new run records that direction, and its training targets score
    # higher than under the imported model.
    from tfblocks.cli import train as train_cli
    from tfblocks.translation import job_data

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, part in (("train", PAIRS * 4), ("dev", PAIRS[:2]), ("test", PAIRS[2:])):
        for side, language in enumerate(("jpn", "eng_Latn")):
            lines = "".join(pair[side] + "\n" for pair in part)
            (corpus / f"{split}.{language}").write_text(lines, encoding="utf-8")
    seen = []
    real = job_data.make_dataset
    monkeypatch.setattr(job_data, "make_dataset",
                        lambda pairs, *tokenizers, **kw: seen.append(tokenizers)
                        or real(pairs, *tokenizers, **kw))  # fmt: skip
    output = tmp_path / "tuned"
    train_cli.main(["--source-lang", "jpn", "--target-lang", "eng_Latn", "--corpus-dir",
                    str(corpus), "--init-from", run, "--output", str(output), "--epochs", "2",
                    "--batch-tokens", "256", "--dev-sentences", "0", "--beam-size", "1",
                    "--hparams-override", "learning_rate_constant=0.5,max_length=16,"
                    "learning_rate_warmup_steps=10,layer_prepostprocess_dropout=0.0"])  # fmt: skip
    languages = _json(os.path.join(run, "run.json"))["settings"]["language_tokens"]["languages"]
    source, target = seen[0]
    assert source.tokenize(["猫"]).to_list()[0][0] == languages["jpn_Jpan"]
    assert target.tokenize(["the cat"]).to_list()[0][0] == languages["eng_Latn"]
    tokens = _json(output / "run.json")["settings"]["language_tokens"]
    assert (tokens["source"], tokens["target"]) == ("jpn_Jpan", "eng_Latn")
    assert tokens["target_id"] == languages["eng_Latn"]
    from tfblocks.translation.targets import run_direction

    sources, targets = zip(*PAIRS, strict=True)
    scores = []
    for folder in (run, output):
        direction = run_direction(folder, "jpn_Jpan", "eng_Latn")
        translator, _ = engines._preset_translator(os.path.join(folder, "model"), None,
                                                   language_tokens=direction)  # fmt: skip
        scores.append(translator.score(list(sources), list(targets)))
    tuned = scores[1]
    assert tuned.sum() > scores[0].sum(), scores
    # Its export/1 reads and writes the new direction by default: its `score` signature
    # gives the training targets the tuned run's scores in that direction, and its
    # translations are the trained model's in memory (metrics.json's samples).
    saved = tf.saved_model.load(str(output / "export" / "1")).signatures
    exported = saved["score"](source=tf.constant(sources), target=tf.constant(targets))
    np.testing.assert_allclose(exported["score"].numpy(), tuned, atol=1e-4)
    metrics = _json(output / "metrics.json")
    assert metrics["reload_matches"] is True and len(metrics["samples"]) == 2


def test_a_copied_export_refuses_target_lang_instead_of_tagging(run, tmp_path):
    # Away from its run folder an NLLB export has no run.json: --target-lang is refused
    # (it names languages by tokens; a `<2xx>` tag would be read as text), before loading.
    copy = tmp_path / "export"
    shutil.copytree(os.path.join(run, "export", "1"), copy)
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"NLLB SavedModel away from its run folder"):
        translate_cli.main(["--model", str(copy), "--input", str(tmp_path / "in.txt"),
                            "--target-lang", "deu_Latn"])  # fmt: skip
