"""Public names of a package, imported at once or, while a console script starts, on first use.

A package's `__init__.py` lists its public names once, each under its module, and gets
its module `__getattr__`, `__dir__` (PEP 562) and `__all__` from `public_names`:

* As a library, the package imports every public name when it is imported, as a plain
  `from ... import ...` would: Keras then knows tfblocks' registered classes (what
  `keras.saving.load_model` needs without `custom_objects`).
* In a `tfblocks-*` console script (`console_script()`: the program's name), each name
  is imported when it is first used, so that the command parses its arguments first
  and answers `--help` or a bad argument without loading TensorFlow.

It must not import TensorFlow.
"""

import importlib
import os
import sys
import warnings


def console_script(argv=None):
    """Whether this program is one of tfblocks' console scripts (`tfblocks-train`, ...).

    >>> console_script(["/venv/bin/tfblocks-train", "--help"]), console_script(["app.py"])
    (True, False)
    """
    argv = sys.argv if argv is None else argv
    name = os.path.basename(argv[0]) if argv else ""
    return name == "tfblocks" or name.startswith("tfblocks-")


def public_names(package, homes, deprecated=None, also=()):
    """The `(__getattr__, __dir__, __all__)` of the package `package` (being imported),
    whose public names `homes` gives as `{module: [name, ...]}`: the one list of them.

    A name is the attribute of that module, or the module itself when it is the
    package's submodule of that name (`{"tfblocks.layers": ["layers"]}`).

    Args:
        package: the package's `__name__`.
        homes: where each public name is defined.
        deprecated: `{old_name: new_name}`: names kept for one release, which give the
            new name's value with a `DeprecationWarning`; not in `__all__`.
        also: names the package defines itself that `__all__` lists too (`__version__`).

    Returns:
        The package's `__getattr__`, `__dir__` and `__all__` (sorted). Every name is
        imported before it returns, except in a console script (`console_script()`).
    """
    namespace = vars(sys.modules[package])
    home = {name: module for module, members in homes.items() for name in members}
    deprecated = dict(deprecated or {})

    def attribute(name):
        if name in deprecated:
            warnings.warn(
                f"{package}.{name} is deprecated and will be removed in the next release; "
                f"use {package}.{deprecated[name]}",
                DeprecationWarning,
                stacklevel=2,
            )
            return attribute(deprecated[name])
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home[name])
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value  # found directly from now on
        return value

    def names():
        return sorted(set(namespace) | set(home))

    if not console_script():
        for name in home:
            attribute(name)
    return attribute, names, sorted([*home, *also])
