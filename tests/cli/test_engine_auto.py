"""`--engine auto` (`tfblocks.translation.engine_choice`): `tfblocks-export ctranslate2
--output RUN/ctranslate2` checks the export on the run's held-out test, and
`tfblocks-translate` / `tfblocks-evaluate` take CTranslate2 only for a decoding that the
check found translating every line the same, with no option of TensorFlow's only, and
say the choice in their first line.

The run is a tiny untrained model of the demo's kind (a Japanese -> English phrasebook
tokenizer, `max_length` 8) saved as a run folder's `model/`, with a held-out test and a
`metrics.json` digest, as `tfblocks-train` leaves them (no training)."""

import json

import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import export as export_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.models import save_preset
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import engine_choice

pytest.importorskip("ctranslate2")  # the optional extra: `make test` installs it
pytestmark = pytest.mark.heavy  # exports and translates with both engines

MAX_LENGTH = 8
TEST_LINES = 12


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`(run, record)`: the run folder, exported with `tfblocks-export ctranslate2` into
    its `ctranslate2/`, and the check's record."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size, max_length=MAX_LENGTH)
    run = tmp_path_factory.mktemp("run")
    save_preset(tiny_model(hp, seed=0), tokenizer, run / "model", hp)
    settings = {"source_lang": "ja", "target_lang": "en", "beam_size": 2}
    (run / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
    (run / "metrics.json").write_text(json.dumps({"final_digest": "digest-1"}))
    (run / "heldout").mkdir()
    test = "".join(f"{ja}\n" for ja, _ in pairs[:TEST_LINES])
    (run / "heldout" / "test.ja").write_text(test, encoding="utf-8")
    export_cli.main(["ctranslate2", "--model", str(run), "--output", str(run / "ctranslate2")])
    record = json.loads((run / "ctranslate2" / engine_choice.CHECK_FILE).read_text())
    return run, record


def _first_line(err, doing="translating"):
    return next(line for line in err.splitlines() if line.startswith(doing))


def test_the_export_records_its_check_on_the_held_out_test(run):
    run, record = run
    assert record["format"] == engine_choice.CHECK_FORMAT
    assert record["final_digest"] == "digest-1" and record["lines"] == TEST_LINES
    assert record["test"] == "heldout/test.ja" and record["alpha"] == 0.6
    assert set(record["decodings"]) == {"beam 2", "greedy"}  # the run's beam, and greedy
    assert all(0 <= d["same"] <= TEST_LINES for d in record["decodings"].values())
    # Greedy search gives CTranslate2's ids (the export and max_length are the run's).
    assert record["decodings"]["greedy"]["same"] == TEST_LINES, record


def test_an_export_elsewhere_is_not_checked(run, tmp_path, capsys):
    run, _ = run
    export_cli.main(["ctranslate2", "--model", str(run), "--output", str(tmp_path / "ct2")])
    assert not (tmp_path / "ct2" / engine_choice.CHECK_FILE).exists()
    assert "checking" not in capsys.readouterr().err


def test_auto_takes_ctranslate2_only_where_the_check_agreed(run, tmp_path, monkeypatch, capsys):
    run, record = run
    source = tmp_path / "in.ja"
    source.write_text("今日のランチはカレーだ。\n私は学生です。\n", encoding="utf-8")
    outputs = {}
    for engine in ("auto", "tensorflow", "ctranslate2"):
        given = ("--engine", engine) if engine != "auto" else ()
        status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                      "--input", source, "--beam-size", "1", *given)  # fmt: skip
        assert status == 0, err[-3000:]
        outputs[engine] = (out, _first_line(err))
    out, line = outputs["auto"]
    assert line.startswith(f"translating 2 lines with CTranslate2 model {run / 'ctranslate2'}")
    assert line.endswith(
        f"--engine auto: ctranslate2: greedy translated the {TEST_LINES} checked test lines "
        "as TensorFlow does"
    ), line
    assert out == outputs["tensorflow"][0] == outputs["ctranslate2"][0]
    # The run's own beam: CTranslate2 only if every checked line came out the same.
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                  "--input", source)  # fmt: skip
    assert status == 0, err[-3000:]
    same = record["decodings"]["beam 2"]["same"]
    if same == TEST_LINES:
        assert "--engine auto: ctranslate2: beam 2 translated" in _first_line(err)
    else:
        assert _first_line(err).endswith(
            f"--engine auto: tensorflow: with beam 2, CTranslate2 translated "
            f"{TEST_LINES - same} of the {TEST_LINES} checked test lines otherwise"
        ), err
    # tfblocks-evaluate chooses the same way.
    reference = tmp_path / "ref.en"
    reference.write_text(outputs["tensorflow"][0], encoding="utf-8")
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run, "--src",
                                  source, "--ref", reference, "--beam-size", "1")  # fmt: skip
    assert status == 0 and json.loads(out)["exact_match"] == 1.0, err[-3000:]
    assert "evaluating CTranslate2 model" in err and "--engine auto: ctranslate2" in err, err


@pytest.mark.parametrize(
    "args, reason",
    [
        (("--beam-size", "1", "--n-best", "1"), "tensorflow: --n-best (TensorFlow's only)"),
        (("--beam-size", "1", "--xla", "off"), "tensorflow: --xla off (TensorFlow's only)"),
        (("--beam-size", "1", "--max-length", "6"), "tensorflow: --max-length (TensorFlow's"),
        (("--beam-size", "1", "--min-length", "2"), "tensorflow: --min-length (TensorFlow's"),
        (("--beam-size", "3",), "tensorflow: beam 3 was not checked against CTranslate2"),
        (("--beam-size", "2", "--alpha", "1.0"), "tensorflow: beam 2, alpha 1.0 was not checked"),
    ],
)  # fmt: skip
def test_what_the_check_did_not_cover_stays_on_tensorflow(run, args, reason, monkeypatch,
                                                          capsys):  # fmt: skip
    run, _ = run
    status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, *args,
                                stdin="私は学生です。\n")  # fmt: skip
    assert status == 0, err[-3000:]
    line = _first_line(err)
    assert (
        line.startswith("translating 1 lines with model ") and f"; --engine auto: {reason}" in line
    )


def test_scores_stay_on_tensorflow(run, tmp_path, monkeypatch, capsys):
    # CTranslate2's score_batch normalizes over <pad> and <s> too: not Translator.score.
    run, _ = run
    (tmp_path / "t.en").write_text("I am a student.\n", encoding="utf-8")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, "--score",
                                  tmp_path / "t.en", stdin="私は学生です。\n")  # fmt: skip
    assert status == 0 and float(out) < 0, err[-3000:]
    assert _first_line(err, "scoring").startswith("scoring 1 lines with model "), err


def test_each_reason_to_keep_tensorflow(run, tmp_path, monkeypatch):
    run, _ = run
    choose = engine_choice.choose_engine
    assert choose(str(run), 1, 0.6)[0] == "ctranslate2"
    assert choose([str(run), str(run)], 1, 0.6) == (
        "tensorflow", "tensorflow: an ensemble of several --model"
    )  # fmt: skip
    assert choose(str(run / "ctranslate2"), 4, 0.6, tensorflow_only=("--n-best",)) == (
        "ctranslate2", "ctranslate2: --model is a CTranslate2 model"
    )  # fmt: skip
    assert choose(str(tmp_path), 1, 0.6)[1] == "tensorflow: the run has no ctranslate2/ export"
    # A run trained further after its export: its digest changed.
    (run / "metrics.json").write_text(json.dumps({"final_digest": "digest-2"}))
    try:
        assert "made from an earlier model of the run" in choose(str(run), 1, 0.6)[1]
    finally:
        (run / "metrics.json").write_text(json.dumps({"final_digest": "digest-1"}))
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "ctranslate2" else real(name)
    )
    assert choose(str(run), 1, 0.6)[1] == "tensorflow: ctranslate2 is not installed"
    monkeypatch.undo()
    # An export without a check (tfblocks-import --ctranslate2, or one made elsewhere and
    # moved in), or a check file not of tfblocks: no choice of CTranslate2.
    check = run / "ctranslate2" / engine_choice.CHECK_FILE
    kept = check.read_text()
    try:
        for text in (None, "{}", "[1]", "not json"):
            check.unlink(missing_ok=True)
            if text is not None:
                check.write_text(text)
            engine, why = choose(str(run), 1, 0.6)
            assert engine == "tensorflow" and "has no check against TensorFlow" in why, text
    finally:
        check.write_text(kept)


def test_the_controls_reach_both_engines_and_are_refused_where_they_cannot_apply(
    run, tmp_path, monkeypatch, capsys
):
    run, _ = run
    source = tmp_path / "in.ja"
    source.write_text("今日のランチはカレーだ。\n私は学生です。\n", encoding="utf-8")
    controls = ("--min-length", "3", "--disallow-unk", "--beam-size", "1", "--input", source)
    saved = tmp_path / "export"  # looks like a SavedModel: refused before it loads
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    outputs = []
    for engine in ("tensorflow", "ctranslate2"):
        status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                      "--engine", engine, *controls)  # fmt: skip
        assert status == 0, err[-3000:]
        assert "min_length 3, no <unk>)" in _first_line(err), err
        outputs.append(out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 2
    for args, words in [
        (("--engine", "ctranslate2", "--max-length-ratio", "1.5"),
         "--max-length-ratio=1.5: CTranslate2 has no maximum length relative to each source"),
        (("--model", saved, "--min-length", "2"), "were fixed at export; drop --min-length or"),
        (("--min-length", "-1"), "--min-length must be 0 or more, got --min-length=-1"),
        (("--max-length-ratio", "nan"), "--max-length-ratio must be a finite number above 0"),
    ]:  # fmt: skip
        model = () if "--model" in args else ("--model", run)
        status, _, err = in_process(translate_cli, monkeypatch, capsys, *model, *args,
                                    stdin="私は学生です。\n")  # fmt: skip
        assert status == 2 and words in err.splitlines()[-1], err[-2000:]
