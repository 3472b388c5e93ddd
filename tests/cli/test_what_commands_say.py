"""The console scripts say what they do: each option's default in `--help`, a first line
before TensorFlow loads, and progress lines that a log keeps apart (a terminal gets one
line rewritten in place). No test here loads a model or trains."""

import argparse
import importlib
import io
import re
import textwrap

from tests.scripts import console_scripts, run_quietly
from tfblocks.translation.progress import count_progress


class _Parsed(BaseException):  # not an Exception: `run_command` lets it through
    pass


def _parsers(monkeypatch):
    """`{"NAME [SUBCOMMAND]": parser}` of every console script and subcommand, each built
    by the script's own entry point, which stops where it would parse its arguments."""

    def stop(parser, *args, **kwargs):
        raise _Parsed(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    monkeypatch.delenv("TFBLOCKS_SERVE_API_KEY", raising=False)  # --api-key's default
    found = {}
    for name, (module, function) in console_scripts().items():
        monkeypatch.setattr("sys.argv", [name])
        try:
            getattr(importlib.import_module(module), function)()
        except _Parsed as parsed:
            found[name] = parsed.args[0]
    for name, parser in list(found.items()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.update({f"{name} {sub}": p for sub, p in action.choices.items()})
    return found


def _spellings(default):
    """How a help text may write `default`: `1000000` as `1000000` or `1,000,000`, `60.0`
    as `60`."""
    spellings = {str(default)}
    if isinstance(default, int) and not isinstance(default, bool):
        spellings.add(f"{default:,}")
    if isinstance(default, float) and default.is_integer():
        spellings.add(str(int(default)))
    return spellings


def missing_default(action, text):
    """Why the help `text` of the option `action` breaks the rule of
    `test_every_option_says_its_default_in_help`, or None."""
    if action.required or isinstance(action, argparse._HelpAction | argparse._VersionAction):
        return None
    if action.nargs == 0 and action.default is False:
        return None
    if "default" not in text:
        return "no default in its help"
    if action.default is None:
        return None
    for spelling in _spellings(action.default):
        value = rf"(?<![\w.]){re.escape(spelling)}(?!\w|\.\d)"
        if re.search(rf"default:? {value}|{value} \((?:the )?default", text):
            return None
    return f"its help does not say its default {action.default!r} by the word default"


def _help_texts(parser):
    """`{--option: help text as --help shows it}` of a parser (`%(default)s` filled in)."""
    formatter = parser._get_formatter()
    return {
        action.option_strings[-1]: (action, formatter._expand_help(action) if action.help else "")
        for action in parser._actions
        if action.option_strings
    }


def test_every_option_says_its_default_in_help(monkeypatch):
    """Every option of every console script and subcommand says its default in its help.

    The rule: an option a command cannot run without (`required`), `--help` and
    `--version` say nothing of a default; nor does a flag that takes no value and is off
    unless given (`store_true`, default False). Every other option says what it is
    without being given, after the word "default":
    - a default value (not None): that value, right after the word (`(default 4096)`,
      `default: 0.6`) or right before it in parentheses (`auto (default)`, `dynamic (the
      default: ...)`); an int may be written `1,000,000`, a whole float as an int;
    - None (the option is off, or something else decides): what happens instead, in
      words (`default: standard input`, `default: the run's`, `default: off`).
    """
    parsers = _parsers(monkeypatch)
    assert set(console_scripts()) <= set(parsers)
    assert {"tfblocks-export ctranslate2", "tfblocks-export litert"} <= set(parsers)
    broken = {
        f"{name} {option}": why
        for name, parser in parsers.items()
        for option, (action, text) in _help_texts(parser).items()
        if (why := missing_default(action, text)) is not None
    }
    assert not broken, broken


def test_the_rule_finds_a_default_that_help_leaves_out():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5, help="total epochs")
    parser.add_argument("--beam", type=int, default=4, help="the beam (default 4)")
    parser.add_argument("--sample", type=int, default=1_000_000, help="(default 1,000,000)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--limit", type=int, default=0, help="0 = all; default 5 others")
    parser.add_argument("--mode", default="auto", help="auto (default) or off")
    parser.add_argument("--input", help="the file (default: standard input)")
    parser.add_argument("--ema", type=float, help="a moving average of the weights")
    parser.add_argument("--fast", action="store_true", help="go fast")
    parser.add_argument("--model", required=True, help="the model")
    texts = _help_texts(parser)
    broken = {option for option, (a, text) in texts.items() if missing_default(a, text)}
    assert broken == {"--epochs", "--limit", "--ema"}


def test_help_shows_the_defaults(monkeypatch):
    parsers = _parsers(monkeypatch)
    train = parsers["tfblocks-train"].format_help()
    for said in ("default 5", "default 4096", "default 1000", "default 4;", "default 0"):
        assert said in " ".join(train.split()), said
    translate = " ".join(parsers["tfblocks-translate"].format_help().split())
    assert "default auto" in translate and "default: off" in translate


# A stand-in `tensorflow` (no TensorFlow is loaded) that says when it is imported; the
# command's `main` says what it did before and after importing it.
FIRST_LINE = """
import sys
sys.path.insert(0, {folder!r})
sys.argv[0] = "/venv/bin/tfblocks-x"
from tfblocks.cli.console import run_command

def main():
    print("arguments parsed", file=sys.stderr)
    import tensorflow
    import tensorflow
    print("done", file=sys.stderr)

run_command("tfblocks-x", main)
print(sorted(type(finder).__name__ for finder in sys.meta_path if "Announce" in repr(finder)))
"""


def test_the_first_line_comes_before_tensorflow_loads(tmp_path):
    (tmp_path / "tensorflow.py").write_text(
        "import sys\nprint('tensorflow imported', file=sys.stderr)\n"
    )
    result = run_quietly(["-c", textwrap.dedent(FIRST_LINE.format(folder=str(tmp_path)))])
    assert result.stderr.splitlines() == [
        "arguments parsed",
        "tfblocks-x: loading TensorFlow...",
        "tensorflow imported",
        "done",
    ]
    assert result.stdout == "[]\n"  # the finder is gone once the command ends


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_rewrites_a_terminal_line_and_writes_whole_lines_elsewhere():
    terminal, log = _Terminal(), io.StringIO()
    for stream in (terminal, log):
        progress = count_progress("lines", stream, every=0)
        for done in (64, 128, 200):
            progress(done, 200)
    assert terminal.getvalue() == "\r64/200 lines\r128/200 lines\r200/200 lines\n"
    written = log.getvalue()
    assert "\r" not in written and written.endswith("\n")
    assert [line.split(" (")[0] for line in written.splitlines()] == [
        "64/200 lines",
        "128/200 lines",
        "200/200 lines",
    ]
    # In a log, at most a line every `every` seconds, with the first and the last.
    log = io.StringIO()
    progress = count_progress("lines", log, every=3600)
    for done in range(1, 101):
        progress(done, 100)
    assert [line.split(" (")[0] for line in log.getvalue().splitlines()] == [
        "1/100 lines",
        "100/100 lines",
    ]


def test_progress_on_a_stream_that_cannot_say_whether_it_is_a_terminal():
    class Closed(io.StringIO):
        def isatty(self):
            raise ValueError("I/O operation on closed file")

    stream = Closed()
    count_progress("lines", stream)(1, 1)  # not a terminal: a whole line
    assert stream.getvalue().startswith("1/1 lines (") and stream.getvalue().endswith("\n")
