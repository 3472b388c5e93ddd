"""Several directions in one model, end to end through the commands: `tfblocks-train
--pairs` on a made-up corpus of three languages, then `tfblocks-translate` and
`tfblocks-evaluate --target-lang`, whose tag routes the output to the asked language."""

import json
import pathlib
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.test_commands import in_process
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import export as export_cli
from tfblocks.cli import train as train_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.translation import targets

pytestmark = pytest.mark.heavy  # one whole (tiny) run

# Three made-up languages: each writes concept i as a word of its own syllables (ka, me,
# su, ...), so a word tells its language. A sentence is a few concepts, and its
# translation the same concepts in the same order: learnable by a tiny model in seconds.
_SYLLABLES = {"xa": ("ktp", "ao"), "xb": ("mnl", "ie"), "xc": ("srd", "uy")}
CONCEPTS = 10
# The directions trained: xb-xa is read the other way round from xa-xb/.
PAIRS = "xa-xb,xc-xb,xb-xa"
MODEL = (
    "hidden_size=64,filter_size=128,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "max_length=24,learning_rate_warmup_steps=100,learning_rate_constant=0.5,"
    "layer_prepostprocess_dropout=0.0,label_smoothing=0.0"
)
# Calibrated on this corpus and seed: 8 epochs gave each direction 94 to 99 test BLEU
# (epoch 6 alone 84 to 100 dev BLEU); 7 epochs keep a wide margin above this floor.
BLEU_FLOOR = 50.0


def words(language):
    """The `CONCEPTS` words of a made-up `language`, concept i the i-th."""
    consonants, vowels = _SYLLABLES[language]
    forms = [a + b + c + d for a in consonants for b in vowels for c in consonants for d in vowels]
    return random.Random(language).sample(forms, CONCEPTS)


def write_pair(root, source, target, train):
    """Writes `root/source-target/{train,dev,test}.{source,target}`."""
    rng = random.Random(f"{source}-{target}")
    folder = root / f"{source}-{target}"
    folder.mkdir()
    for split, count in (("train", train), ("dev", 20), ("test", 20)):
        rows = [[rng.randrange(CONCEPTS) for _ in range(rng.randint(3, 6))] for _ in range(count)]
        for language in (source, target):
            vocabulary = words(language)
            text = "".join(" ".join(vocabulary[i] for i in row) + "\n" for row in rows)
            (folder / f"{split}.{language}").write_text(text, encoding="utf-8")


def language_of(sentence):
    """The made-up language whose words make most of `sentence` (None: no word)."""
    counts = {lang: sum(w in words(lang) for w in sentence.split()) for lang in _SYLLABLES}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`(run folder, metrics)` of a tiny model trained on the three directions."""
    root = tmp_path_factory.mktemp("multi")
    corpus = root / "corpus"
    corpus.mkdir()
    write_pair(corpus, "xa", "xb", 400)
    write_pair(corpus, "xc", "xb", 400)
    output = root / "run"
    metrics = train_cli.main([
        "--pairs", PAIRS, "--corpus-dir", str(corpus), "--pair-temperature", "2",
        "--epochs", "7", "--vocab-size", "100", "--hparams-override", MODEL,
        "--batch-tokens", "128", "--beam-size", "1", "--dev-sentences", "10",
        "--output", str(output),
    ])  # fmt: skip
    return output, metrics


def test_each_direction_learns_and_the_run_records_its_pairs(run):
    output, metrics = run
    assert sorted(metrics["pairs"]) == ["xa-xb", "xb-xa", "xc-xb"]
    for pair, scores in metrics["pairs"].items():
        assert scores["bleu"] > BLEU_FLOOR, (pair, scores)
        assert scores["sentences"] == 20
    history = metrics["history"][-1]
    assert history["dev_bleu"] == pytest.approx(
        sum(history[f"dev_bleu_{p}"] for p in metrics["pairs"]) / 3, abs=0.01
    )  # the mean decides the best epoch
    settings = json.loads((output / "run.json").read_text(encoding="utf-8"))["settings"]
    assert settings["pairs"] == ["xa-xb", "xc-xb", "xb-xa"]
    assert settings["pair_temperature"] == 2.0
    # Each direction's held-out rows, untagged, read the way it was trained.
    assert (output / "heldout" / "xb-xa" / "test.xb").read_text().split()[0] in words("xb")


def test_the_tag_routes_the_output_to_the_asked_language(run, monkeypatch, capsys):
    output, _ = run
    sources = pathlib.Path(output / "heldout" / "xa-xb" / "test.xa").read_text()
    status, out, err = in_process(
        translate_cli, monkeypatch, capsys, "--model", output, "--target-lang", "xb",
        "--beam-size", "1", stdin=sources,
    )  # fmt: skip
    assert status == 0, err
    assert [language_of(line) for line in out.splitlines()] == ["xb"] * 20
    assert "trained from xa-xb, xc-xb" in err
    # The SavedModel's `target` signature takes each text's language as an input: one
    # batch of xa sentences into xb and xb sentences into xa.
    signature = tf.saved_model.load(str(output / "export" / "1")).signatures["target"]
    xb = (output / "heldout" / "xb-xa" / "test.xb").read_text().splitlines()[:4]
    out = signature(
        text=tf.constant(sources.splitlines()[:4] + xb),
        target_lang=tf.constant(["xb"] * 4 + ["xa"] * 4),
    )
    assert [language_of(t.decode()) for t in out["translation"].numpy()] == ["xb"] * 4 + ["xa"] * 4
    # xc was never a target: zero-shot, said so; a language of none of the directions is refused.
    notices = []
    assert targets.target_language([str(output)], "xc", notices.append) == "xc"
    assert "zero-shot" in notices[0]


def test_evaluate_scores_a_direction_and_refuses_an_unknown_target(run, monkeypatch, capsys):
    output, metrics = run
    heldout = output / "heldout" / "xb-xa"
    args = ("--model", output, "--src", heldout / "test.xb", "--ref", heldout / "test.xa",
            "--beam-size", "1")  # fmt: skip
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, *args, "--target-lang", "xa")
    assert status == 0, err
    assert json.loads(out)["bleu"] == metrics["pairs"]["xb-xa"]["bleu"]
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, *args)
    assert status != 0 and "without --target-lang" in err and "xa, xb, xc" in err
    status, _, err = in_process(evaluate_cli, monkeypatch, capsys, *args, "--target-lang", "de")
    assert status != 0 and "--target-lang='de'" in err


def test_a_litert_file_translates_one_direction_as_the_target_signature(run, tmp_path):
    """`tfblocks-export litert --target-lang`: each direction's file translates as the
    SavedModel's `target` signature into that language, and records it; a run of several
    directions without the flag is refused before anything is written."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar

    from tfblocks.serving.litert import file_metadata

    output, _ = run
    heldout = output / "heldout"
    sources = [*(heldout / "xa-xb" / "test.xa").read_text().splitlines()[:5],
               *(heldout / "xb-xa" / "test.xb").read_text().splitlines()[:5], ""]  # fmt: skip
    signature = tf.saved_model.load(str(output / "export" / "1")).signatures["target"]
    argv = ["litert", "--model", str(output), "--beam-size", "1"]  # the run's search: greedy
    with pytest.raises(ValueError, match="without --target-lang"):
        export_cli.main([*argv, "--output", str(tmp_path / "none.tflite")])
    assert list(tmp_path.iterdir()) == []
    for language, trained in (("xb", slice(0, 5)), ("xa", slice(5, 10))):
        path = export_cli.main([*argv, "--output", str(tmp_path / f"{language}.tflite"),
                                "--target-lang", language])  # fmt: skip
        assert file_metadata(path) == {"target_lang": language}
        interpreter = InterpreterWithCustomOps(
            model_path=path, custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
        )
        out = interpreter.get_signature_runner()(text=np.array(sources, object))
        got = [t.decode() for t in out["translation"]]
        want = signature(text=tf.constant(sources), target_lang=tf.constant([language] * 11))
        assert got == [t.decode() for t in want["translation"].numpy()]
        assert [language_of(t) for t in got[trained]] == [language] * 5  # a trained direction
        assert got[-1] == ""


def test_ctranslate2_prefixes_and_constraints_follow_the_target_lang(
    run, tmp_path, monkeypatch, capsys
):
    """A CTranslate2 export away from its run folder still needs `--target-lang` (its
    vocabulary's tags tell the directions); `--target-prefix` and `--constraints` with
    `--target-lang` keep the asked language."""
    output, _ = run
    sources = (output / "heldout" / "xa-xb" / "test.xa").read_text().splitlines()[:4]
    stdin = "".join(line + "\n" for line in sources)
    xb = words("xb")
    prefix = tmp_path / "prefix.xb"
    prefix.write_text(f"{xb[0]}\n" * 4, encoding="utf-8")
    phrases = tmp_path / "phrases.xb"
    phrases.write_text(f"{xb[1]}\n" * 4, encoding="utf-8")
    for flags, check in (
        (("--target-prefix", prefix), lambda line: line.split()[0] == xb[0]),
        (("--constraints", phrases), lambda line: xb[1] in line.split()),
    ):
        status, out, err = in_process(
            translate_cli, monkeypatch, capsys, "--model", output, "--target-lang", "xb",
            "--beam-size", "2", *flags, stdin=stdin,
        )  # fmt: skip
        assert status == 0, err[-2000:]
        assert [language_of(line) for line in out.splitlines()] == ["xb"] * 4
        assert all(check(line) for line in out.splitlines()), out
    pytest.importorskip("ctranslate2")
    exported = export_cli.main(["ctranslate2", "--model", str(output),
                                "--output", str(tmp_path / "ct2")])  # fmt: skip
    args = ("--model", exported, "--engine", "ctranslate2", "--beam-size", "1")
    status, _, err = in_process(translate_cli, monkeypatch, capsys, *args, stdin=stdin)
    assert status != 0 and "without --target-lang" in err and "xa, xb, xc" in err
    status, out, err = in_process(
        translate_cli, monkeypatch, capsys, *args, "--target-lang", "xb", stdin=stdin
    )
    assert status == 0, err[-2000:]
    assert [language_of(line) for line in out.splitlines()] == ["xb"] * 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--pairs", "de-en"), "--pairs='de-en' without --corpus-dir"),
        (("--pairs", "de-en,de-en", "--corpus-dir", "c"), "--pairs='de-en,de-en'"),
        (("--pairs", "de-en", "--corpus-dir", "c", "--separate-vocab"), "not with --separate"),
        (("--pairs", "de-en", "--corpus-dir", "c", "--pair-temperature", "0"), "temperature=0"),
        (("--pair-temperature", "5"), "--pair-temperature=5.0 without --pairs"),
    ],
)
def test_pairs_options_are_refused_naming_the_flag(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        train_cli.check_arguments(train_cli.parse_args(list(args)))


def test_target_language_follows_the_run_folder(tmp_path):
    def run_folder(name, settings):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
        return str(folder)

    multi = run_folder("multi", {"pairs": ["de-en", "fr-en", "en-de"]})
    notices = []
    assert targets.target_language([multi], "de", notices.append) == "de"
    assert targets.target_language([multi], "fr", notices.append) == "fr"
    assert "trained from en-de" in notices[0] and "zero-shot (no trained" in notices[1]
    for asked, message in ((None, "without --target-lang"), ("ja", "(de, en, fr;")):
        with pytest.raises(ValueError, match=re.escape(message)):
            targets.target_language([multi], asked, notices.append)
    single = run_folder("single", {"source_lang": "de", "target_lang": "en"})
    assert targets.target_language([single], "en", notices.append) is None
    with pytest.raises(ValueError, match="a de->en run"):
        targets.target_language([single], "fr", notices.append)
    # A model without a run folder is tagged as asked, and that is said.
    assert targets.target_language([str(tmp_path)], "fr", notices.append) == "fr"
    assert "<2fr>" in notices[-1]
    assert targets.tag_lines(["a", " "], "fr") == ["<2fr> a", " "]


def test_target_language_reads_the_tags_of_a_model_away_from_its_run(tmp_path):
    """A CTranslate2 export (or preset) of a run of several directions written elsewhere:
    no run folder records its directions, its vocabulary's tags do."""
    from tfblocks.text import train_tokenizer

    tokenizer = train_tokenizer(
        ["Guten Morgen", "Good morning"] * 10, vocab_size=30,
        trainer_options={"user_defined_symbols": ["<2de>", "<2en>"]},
    )  # fmt: skip
    tokenizer.save(tmp_path / "source.model")
    notices = []
    for asked, message in ((None, "without --target-lang"), ("fr", "--target-lang='fr'")):
        with pytest.raises(ValueError, match=r"\(de, en;.*" + re.escape(message)):
            targets.target_language([str(tmp_path)], asked, notices.append)
    assert targets.target_language([str(tmp_path)], "en", notices.append) == "en"
    assert "<2en>" in notices[-1]
