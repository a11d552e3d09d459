"""The sandbox's standalone programs: the one way they start, and how they load their siblings.

The bubblewrap sandbox's server (`sandbox_server`) and the Landlock launcher
(`landlock_launcher`) run in a bare interpreter (`python -I -S`: no
environment, no `site`, nothing of the caller's `sys.path`), with the
standard library only: the package is not importable there, and importing
it would cost what their start must not. Each starts as

    python -I -S .../executor/_sandbox/programs.py PROGRAM ARGS...

(`command` builds that line, the executor's side's only use of this file):
run as the main module, this file registers itself as
`executor_sandbox_programs`, loads PROGRAM's file from this folder (`load`)
and calls its `main(ARGS)`. A program loads the files of this folder it needs
(`linux`, `seccomp`; the launcher also the server's) the same way:

    if TYPE_CHECKING:
        from executor._sandbox import linux
    else:
        from executor_sandbox_programs import load

        linux = load("linux")

Each file is loaded once per process, under the name `executor_sandbox_NAME`
(the launcher and the server it loads share `linux` and `seccomp`), by its
path beside this one: nothing depends on the caller's working folder or on
`sys.path`. Standard library only, and nothing here imports the package.
"""

from __future__ import annotations

import os
import sys
from typing import Any

FOLDER = os.path.dirname(os.path.abspath(__file__))
"""This folder, where every program and the files they load are."""
PROGRAMS = ("landlock_launcher", "sandbox_server")
"""The programs `command` starts."""
# What a program imports to reach `load`, and the prefix of every loaded file's name.
_SELF = "executor_sandbox_programs"
_PREFIX = "executor_sandbox_"


def path(name: str) -> str:
    """The file of module `name` of this folder."""
    return os.path.join(FOLDER, f"{name}.py")


def command(program: str, *args: str) -> list[str]:
    """The argv that runs `program` (one of `PROGRAMS`) with `args`, in a bare interpreter.

    Raises:
        ValueError: `program` is not one of `PROGRAMS`.

    """
    if program not in PROGRAMS:
        raise ValueError(f"no such program: {program!r} (one of {', '.join(PROGRAMS)})")
    return [sys.executable, "-I", "-S", path("programs"), program, *args]


def load(name: str) -> Any:
    """Module `name` of this folder, loaded by its path, the package itself not importable.

    Loaded once per process, through the loader the interpreter starts with,
    which keeps the compiled code in `__pycache__` as an import does.
    """
    import types
    from importlib.machinery import SourceFileLoader

    key = _PREFIX + name
    if key in sys.modules:
        return sys.modules[key]
    file = path(name)
    loader = SourceFileLoader(key, file)
    module = types.ModuleType(key)
    module.__file__ = file
    module.__loader__ = loader
    # Registered first: what the module defines may look itself up while made.
    sys.modules[key] = module
    loader.exec_module(module)
    return module


def _main() -> None:
    """Run `sys.argv[1]`, a program of this folder, with the arguments after it."""
    sys.modules[_SELF] = sys.modules[__name__]
    program, *args = sys.argv[1:]
    if program not in PROGRAMS:
        raise SystemExit(f"no such program: {program!r} (one of {', '.join(PROGRAMS)})")
    load(program).main(args)


if __name__ == "__main__":
    _main()
