"""Every ```python block of README.md and docs/*.md runs as written, and
docs/command-line.md describes every option of every console script.

The blocks of one page run in order in one namespace, as a reader runs them, so a block
may continue the one before it (the page says so). A comment after a `print(...)` is
what that call prints, and the test checks it. Shell commands and anything that cannot run
here are in ```bash or ```text blocks, which are not run. Relative links between the
pages must point at files that exist.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import console_scripts

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def _name(page):
    return str(page.relative_to(ROOT))


def _blocks(page):
    return BLOCK.findall(page.read_text(encoding="utf-8"))


CASES = [(page, index) for page in PAGES for index in range(len(_blocks(page)))]
_namespaces = {}  # page -> (namespace, blocks run so far)


def test_the_pages_exist_and_have_blocks():
    names = {_name(page) for page in PAGES}
    for topic in (
        "layers",
        "training",
        "distributed",
        "decoding-and-serving",
        "command-line",
        "run-folders",
        "performance",
    ):
        assert f"docs/{topic}.md" in names
    assert len(_blocks(ROOT / "README.md")) >= 3


def _anchors(page):
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, - for spaces."""
    headings = re.findall(r"^#+ (.*)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_resolve(page):
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = page.parent / target if target else page
        assert path.exists(), f"{_name(page)} links to a missing {target}"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{_name(page)} links to a missing #{anchor}"


def _exec(page, index, namespace):
    block = _blocks(page)[index]
    exec(compile(block, f"{_name(page)} block {index}", "exec"), namespace)
    _namespaces[page] = (namespace, index + 1)


def _namespace(page, upto):
    """The page's namespace after its blocks before `upto` ran (running those not run yet;
    from the start when a later block ran already)."""
    namespace, done = _namespaces.get(page, (None, 0))
    if namespace is None or done > upto:
        namespace, done = {"__name__": "__docs__"}, 0
    for index in range(done, upto):
        _exec(page, index, namespace)  # its output is checked by its own test
    return namespace


@pytest.mark.parametrize(("page", "index"), CASES, ids=[f"{_name(p)}-{i}" for p, i in CASES])
def test_block_runs(page, index, capsys):
    namespace = _namespace(page, index)
    capsys.readouterr()
    _exec(page, index, namespace)
    printed = capsys.readouterr().out
    for line in _blocks(page)[index].splitlines():
        if "print(" in line and "# " in line:
            shown = line.split("# ", 1)[1].split(" — ")[0].strip()
            assert shown in printed, (shown, printed)


# Prints `{NAME: {"options": [--option, ...], "commands": [...]}}` for the console scripts
# given as JSON `{NAME: [module, function]}` (options of its subcommands too; commands: its
# subcommands and the choices of its positional arguments, `ctranslate2`, `marian`), then
# the modules of TensorFlow and Keras it loaded: the program is named as a console script
# (tfblocks/_lazy.py), and each entry point runs up to its parser's `parse_args`.
OPTIONS = """
import argparse, importlib, json, sys
sys.argv[0] = "tfblocks-docs-check"

class Parsing(BaseException):
    pass

def stop(parser, *args, **kwargs):
    raise Parsing(parser)

argparse.ArgumentParser.parse_args = stop

def entries(parser, found):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found["commands"] += list(action.choices)
            for subparser in action.choices.values():
                entries(subparser, found)
        elif not action.option_strings and action.choices:
            found["commands"] += list(action.choices)
        found["options"] += [s for s in action.option_strings if s.startswith("--")]
    return found

found = {}
for name, (module, function) in json.loads(sys.argv[1]).items():
    try:
        getattr(importlib.import_module(module), function)()
    except Parsing as parsing:
        found[name] = entries(parsing.args[0], {"options": [], "commands": []})
print(json.dumps(found))
print(sorted({"tensorflow", "keras"} & set(sys.modules)))
"""


def _sections(page):
    """`{heading: text}` of a page's `## ` sections; "" is the text before the first."""
    parts = re.split(r"^## (.*)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}


def test_every_console_option_is_described():
    # Each long option of a command's parser and its subcommands appears in that
    # command's section of docs/command-line.md, quoted (`--x`, `--x VALUE`, ...), and so
    # does each subcommand or positional choice (`marian DIR`); the options every command
    # has (--help, --verbose) may instead be described once, before the first section,
    # where an option is one of every command.
    scripts = console_scripts()
    result = subprocess.run(
        [sys.executable, "-c", OPTIONS, json.dumps(scripts)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found, loaded = result.stdout.splitlines()
    found = json.loads(found)
    assert loaded == "[]", result.stdout  # the parsers are built without TensorFlow
    assert set(found) == set(scripts), result.stderr[-3000:]
    sections = _sections(ROOT / "docs" / "command-line.md")
    common = set(re.findall(r"`(--[\w-]+)", sections[""]))
    missing = []
    for name, entries in found.items():
        assert common <= set(entries["options"]), (name, common - set(entries["options"]))
        section = sections.get(f"`{name}`")
        assert section is not None, f"docs/command-line.md has no section ## `{name}`"
        assert entries["options"], name  # the parser was found
        for command in entries["commands"]:
            if not re.search(rf"`{re.escape(command)}[`\s]", section):
                missing.append(f"{name} {command}")
        for option in entries["options"]:
            quoted = rf"`{re.escape(option)}(?![\w-])"
            if not re.search(quoted, section) and not re.search(quoted, sections[""]):
                missing.append(f"{name} {option}")
    assert not missing, f"not in docs/command-line.md: {missing}"


# A dotted name in backquotes (`tfblocks.serving.Translator`) or imported by a line of a
# page (`from tfblocks.decoding import BeamSearch, Greedy`), in prose or in a block.
DOTTED = re.compile(r"`(tfblocks(?:\.\w+)+)")
FROM_IMPORT = re.compile(r"from (tfblocks(?:\.\w+)*) import (\([^)]*\)|[^\n#`]*)")


def documented_names(text):
    """The `tfblocks...` names that `text` (Markdown) names or imports."""
    names = set(DOTTED.findall(text))
    for module, imported in FROM_IMPORT.findall(text):
        for item in imported.strip("()").split(","):
            name = item.split(" as ")[0].strip()
            if name.isidentifier():
                names.add(f"{module}.{name}")
    return names


def resolves(name):
    """Whether `name` is a module, or an attribute of the longest module it starts with."""
    import importlib

    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_name_the_pages_import_is_there():
    names = {name: _name(page) for page in PAGES for name in documented_names(page.read_text())}
    assert len(names) > 40  # the pages name the API: the reading found it
    missing = [f"{name} ({page})" for name, page in sorted(names.items()) if not resolves(name)]
    assert not missing, f"named in the docs but not importable: {missing}"


def test_the_name_reading_sees_imports_and_missing_names():
    text = (
        "`tfblocks.serving.Translator` and\nfrom tfblocks.decoding import (Greedy, BeamSearch as B)"
    )
    assert documented_names(text) == {
        "tfblocks.serving.Translator", "tfblocks.decoding.Greedy", "tfblocks.decoding.BeamSearch"
    }  # fmt: skip
    assert resolves("tfblocks.serving.Translator") and not resolves("tfblocks.serving.Nothing")
