"""The package's layers, read from its imports: the core leans on nothing, nothing forms a cycle.

Every import statement counts, also those inside functions and under
`TYPE_CHECKING`: a lazy import still ties one module, and one folder, to
another.
"""

from __future__ import annotations

import ast
import graphlib
import itertools
import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest

import executor
from executor import ExecutorError, LocalExecutor, ToolExecutor
from executor._core import registry

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


def _module_edges() -> dict[str, dict[str, list[int]]]:
    """For each module, the package's modules it imports (every import statement), with lines.

    `from executor._x import y` names the module `executor._x.y` where there is
    one, else `executor._x`. A module's own package is not counted: Python
    imports it first, but nothing in it depends on the module (a package's
    `__init__` may import its modules lazily).
    """
    modules = _laid_out()
    edges: dict[str, dict[str, list[int]]] = {}
    for module, path in modules.items():
        edges[module] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            elif isinstance(node, ast.ImportFrom):
                pytest.fail(
                    f"{module}:{node.lineno}: a relative import; the package uses absolute ones"
                )
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in set(targets):
                if target in modules and target != module:
                    edges[module].setdefault(target, []).append(node.lineno)
    return edges


def _cycles(edges: dict[str, dict[str, list[int]]]) -> list[tuple[list[str], list[str]]]:
    """Each group of modules that reach each other (Tarjan's components), with one cycle in it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while (member := stack.pop()) != module:
                group.append(member)
            groups.append([module, *group])

    for module in sorted(edges):
        if module not in index:
            visit(module)
    cycles = []
    for group in (group for group in groups if len(group) > 1):
        # The shortest way from the group's first module back to it, inside the group.
        start, inside = group[0], set(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            here = queue.pop(0)
            for target in sorted(edges[here]):
                if target == start:
                    cycles.append(([*paths[here], start], sorted(group)))
                    queue = []
                    break
                if target in inside and target not in paths:
                    paths[target] = [*paths[here], target]
                    queue.append(target)
    return cycles


def test_no_import_cycle_between_modules() -> None:
    """No module imports, at any time, a module that imports it back, however far round.

    Every import counts (at the top, in functions, under `TYPE_CHECKING`), as
    between folders: a lazy import hides a cycle from Python, not from a reader.
    """
    edges = _module_edges()
    found = [
        " -> ".join(f"{a}:{','.join(map(str, edges[a][b]))}" for a, b in itertools.pairwise(cycle))
        + f" -> {cycle[-1]}; the modules that reach each other: {', '.join(group)}"
        for cycle, group in _cycles(edges)
    ]
    assert found == [], "import cycles (module:line of each import):\n" + "\n".join(found)


def test_no_module_takes_another_folders_underscore_names() -> None:
    """What two folders share has a public name: no module takes another folder's `_private`.

    Neither `from executor._x.m import _private` (nor from a module `_m` of it),
    nor `m._private` on a module `m` imported from `_x`, in any module outside
    `_x`, the package's face too.
    """
    modules = _laid_out()
    reached = []
    for module, path in modules.items():
        here = _folder(module)
        tree = ast.parse(path.read_text(), str(path))
        # The names this module binds to another folder's modules, for `m._private`.
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                bound |= {a.asname: a.name for a in node.names if a.asname and a.name in modules}
        for target, imported, line in _imports(path):
            if _folder(target) in (None, here):
                continue
            private = [name for name in imported if name.startswith("_")]
            # A folder's modules are public in the package: `from executor._sandbox import linux`.
            if private or any(part.startswith("_") for part in target.split(".")[2:]):
                reached.append(f"{module}:{line} takes {private or target} from {target}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _folder(bound[node.value.id]) not in (None, here)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                target = bound[node.value.id]
                reached.append(f"{module}:{node.lineno} takes {node.attr} from {target}")
    assert reached == [], "underscore names taken from another folder:\n" + "\n".join(reached)


# What `import executor` loads of the package: the core's registry and the two folders
# that fill it (see executor/_core/registry.py), none of which imports anything more.
REGISTRY = ["executor._core", "executor._core.registry", "executor._shells", "executor._wrappers"]


def test_import_executor_loads_no_backend_and_no_heavy_dependency() -> None:
    """`import executor` alone imports no backend, no policy, no dependency: only the registry."""
    probe = (
        "import sys, executor\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('executor.', 'bashlex',"
        " 'psutil', 'sqlite3', 'asyncssh', 'anyio', 'pathspec', 'tree_sitter')))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == REGISTRY


@pytest.mark.parametrize(
    ("slot", "use", "folder"),
    [
        ("shell", lambda ex: ex.shell(), "executor._shells"),
        ("scoped", lambda ex: ex.scoped("docs"), "executor._wrappers"),
        ("read_only", lambda ex: ex.read_only(), "executor._wrappers"),
    ],
)
def test_what_the_core_asks_of_the_layers_above_fails_clearly_when_missing(
    monkeypatch: pytest.MonkeyPatch,
    slot: str,
    use: Callable[[ToolExecutor], object],
    folder: str,
) -> None:
    """`shell()`, `scoped()` and `read_only()` name the folder that builds them if it did not."""
    assert getattr(registry, slot) is not None
    monkeypatch.setattr(registry, slot, None)
    with pytest.raises(ExecutorError, match=rf"ToolExecutor\.{slot}\(\) is built by {folder}"):
        use(LocalExecutor("/"))


def test_every_public_name_still_imports_from_the_package() -> None:
    """Each name in `executor.__all__` resolves, and to an object defined in the package."""
    for name in executor.__all__:
        value = getattr(executor, name)
        assert value is not None, name
