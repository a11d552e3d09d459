"""Run the tool commands of AI agents: shell scripts, argv commands, file reads and writes.

```python
from executor import Command, LocalExecutor

async with LocalExecutor("/srv/checkout", default_timeout=30) as ex:
    output = await ex.exec_cmd(Command.shell("git status --short"))
    print(output.text())
```
"""

from executor._args import WorkspacePath
from executor._base import LoadedFile, Sink, ToolExecutor
from executor._commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile
from executor._errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    PolicyDenied,
    TimedOut,
)
from executor._local import LocalExecutor
from executor._output import Chunk, CommandOutput, Stderr, Stdout
from executor._wrappers import CheckedExecutor, ReadOnly, ScopedExecutor, WrappedExecutor

__version__ = "0.1.0"

__all__ = [
    "CheckedExecutor",
    "Chunk",
    "Command",
    "CommandError",
    "CommandOutput",
    "Exec",
    "ExecutorError",
    "InvalidArgument",
    "LoadedFile",
    "LocalExecutor",
    "NonZeroExit",
    "PolicyDenied",
    "ReadFile",
    "ReadOnly",
    "ScopedExecutor",
    "Shell",
    "Sink",
    "Stderr",
    "Stdout",
    "StrPath",
    "TimedOut",
    "ToolExecutor",
    "WorkspacePath",
    "WrappedExecutor",
    "WriteFile",
]
