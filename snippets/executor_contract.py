"""Hold your own executor to the contract: `ExecutorContract` from `executor.testing`.

The contract is a class of pytest tests. A test class inherits it and
supplies an `executor` fixture; here that is `CountingExecutor`, a wrapper
of ours (a `WrappedExecutor` that counts the commands it forwards) over a
`LocalExecutor`. This script writes that test module into a temporary
folder and runs pytest on it in a subprocess of its own, as you would run
your test suite, then prints pytest's summary: every test of the contract
passes for the wrapper.
"""

import sys
import tempfile
from pathlib import Path

import anyio

TESTS = '''
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from executor import Command, CommandOutput, LocalExecutor, ToolExecutor, WrappedExecutor
from executor.testing import ExecutorContract


class CountingExecutor(WrappedExecutor):
    """Forwards everything to its inner executor, counting the commands."""

    def __init__(self, inner: ToolExecutor) -> None:
        super().__init__(inner)
        self.commands = 0

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        self.commands += 1
        return await super().exec_cmd(cmd)


class TestCountingExecutor(ExecutorContract):
    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        async with CountingExecutor(LocalExecutor(tmp_path, kill_grace=0.2)) as executor:
            yield executor
'''


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "test_counting.py").write_text(TESTS)
        result = await anyio.run_process(
            [
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--basetemp", str(Path(folder) / "tmp"), "test_counting.py", "-k", "asyncio",
            ],
            cwd=folder,
            check=False,
        )  # fmt: skip
        summary = result.stdout.decode().strip().splitlines()[-1]
        print(f"exit code {result.returncode}")
        print("contract:", summary.split(" in ")[0])


if __name__ == "__main__":
    anyio.run(main)
