"""Static checks of the code the interpreter is asked to run: what it refuses before running it.

- Python is read through its AST: `os.system`, `os.popen`, the `os.exec*`,
  `os.spawn*`, `os.posix_spawn*` and `os.fork*` families, however the module
  is reached (imported, renamed, assigned to another name,
  `__import__("os")`, `importlib.import_module("os")`, `sys.modules["os"]`,
  another module's `os` attribute such as `pathlib.os`)
  and however the function is (`os.system`, `getattr(os, "system")`,
  `os.__dict__["system"]`, `vars(os)["system"]`), any import of
  `subprocess`, `ctypes`, `_posixsubprocess` or `pty` (also `__import__` and
  `importlib.import_module` with a literal name), and `shutil.rmtree` (or
  `os.removedirs`) of a system path: `/`, a top-level system folder, the
  home folder. Code handed to `exec`, `eval` or `compile` as a literal is
  read the same way.
- JavaScript is read as text: `child_process` (any spelling of the module
  name in a string), `process.binding`, `process.dlopen`.
- R is read as text: `system`, `system2`, `shell`, `pipe`, processx and
  sys, `dyn.load`, and a recursive `unlink` of `/` or `~`.
- Bash goes through `DangerousCommands` (the caller does that).

These are denylists, a first line and not a boundary: they stop an agent's
accidents and the usual spellings, not a determined author (code can build
names at run time: `getattr(__import__("o" + "s"), "sys" + "tem")` passes).
The boundary is where the code runs: the OS sandbox `CodeInterpreterTool`
runs its interpreters in by default where the machine has one, or the
executor's own (a sandbox, a container).
"""

from __future__ import annotations

import ast
import re

_MODULES = frozenset({"subprocess", "ctypes", "_ctypes", "_posixsubprocess", "pty"})
_OS_MODULES = frozenset({"os", "posix", "nt"})
_OS_CALLS = re.compile(r"^(system|popen|fork|forkpty|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?)$")
_SYSTEM_DIRS = frozenset(
    {
        "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt",
        "opt", "proc", "root", "run", "sbin", "srv", "sys", "usr", "var",
    }
)  # fmt: skip
_DELETERS = frozenset({"rmtree", "removedirs"})


def _system_path(path: str) -> bool:
    """Whether deleting `path` recursively would take a system folder (or home) with it."""
    text = path.strip()
    if text.rstrip("/") in ("~", "$HOME", "${HOME}"):
        return True
    if not text.startswith("/"):
        return False
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not parts:
        return True
    if ".." in parts:
        return True
    if len(parts) == 1:
        return parts[0] in _SYSTEM_DIRS or parts[0] == "tmp"
    # /usr/lib, /var/log, /home/someone: still the system's, or somebody's home.
    return len(parts) == 2 and parts[0] in ("usr", "var", "home")


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
        in ("Path", "PurePath", "PosixPath", "expanduser")
        and node.args
    ):
        return _literal(node.args[0])
    return None


def _shown(node: ast.AST) -> str:
    """How a finding names the expression that loads a module: its source, kept short."""
    text = ast.unparse(node)
    return text if len(text) <= 40 else f"{text[:37]}..."


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.findings: list[str] = []
        # Names bound to the os module, and to its dangerous functions.
        self.os_names: set[str] = set(_OS_MODULES)
        self.os_functions: dict[str, str] = {}
        self.shutil_names: set[str] = {"shutil"}
        self.deleters: set[str] = set()

    def refuse(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", None)
        where = f" (line {line})" if line is not None else ""
        self.findings.append(f"{what}{where}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in _MODULES:
                self.refuse(node, f"import of {alias.name}")
            if alias.name in _OS_MODULES:
                self.os_names.add(alias.asname or alias.name)
            if alias.name == "shutil":
                self.shutil_names.add(alias.asname or "shutil")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] in _MODULES:
            self.refuse(node, f"import from {module}")
        for alias in node.names:
            if module in _OS_MODULES and (_OS_CALLS.match(alias.name) or alias.name == "*"):
                self.refuse(node, f"import of {module}.{alias.name}")
            if module == "shutil" and alias.name in ("rmtree", "*"):
                self.deleters.add(alias.asname or "rmtree")
            if module in _OS_MODULES and alias.name == "removedirs":
                self.deleters.add(alias.asname or "removedirs")
            if alias.name in _MODULES:
                self.refuse(node, f"import of {alias.name}")
        self.generic_visit(node)

    def is_os(self, node: ast.AST) -> bool:
        """Whether `node` is the os module: a name bound to it, or an expression that loads it."""
        if isinstance(node, ast.Name):
            return node.id in self.os_names
        if isinstance(node, ast.Attribute):
            # pathlib.os, posixpath.os, shutil.os: modules that imported os
            return node.attr in _OS_MODULES
        if isinstance(node, ast.Call) and node.args:
            # __import__("os"), builtins.__import__("os"), importlib.import_module("os")
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in ("__import__", "import_module"):
                return _literal(node.args[0]) in _OS_MODULES
        if isinstance(node, ast.Subscript):
            # sys.modules["os"]
            value = node.value
            return (
                isinstance(value, ast.Attribute)
                and value.attr == "modules"
                and _literal(node.slice) in _OS_MODULES
            )
        return False

    def os_namespace(self, node: ast.AST) -> bool:
        """Whether `node` is the os module's namespace: `os.__dict__`, `vars(os)`."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self.is_os(node.value)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "vars"
            and len(node.args) == 1
            and self.is_os(node.args[0])
        )

    def visit_Assign(self, node: ast.Assign) -> None:
        # o = os; o = __import__("os")
        if self.is_os(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.os_names.add(target.id)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.is_os(node.value) and _OS_CALLS.match(node.attr):
            self.refuse(node, f"{_shown(node.value)}.{node.attr}")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # os.__dict__["system"], vars(os)["system"]
        key = _literal(node.slice)
        if key is not None and _OS_CALLS.match(key) and self.os_namespace(node.value):
            self.refuse(node, f"the os module's {key!r}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        # getattr(os, "system"), __import__("subprocess"), importlib.import_module("ctypes")
        if name == "getattr" and len(node.args) >= 2:
            target, attribute = node.args[0], _literal(node.args[1])
            if self.is_os(target) and attribute is not None and _OS_CALLS.match(attribute):
                self.refuse(node, f"getattr({_shown(target)}, {attribute!r})")
        module = None
        importing = name == "__import__" or (
            isinstance(func, ast.Attribute) and func.attr in ("import_module", "__import__")
        )
        if importing and node.args:
            module = _literal(node.args[0])
        if module is not None and module.split(".")[0] in _MODULES:
            self.refuse(node, f"import of {module}")
        # shutil.rmtree("/"), rmtree(Path("/etc")), os.removedirs("/usr/lib")
        deleting = (
            isinstance(func, ast.Attribute)
            and func.attr in _DELETERS
            and isinstance(func.value, ast.Name)
            and (func.value.id in self.shutil_names or func.value.id in self.os_names)
        ) or (name is not None and name in self.deleters)
        if deleting and node.args:
            path = _literal(node.args[0])
            if path is not None and _system_path(path):
                self.refuse(node, f"recursive delete of the system path {path!r}")
        # exec("import subprocess"): literal code is code.
        if name in ("exec", "eval", "compile") and node.args:
            source = _literal(node.args[0])
            if source is not None:
                self.findings += [
                    f"{finding} in code given to {name}()" for finding in python_findings(source)
                ]
        self.generic_visit(node)


def python_findings(code: str) -> list[str]:
    """What the Python checks refuse in `code`; empty when it may run.

    Code that does not parse has no findings: it runs, and its
    `SyntaxError` is the cell's error.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    checker = _Checker()
    checker.visit(tree)
    return checker.findings


_JS_RULES = (
    (re.compile(r"child_process"), "the child_process module"),
    (re.compile(r"process\s*\.\s*binding\s*\("), "process.binding"),
    (re.compile(r"process\s*\.\s*_linkedBinding\s*\("), "process._linkedBinding"),
    (re.compile(r"process\s*\.\s*dlopen\s*\("), "process.dlopen"),
)


_R_RULES = (
    (re.compile(r"\b(system2?|shell|pipe)\s*\("), "running a program (system, system2, pipe)"),
    (re.compile(r"\bprocessx\b|\bsys::exec"), "running a program (processx, sys)"),
    (re.compile(r"\bdyn\.load\s*\("), "dyn.load"),
    (
        re.compile(r"\bunlink\s*\(\s*[\"'](/|~)[\"'/]?\s*[\"']?.*recursive\s*=\s*(TRUE|T)\b"),
        "a recursive delete of / or the home folder",
    ),
)


def r_findings(code: str) -> list[str]:
    """What the R checks refuse in `code`; empty when it may run."""
    return _findings(code, _R_RULES)


def javascript_findings(code: str) -> list[str]:
    """What the JavaScript checks refuse in `code`; empty when it may run."""
    return _findings(code, _JS_RULES)


def _findings(code: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> list[str]:
    findings = []
    for pattern, what in rules:
        match = pattern.search(code)
        if match is not None:
            line = code.count("\n", 0, match.start()) + 1
            findings.append(f"{what} (line {line})")
    return findings
