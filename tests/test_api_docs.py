"""The API reference: docstrings of the public names, and the `make docs` build (pdoc).

Rules for the names in `tfblocks.__all__` (read at collection time, so names added or
removed there are checked without touching this file):

- a class or function needs a docstring with at least one doctest example (`>>>`), and
  must be defined inside `tfblocks`, so that pytest's `--doctest-modules` (pyproject.toml)
  actually runs that example;
- a module (`text`) needs a module docstring, and so do the public subpackages, whose
  own classes and functions need a docstring (examples are asked of `tfblocks.__all__`);
- a constant (an int such as `BOS_ID`, a str such as `__version__`) cannot carry a
  docstring of its own, so it must instead be named in the docstring of some `tfblocks`
  module, where a reader of the reference finds it (`__version__` is exempt);
- anything else (an instance of some class, a dict) fails until it is given a rule here.
"""

import doctest
import importlib
import inspect
import re
import shlex
import sys
import types
from pathlib import Path

import pytest

import tfblocks

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_SUBPACKAGES = (
    "tfblocks.layers",
    "tfblocks.models",
    "tfblocks.training",
    "tfblocks.text",
    "tfblocks.decoding",
    "tfblocks.serving",
)
CONSTANT_TYPES = (bool, int, float, str, bytes)
EXEMPT_CONSTANTS = {"__version__"}


def _examples(obj):
    """The doctest examples in `obj`'s own docstring (a class's `__doc__` is never inherited)."""
    return doctest.DocTestParser().get_examples(obj.__doc__ or "")


def _module_docstrings():
    """Docstrings of every loaded `tfblocks` module, joined."""
    return "\n".join(
        module.__doc__ or ""
        for name, module in sorted(sys.modules.items())
        if (name == "tfblocks" or name.startswith("tfblocks.")) and module is not None
    )


@pytest.mark.parametrize("name", tfblocks.__all__)
def test_public_name_is_documented(name):
    obj = getattr(tfblocks, name)
    if isinstance(obj, types.ModuleType):
        assert (obj.__doc__ or "").strip(), f"module tfblocks.{name} has no docstring"
    elif inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__module__.startswith("tfblocks"), (
            f"tfblocks.{name} is defined in {obj.__module__}, where --doctest-modules "
            "does not run its examples"
        )
        assert _examples(obj), (
            f"tfblocks.{name} ({obj.__module__}) needs a runnable `>>>` example in its docstring"
        )
    elif isinstance(obj, CONSTANT_TYPES):
        if name in EXEMPT_CONSTANTS:
            return
        assert re.search(rf"\b{re.escape(name)}\b", _module_docstrings()), (
            f"the constant tfblocks.{name} = {obj!r} is named in no tfblocks module docstring"
        )
    else:
        pytest.fail(f"tfblocks.{name} is a {type(obj).__name__}; give it a rule in this test")


@pytest.mark.parametrize("module_name", PUBLIC_SUBPACKAGES)
def test_public_subpackage_is_documented(module_name):
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), f"{module_name} has no module docstring"
    undocumented = [
        name
        for name in getattr(module, "__all__", [])
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not (inspect.getdoc(obj) or "").strip()
    ]
    assert not undocumented, f"{module_name}: no docstring on {undocumented}"


def _makefile_variable(name):
    match = re.search(rf"^{name} := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"the Makefile defines no {name}"
    return shlex.split(match.group(1))


def test_make_docs_builds_the_reference(tmp_path):
    """What `make docs` runs (same modules, same flags), through pdoc's Python API."""
    import pdoc
    import pdoc.__main__
    import pdoc.render

    modules = _makefile_variable("API_MODULES")
    opts = pdoc.__main__.parser.parse_args(
        [*_makefile_variable("PDOC_FLAGS"), "--output-directory", str(tmp_path), *modules]
    )
    pdoc.render.configure(docformat=opts.docformat, show_source=opts.show_source)
    try:
        pdoc.pdoc(*opts.modules, output_directory=tmp_path)
    finally:
        pdoc.render.configure()  # pdoc's defaults, for anything else in this process

    assert (tmp_path / "index.html").is_file()
    page = (tmp_path / "tfblocks.html").read_text(encoding="utf-8")
    assert 'id="TransformerBlock"' in page  # a documented class, not just a passing mention
    assert '<span class="gp">&gt;&gt;&gt; </span>' in page  # examples render as code
    for module_name in PUBLIC_SUBPACKAGES:
        path = tmp_path / (module_name.replace(".", "/") + ".html")
        assert path.is_file(), f"no page for {module_name} (is it in the Makefile's API_MODULES?)"
