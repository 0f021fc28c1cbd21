"""The package's import rules, as a test that fails (docs/design.md, "Layout", points here).

Every module's imports are read from its source (AST, nothing is imported), mapped to the layer
they belong to (the first folder under `cosmos3_robot/`, or the module's own name at the top), and
checked against `RULES`. Imports inside functions count: a lazy import is still an arrow.

Also checked here, because they are what keeps the layers readable: no module imports a `_private`
name of another module, no file is longer than `MAX_FILE_LINES`, and no function is longer than
`MAX_FUNCTION_LINES` except a command-line `main`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "cosmos3_robot"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80

_BELOW_TRAINING = {
    "model", "flow", "files", "processors", "encoders", "interop", "infra", "tasks", "datasets", "eval",
}  # fmt: skip

# layer -> the other layers it may import (a layer may always import itself).
RULES: dict[str, set[str]] = {
    "model": set(),  # the two-tower core: nothing else of the package
    "flow": set(),  # noise paths and samplers: plain tensors
    "files": set(),  # atomic folders, safetensors + JSON with errors that name the file
    "processors": {"files"},  # tokenizers, action/state transforms, frames, geometry, data state
    "encoders": {"model", "processors", "files"},
    "interop": {"model", "encoders", "processors", "files"},
    "infra": {"model"},  # applied to a model from outside: packing, fused kernels, distributed
    "tasks": {"model", "flow", "encoders"},  # encoders: a batch that shows the Reasoner a frame (ViT)
    "datasets": {"processors", "files"},
    "eval": {"processors"},
    "envs": {"processors", "datasets", "files"},  # simulation and recording (the crash-safe dataset writer)
    "viz": set(),
    "policies": _BELOW_TRAINING | {"envs", "viz"},  # never training
    "training": _BELOW_TRAINING,
    "scripts": _BELOW_TRAINING | {"envs", "viz", "policies", "training"},
    "cli": set(),  # maps command names to `scripts` by string, imports none of them
    "__init__": set(),
}


def layer_of(module: str) -> str:
    """'cosmos3_robot.model.mot' -> 'model'; 'cosmos3_robot.cli' -> 'cli'; the package -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(path: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import of the package in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out.append((node.lineno, alias.name, []))
            continue
        else:
            continue
        out.append((node.lineno, target, names))
    return [(line, m, names) for line, m, names in out if m == PACKAGE or m.startswith(PACKAGE + ".")]


def violations(root: Path, rules: dict[str, set[str]]) -> list[str]:
    """Every import arrow under `root` that `rules` forbid, as 'file:line: a -> b (module)'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        src = layer_of(module)
        if src not in rules:
            found.append(f"{path.relative_to(root.parent)}: layer {src!r} has no rule in RULES")
            continue
        for line, target, names in imported_modules(path, module):
            # `from cosmos3_robot import envs` imports the layer named by the alias.
            dsts = [names_layer for names_layer in names] if target == PACKAGE else [layer_of(target)]
            for dst in dsts:
                if dst != src and dst not in rules[src]:
                    found.append(f"{path.relative_to(root.parent)}:{line}: {src} -> {dst} ({target})")
    return found


def private_imports(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for line, target, names in imported_modules(path, module):
            bad = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if bad and target != module:
                found.append(f"{path.relative_to(root.parent)}:{line}: {', '.join(bad)} from {target}")
    return found


def long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.endswith("main"):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.name} ({n} lines)")
    return found


def test_every_import_follows_the_rules():
    assert violations(ROOT, RULES) == []


def test_every_layer_has_a_rule():
    layers = {layer_of(module_name(p, ROOT)) for p in ROOT.rglob("*.py")}
    assert layers <= set(RULES), f"add a rule for {sorted(layers - set(RULES))}"


def test_no_private_name_crosses_a_module():
    assert private_imports(ROOT) == []


def test_files_and_functions_stay_readable():
    long_files = [
        f"{p.relative_to(ROOT.parent)} ({n} lines)"
        for p in sorted(ROOT.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert long_files == []
    assert long_functions(ROOT) == []


@pytest.fixture
def tiny_package(tmp_path: Path) -> Path:
    """A package laid out like ours: model, tasks and training, with lazy and relative imports."""
    root = tmp_path / PACKAGE
    for folder in ("model", "tasks", "training"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "model" / "core.py").write_text("import torch\nfrom .helpers import f\n")
    (root / "model" / "helpers.py").write_text("def f():\n    return 1\n")
    (root / "tasks" / "head.py").write_text(f"from {PACKAGE}.model.core import f\n")
    (root / "training" / "loop.py").write_text(f"from {PACKAGE}.tasks.head import f\n")
    return root


def test_the_checker_passes_a_clean_tree_and_fails_on_each_forbidden_arrow(tiny_package: Path):
    rules = {k: RULES[k] for k in ("model", "tasks", "training", "__init__")}
    assert violations(tiny_package, rules) == []
    # The model reaching up into tasks, lazily inside a function: caught.
    (tiny_package / "model" / "helpers.py").write_text(
        f"def f():\n    from {PACKAGE}.tasks.head import f\n    return f\n"
    )
    # A task importing training through the package: caught too, and so is the private name.
    (tiny_package / "tasks" / "other.py").write_text(
        f"from {PACKAGE} import training\nfrom {PACKAGE}.model.helpers import _g\n"
    )
    found = violations(tiny_package, rules)
    assert any("model/helpers.py:2: model -> tasks" in v for v in found), found
    assert any("tasks/other.py:1: tasks -> training" in v for v in found), found
    assert private_imports(tiny_package) == [f"{PACKAGE}/tasks/other.py:2: _g from {PACKAGE}.model.helpers"]


def test_a_layer_without_a_rule_is_reported(tiny_package: Path):
    (tiny_package / "newlayer.py").write_text("")
    found = violations(tiny_package, {k: RULES[k] for k in ("model", "tasks", "training", "__init__")})
    assert found == [f"{PACKAGE}/newlayer.py: layer 'newlayer' has no rule in RULES"]
