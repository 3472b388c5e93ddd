"""The package's imports run one way: ground floor ← layers, text ← models ← training,
decoding ← serving ← translation, and no module imports itself back through others.

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
