"""The package's imports run one way: ground floor ← layers, text ← models ← training,
decoding ← serving ← translation ← cli, and no module imports itself back through others;
nothing in the package imports the console commands (`tfblocks.cli`), and no file, class
or function grows past the sizes a reader can hold.

Read from the source with `ast` (no import side effects); imports inside functions count.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tfblocks"
# Subpackage -> stage. A module may import its own subpackage and earlier stages only;
# the ground floor (`tfblocks/_*.py`, `ids.py`) is stage 0 and imports only itself.
STAGES = {
    "layers": 1,
    "text": 1,
    "models": 2,
    "training": 3,
    "decoding": 3,
    "serving": 4,
    "translation": 5,
    "cli": 6,  # the console commands: imported by their entry points only
}
TOP = len(STAGES) + 1  # `tfblocks/__init__.py`: the public API, imported by nothing inside


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def place(module):
    """`(stage, home)` of a `tfblocks...` module name; home = its subpackage or itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return TOP, "tfblocks"
    if parts[1] in STAGES:
        return STAGES[parts[1]], parts[1]
    return 0, parts[1]


def imports(path):
    """The `tfblocks` modules `path` imports (`from tfblocks import x` counts as
    `tfblocks.x` when x is a module, else as `tfblocks`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tfblocks")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "tfblocks":
                continue
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(
                    ".py"
                ).is_file() or (PACKAGE.parent / candidate.replace(".", "/")).is_dir()
                found.add(candidate if is_module else node.module)
    return found


def graph():
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_imports_a_later_stage():
    wrong = []
    for module, targets in graph().items():
        stage, home = place(module)
        for target in targets:
            to_stage, to_home = place(target)
            if to_home == home or (stage == TOP and to_stage < TOP) or stage == to_stage == 0:
                continue
            if to_stage >= stage:
                wrong.append(f"{module} (stage {stage}) imports {target} (stage {to_stage})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    edges = graph()
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path, module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(edges.get(module, ())):
            if target != "tfblocks" and target.startswith(module + "."):
                continue  # a package's __init__ importing its own modules
            visit(target)
        path.pop()
        done.add(module)

    for module in edges:
        visit(module)


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    source = tmp_path / "fake.py"
    source.write_text("from tfblocks.serving import Translator\nimport tfblocks.layers\n")
    assert imports(source) == {"tfblocks.serving", "tfblocks.layers"}
    assert place("tfblocks.models.transformer") == (2, "models")
    assert place("tfblocks._files") == (0, "_files")
    assert place("tfblocks") == (TOP, "tfblocks")


def test_nothing_imports_the_console_commands():
    wrong = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if place(target)[1] == "cli" and place(module)[1] != "cli"
    ]
    assert not wrong, "\n".join(wrong)


# The most lines a file, a class and a function of the package may have.
MAX_FILE, MAX_CLASS, MAX_FUNCTION = 600, 400, 120


def oversized(source, name):
    """`(what, lines)` of the file `name` (its text `source`), its classes and functions
    over the limits."""
    found = []
    if len(source.splitlines()) > MAX_FILE:
        found.append((name, len(source.splitlines())))
    for node in ast.walk(ast.parse(source)):
        limit = {ast.ClassDef: MAX_CLASS, ast.FunctionDef: MAX_FUNCTION}.get(type(node))
        size = node.end_lineno - node.lineno + 1 if limit else 0
        if limit and size > limit:
            found.append((f"{name}:{node.name}", size))
    return found


def test_no_file_class_or_function_is_oversized():
    found = [
        item
        for path in sorted(PACKAGE.rglob("*.py"))
        for item in oversized(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE))
    ]
    assert not found, "\n".join(f"{what}: {lines} lines" for what, lines in found)


def test_the_size_check_sees_a_long_function_and_class():
    body = "    x = 1\n" * MAX_FUNCTION
    assert oversized("def f():\n" + body[10:], "ok.py") == []
    assert oversized("def f():\n" + body, "f.py") == [("f.py:f", MAX_FUNCTION + 1)]
    methods = "".join(f"    def m{i}(self):\n        pass\n" for i in range(MAX_CLASS // 2))
    assert oversized("class C:\n" + methods, "c.py") == [("c.py:C", MAX_CLASS + 1)]
