"""The package's layers, read from its imports: the core leans on nothing, folders form no cycle.

Every import statement counts, also those inside functions and under
`TYPE_CHECKING`: a lazy import still ties one folder to another.
"""

from __future__ import annotations

import ast
import graphlib
import itertools
import pathlib
import subprocess
import sys

import pytest

import executor

PACKAGE = pathlib.Path(executor.__file__).parent


def _imports(path: pathlib.Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, names imported from it, line) for every import of `executor` in `path`."""
    found: list[tuple[str, tuple[str, ...], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, tuple(alias.name for alias in node.names), node.lineno))
    return [entry for entry in found if entry[0].split(".")[0] == "executor"]


def _folder(module: str) -> str | None:
    """The layer folder a dotted `executor...` module lives in (None: the package's face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def _modules() -> dict[str, pathlib.Path]:
    """Every module of the package by dotted name."""
    named = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        named[".".join(parts)] = path
    return named


def _laid_out() -> dict[str, pathlib.Path]:
    """The package's modules, once checked to be laid out in layer folders at all.

    A flat package has no folders to check, and would pass the checks below
    without showing anything.
    """
    modules = _modules()
    assert {"executor._core.base", "executor._core.errors", "executor._core.cleanup"} <= set(
        modules
    ), "no core folder"
    return modules


def _folder_edges() -> dict[str, dict[str, list[str]]]:
    """For each folder, the folders it imports, each with where."""
    _laid_out()
    edges: dict[str, dict[str, list[str]]] = {}
    for module, path in _modules().items():
        here = _folder(module)
        if here is None:
            continue
        edges.setdefault(here, {})
        for target, imported, line in _imports(path):
            # `from executor._sandbox import linux` names a module of that folder.
            there = _folder(target) or next(
                (name for name in imported if (PACKAGE / name).is_dir()), None
            )
            if there is not None and there != here:
                edges[here].setdefault(there, []).append(f"{module}:{line}")
    return edges


FACE = {"executor", "executor.__main__", "executor.testing"}
"""The package's public face: the only modules outside a layer folder."""


def test_every_module_lives_in_a_layer_folder() -> None:
    """Besides the face, every module is in a layer folder, and the core folder exists."""
    flat = sorted(module for module in _modules() if _folder(module) is None)
    assert set(flat) == FACE
    assert any(_folder(module) == "_core" for module in _modules())


def test_the_core_imports_nothing_outside_itself() -> None:
    """No module of `executor._core` imports another folder, or the package's face."""
    outside = [
        f"{module}:{line} imports {target}"
        for module, path in _laid_out().items()
        if _folder(module) == "_core"
        for target, _, line in _imports(path)
        if _folder(target) != "_core"
    ]
    assert outside == []


def test_no_import_cycle_between_folders() -> None:
    """The folders' imports form a graph without cycles: each layer uses the ones below."""
    edges = _folder_edges()
    graph = {folder: set(targets) for folder, targets in edges.items()}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as cycle:
        path = cycle.args[1]
        where = {f"{a} -> {b}": edges[a][b][:3] for a, b in itertools.pairwise(path)}
        pytest.fail(f"import cycle {' -> '.join(path)}: {where}")
    assert order[0] == "_core"


def test_no_import_cycle_between_modules_at_import_time() -> None:
    """No module needs, while it is imported, a module that needs it back.

    Only the imports that run when a module is imported count here: those
    at the top of the file, not those in functions or under `TYPE_CHECKING`.
    """
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        needs = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    needs.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                needs |= {alias.name for alias in node.names}
        graph[module] = {name for name in needs if name in modules and name != module}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"import cycle: {' -> '.join(cycle.args[1])}")


def test_no_folder_imports_another_folders_underscore_names() -> None:
    """What two folders share has a public name: no `from executor._x.m import _private`."""
    reached = []
    for module, path in _laid_out().items():
        here = _folder(module)
        for target, imported, line in _imports(path):
            if _folder(target) in (None, here) or (here is None and module != "executor.testing"):
                continue
            private = [name for name in imported if name.startswith("_")]
            # A folder's modules are public in the package: `from executor._sandbox import linux`.
            if private or any(part.startswith("_") for part in target.split(".")[2:]):
                reached.append(f"{module}:{line} takes {private or target} from {target}")
    assert reached == []


def test_import_executor_loads_no_backend_and_no_heavy_dependency() -> None:
    """`import executor` alone imports no backend, no policy, and no dependency."""
    probe = (
        "import sys, executor\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('executor.', 'bashlex',"
        " 'psutil', 'sqlite3', 'asyncssh', 'anyio', 'pathspec', 'tree_sitter')))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []


def test_every_public_name_still_imports_from_the_package() -> None:
    """Each name in `executor.__all__` resolves, and to an object defined in the package."""
    for name in executor.__all__:
        value = getattr(executor, name)
        assert value is not None, name
