"""What each mode of `tfblocks-translate` takes: docs/command-line.md's table of options per
mode, checked against the parsers (an option a mode does not take is refused in one line
naming it, never ignored), `--alpha` told apart from its default, and a target prefix that
leaves no room for EOS refused in one line naming both lengths."""

import os
import re
from pathlib import Path

import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import translate as translate_cli
from tfblocks.models import save_preset
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import engines


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A folder whose `model/` is the preset of a tiny untrained model (`max_length` 6)."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    hp = tiny_hparams(vocab_size=tokenizer.vocabulary_size, max_length=6)
    folder = tmp_path_factory.mktemp("run")
    save_preset(tiny_model(hp, seed=0), tokenizer, folder / "model", hp)
    return folder


def _one_line(status, err, command=translate_cli):
    """The last line of `err`, the one error line of a refused command line."""
    assert status == 2, err
    line = err.splitlines()[-1]
    name = command.__name__.rsplit(".", 1)[1]
    assert line.startswith(f"tfblocks-{name}: error: ") and "Traceback" not in err, err
    return line


def test_a_target_prefix_that_leaves_no_room_for_eos_is_refused(run, tmp_path, monkeypatch, capsys):
    # The run's max_length is 6: was cut to 5 subwords, the last word replaced silently.
    source, prefixes = tmp_path / "in.txt", tmp_path / "prefix.txt"
    source.write_text("今日のランチはカレーだ。\n私は学生です。\n", encoding="utf-8")
    prefixes.write_text("Today\nToday's lunch is curry with rice and more\n", encoding="utf-8")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run,
                                  "--input", source, "--target-prefix", prefixes)  # fmt: skip
    line = _one_line(status, err)
    assert "`prefix` holds" in line and "but max_length=6 leaves room for at most 5" in line, line
    assert out == "" and "Graph execution" not in line and "{{node" not in line, line


DOC = Path(__file__).resolve().parents[2] / "docs" / "command-line.md"


def _table():
    """`(modes, rows)` of docs/command-line.md's table of options by mode: each mode its
    heading's command-line words, each row `(option words, {mode heading: cell})`."""
    text = DOC.read_text(encoding="utf-8").split("### Options by mode", 1)[1]
    lines = [line for line in text.split("\n\n", 3)[2].splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    header, body = cells[0][1:], cells[2:]
    words = lambda cell: re.search(r"`([^`]+)`", cell).group(1).split()  # noqa: E731
    modes = {heading: words(heading) for heading in header}
    rows = [(words(row[0]), dict(zip(header, row[1:], strict=True))) for row in body]
    return modes, rows


MODES, ROWS = _table()
CASES = [(mode, option, cell) for option, cells in ROWS for mode, cell in cells.items()]


@pytest.fixture
def files(run, tmp_path):
    """The table's placeholders as paths: one-line files, an output to write, and a folder
    that looks like a SavedModel (refusals come before it loads)."""
    saved = tmp_path / "export"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    paths = {"SAVEDMODEL": saved, "OUT": tmp_path / "out.txt"}
    for name, line in (("INPUT", "今日のランチはカレーだ。"), ("TARGETS", "Today's lunch."),
                       ("PREFIXES", "Today"), ("PHRASES", "lunch")):  # fmt: skip
        paths[name] = tmp_path / f"{name.lower()}.txt"
        paths[name].write_text(line + "\n", encoding="utf-8")
    return {name: str(path) for name, path in paths.items()}


def _argv(run, files, mode, option):
    """The command line of `option` in `mode` (the table's words, placeholders filled)."""
    words = [*MODES[mode], *option]
    model = [] if "--model" in words else ["--model", str(run)]
    return [files.get(word, word) for word in [*model, "--input", "INPUT", *words]]


def test_the_table_covers_every_mode_and_every_option_of_the_parser(capsys):
    assert len(MODES) == 9 and len(ROWS) >= 15 and {c for *_, c in CASES} == {"yes", "no", "—"}
    with pytest.raises(SystemExit):
        translate_cli.parse_args(["--help"])
    options = r"^\s+(?:-\w, )?(--[a-z][a-z-]+)"  # the lines of --help that start an option
    flags = set(re.findall(options, capsys.readouterr().out, re.MULTILINE))
    named = {words[0] for words in MODES.values()} | {option[0] for option, _ in ROWS}
    everywhere = {"--help", "--model", "--input", "--target-lang", "--source-lang",
                  "--japanese-spaces", "--verbose", "--overwrite", "--engine"}  # fmt: skip
    assert flags - everywhere - named == set()


@pytest.mark.parametrize(
    ("mode", "option", "cell"),
    CASES,
    ids=[f"{' '.join(MODES[m])} {' '.join(o)}" for m, o, _ in CASES],
)
def test_each_mode_takes_or_refuses_each_option_as_the_table_says(
    run,
    files,
    monkeypatch,
    capsys,
    mode,
    option,
    cell,
):
    argv = _argv(run, files, mode, option)
    if cell == "yes":  # the parser takes it (a model may still lack what it needs)
        translate_cli.parse_args(argv)
    elif cell == "no":  # refused in one line naming it, before any work
        status, out, err = in_process(translate_cli, monkeypatch, capsys, *argv)
        line = _one_line(status, err)
        assert option[0] in line, (argv, line)
        assert out == "" and not os.path.exists(files["OUT"])


@pytest.mark.parametrize("command", [translate_cli, evaluate_cli])
def test_alpha_is_refused_where_no_beam_is_searched_and_told_apart_from_its_default(
    run, files, monkeypatch, capsys, command
):
    # Was: --alpha (default 0.6) was ignored by sampling and greedy search, silently.
    inputs = ["--input", files["INPUT"]]
    if command is evaluate_cli:
        inputs = ["--src", files["INPUT"], "--ref", files["TARGETS"]]
    for extra in (["--sampling-temperature", "2"], ["--beam-size", "1"]):
        argv = ["--model", run, *inputs, *extra, "--alpha", "0.6"]  # even the default value
        status, _, err = in_process(command, monkeypatch, capsys, *argv)
        assert "--alpha=0.6 does not apply" in _one_line(status, err, command), err
    if command is translate_cli:  # a constrained beam search of one takes a length penalty
        _, what = engines.load_translate(run, 1, 0.6, constraints=True, notice=print)
        assert "beam 1" in what
    args = command.parse_args(["--model", str(run), *inputs])
    assert args.alpha is None and args.batch_size is None  # the defaults: 0.6 and 64


@pytest.mark.parametrize("command", [translate_cli, evaluate_cli])
def test_overwrite_without_an_output_file_is_refused(monkeypatch, capsys, command):
    inputs = ["--src", "a", "--ref", "b"] if command is evaluate_cli else []
    status, _, err = in_process(command, monkeypatch, capsys, "--model", "m", *inputs,
                                "--overwrite")  # fmt: skip
    assert "--overwrite replaces an existing --output file" in _one_line(status, err, command)
