"""Layers import downward only, and no module imports itself through others.

Every module of the package is parsed; every ``import`` in it counts, at module level, in
a function, or under ``TYPE_CHECKING``. Layers, from the bottom, read from the
path: (1) ``core/``, ``workloads`` and ``policies``, (2) ``engines/`` (the decision loop, the batching
rules and the modes), (3) ``mip/``, (4) ``online/`` (the named policies and ``simulate``), (5)
``fleet/`` and ``exegpt/``, (6) ``runtime/``, (7) the front ends (``cli/``,
``experiments/``, ``plot``). A module may import from its own layer or below.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import llmsched

SRC = Path(llmsched.__file__).resolve().parent

LAYER_NAMES = {
    1: "core",
    2: "engines",
    3: "mip",
    4: "online",
    5: "fleet and exegpt",
    6: "runtime",
    7: "front end",
}

# A module's layer is read from its path: the first name under llmsched/ places it, so a new
# module inside a package needs no line here.
LAYER_OF_TOP = {
    "core": 1,
    "workloads": 1,
    "policies": 1,
    "engines": 2,
    "mip": 3,
    "online": 4,
    "fleet": 5,
    "exegpt": 5,
    "runtime": 6,
    "experiments": 7,
    "cli": 7,
    "plot": 7,
    "__main__": 7,
}

# The one import against the layers that stays: Schedule.plot loads the plotting front end
# lazily, so that a schedule can draw itself.
ALLOWED = {("llmsched.engines.competition.schedule", "Schedule.plot", "llmsched.plot")}

# Imports that run only when called and close no loop at import: each schedule's validate()
# loads its mode's validator, which imports the schedule class back.
LAZY_VALIDATORS = {
    ("llmsched.engines.competition.schedule", "Schedule.validate", "llmsched.engines.competition.validate"),
    ("llmsched.engines.fusion.schedule", "FusedSchedule.validate", "llmsched.engines.fusion.validate"),
    (
        "llmsched.engines.disaggregation.schedule",
        "DisaggregatedSchedule.validate",
        "llmsched.engines.disaggregation.validate",
    ),
    ("llmsched.fleet.schedule", "FleetSchedule.validate", "llmsched.fleet.validate"),
    # simulate's config class, the TOML reader's default, is declared with the simulate command,
    # which builds it with the reader's machinery.
    ("llmsched.cli.config", "config_from_dict", "llmsched.cli.simulate"),
    ("llmsched.cli.config", "__getattr__", "llmsched.cli.simulate"),
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    where: str  # the enclosing function or class ("" at module level)
    line: int
    typing_only: bool = False  # under ``if TYPE_CHECKING:``, never executed

    def __str__(self) -> str:
        place = f" in {self.where}" if self.where else " at module level"
        return f"{self.importer} imports {self.imported}{place} (line {self.line})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _resolve(module: str, name: str | None) -> str:
    """The module an import loads: ``from package import submodule`` names the submodule."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, scope: list[str], typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner, inner_typing = scope, typing_only
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*scope, child.name]
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                # Only the body is typing-only; an else branch runs.
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), scope, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), scope, typing_only)
                continue
            where = ".".join(scope)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "llmsched":
                        found.append(Import(module, alias.name, where, child.lineno, typing_only))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - child.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                if base.split(".")[0] == "llmsched":
                    for alias in child.names:
                        found.append(
                            Import(module, _resolve(base, alias.name), where, child.lineno, typing_only)
                        )
            visit(child, inner, inner_typing)

    visit(tree, [], False)
    return found


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def layer(module: str) -> int:
    """The layer of a module of the package, from its path (AssertionError for a top-level
    name not placed yet)."""
    parts = module.split(".")
    if module == "llmsched":
        return 7
    if parts[1] not in LAYER_OF_TOP:
        raise AssertionError(
            f"{module}: llmsched.{parts[1]} has no layer: place it in tests/test_layering.py"
        )
    return LAYER_OF_TOP[parts[1]]


def _describe(module: str) -> str:
    return f"{module} (layer {layer(module)}, {LAYER_NAMES[layer(module)]})"


def test_the_walker_sees_imports_inside_functions() -> None:
    """Function-level imports are found: Schedule.plot's lazy import of the plotting module."""
    lazy = [i for i in IMPORTS if (i.importer, i.where, i.imported) in ALLOWED]
    assert len(lazy) == 1 and lazy[0].importer == "llmsched.engines.competition.schedule"
    assert any(i.importer == "llmsched.online.offline" and i.where == "balanced_assignment" for i in IMPORTS)
    typing = [i for i in IMPORTS if i.importer == "llmsched.online.offline" and i.typing_only]
    assert [i.imported for i in typing] == ["llmsched.mip.pcmax.solve"]


def test_every_module_has_a_layer() -> None:
    """Each module of the package is placed in one of the seven layers."""
    for module in MODULES:
        assert layer(module) in LAYER_NAMES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_downward_only(module: str) -> None:
    """A module imports only from its own layer or the layers below."""
    upward = [
        imp
        for imp in IMPORTS
        if imp.importer == module
        and imp.imported in MODULES
        and layer(imp.imported) > layer(module)
        and (imp.importer, imp.where, imp.imported) not in ALLOWED
    ]
    assert not upward, "\n".join(
        f"{imp}: {_describe(imp.importer)} may not import {_describe(imp.imported)}" for imp in upward
    )


def test_imports_name_modules_that_exist() -> None:
    """Every import of the package names one of its modules (the walker resolves them all)."""
    missing = [imp for imp in IMPORTS if imp.imported not in MODULES]
    assert not missing, "\n".join(str(imp) for imp in missing)


def test_no_import_cycles() -> None:
    """No module reaches itself through imports that run. Imports under TYPE_CHECKING never
    run; the one allowed upward import (Schedule.plot) is left out: it closes a loop with
    the plotting front end's downward import of the schedule."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for imp in IMPORTS:
        skipped = imp.typing_only or (imp.importer, imp.where, imp.imported) in ALLOWED | LAZY_VALIDATORS
        if not skipped and imp.imported != imp.importer:
            graph[imp.importer].add(imp.imported)
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                cycle = [*path[path.index(imported) :], imported]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_no_module_imports_a_private_name_of_another() -> None:
    """A name one module shares with another is public: no ``from X import _name`` across
    modules of the package (dunder names such as ``__version__`` aside)."""
    crossing = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmsched"):
                crossing += [
                    f"{module} imports {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                    and not alias.name.startswith("__")
                    and node.module != module
                ]
    assert not crossing, "\n".join(crossing)


def test_importing_the_package_loads_no_heavy_library() -> None:
    """``import llmsched`` stays fast: pandas, scipy, matplotlib, the solvers and torch load
    only where they are used (a module importing pandas at its top made it twice as slow)."""
    import subprocess
    import sys

    code = (
        "import sys, llmsched; "
        "print(sorted(m for m in ('pandas', 'scipy', 'matplotlib', 'pyscipopt', 'ortools', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
