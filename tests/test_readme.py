"""Every ```python snippet in README.md runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 5


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index, capsys):
    exec(compile(SNIPPETS[index], f"README.md snippet {index}", "exec"), {})
    printed = capsys.readouterr().out
    # The numbers the README shows in comments are the ones the snippet prints.
    for line in SNIPPETS[index].splitlines():
        if "print(" in line and "# " in line:
            shown = line.split("# ", 1)[1].split(" — ")[0].strip()
            assert shown in printed, (shown, printed)
