"""Read a command's output, and tell a failed command from a broken executor.

Mirrors "Command output" in swiftide's tool-executor guide. A `CommandOutput`
keeps the `Stdout` and `Stderr` chunks in the order they were read: `.stdout`
and `.stderr` join one stream, `.text()` (and `str()`) joins both, decoded as
UTF-8. `.exit_code` is `None` for file commands.

A failed command raises an error that still carries its output:

- `NonZeroExit`: the command ran and failed. A file I/O error, such as reading
  a missing file, is one too, with the OS message as stderr.
- `TimedOut` (also a `TimeoutError`): it ran past its timeout; its whole
  process tree was killed. `.output` holds what it printed before.
- `ExecutorError`: the executor itself failed or refused.

Catch `NonZeroExit` yourself when failing is a normal answer, like a failing test.
"""

import tempfile

import anyio

from executor import Command, LocalExecutor, NonZeroExit, TimedOut

TEST = "echo 'collected 2 tests'; echo 'test_parse FAILED' >&2; exit 1"


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as executor:
            ok = await executor.exec_cmd(Command.shell("echo out; echo err >&2"))
            print(f"exit_code={ok.exit_code} stdout={ok.stdout!r} stderr={ok.stderr!r}")
            print(f"chunks: {[type(chunk).__name__ for chunk in ok.chunks]}")

            for cmd in (
                Command.shell(TEST),
                Command.read_file("missing.txt"),
                Command.shell("echo started; sleep 10").with_timeout(0.5),
            ):
                try:
                    output = await executor.exec_cmd(cmd)
                except NonZeroExit as error:
                    print(f"NonZeroExit: exit_code={error.output.exit_code}", end=" ")
                    print(f"stderr={error.output.stderr.decode().strip()!r}")
                except TimedOut as error:
                    print(f"TimedOut after {error.timeout}s, read so far: {error.output.text()!r}")
                else:
                    print(output.text())


if __name__ == "__main__":
    anyio.run(main)
