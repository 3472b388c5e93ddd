"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one page run in order in one namespace, as a reader runs them, so a block
may continue the one before it (the page says so). A comment after a `print(...)` is
what that call prints, and the test checks it. Shell commands and anything that cannot run
here are in ```bash or ```text blocks, which are not run. Relative links between the
pages must point at files that exist.
"""

import re
from pathlib import Path

import pytest

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
