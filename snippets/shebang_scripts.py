"""Run a multi-line script in the interpreter its `#!` line names.

Mirrors "Shebang scripts" in swiftide's tool-executor guide. When a shell
command starts with `#!`, the executor starts the interpreter named on that
line and writes the rest of the script to its stdin, so a model can send a
multi-line script without escaping it for `sh -c`. Everything after the
interpreter on the first line is ONE argument: `#!/usr/bin/env python3` runs
`/usr/bin/env` with `python3`, and `#!/usr/bin/env -S python3 -I` leaves the
splitting to `env -S`. Since the body is the interpreter's stdin, such a
script cannot take `with_stdin` too (that raises `ExecutorError`).
"""

import tempfile

import anyio

from executor import Command, LocalExecutor, NonZeroExit

PYTHON = """#!/usr/bin/env python3
import sys
print(f"python {sys.version_info.major}")
print("no quoting needed: 'single', \\"double\\", $HOME stays literal")
"""

# `-eu` is one argument to sh: stop at the first failing command.
STRICT_SH = """#!/bin/sh -eu
echo "step 1"
false
echo "never printed"
"""


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir, default_timeout=30) as executor:
            output = await executor.exec_cmd(Command.shell(PYTHON))
            print(output.text(), end="")

            try:
                await executor.exec_cmd(Command.shell(STRICT_SH))
            except NonZeroExit as error:
                print(f"sh -eu stopped: {error.output.text().strip()!r}, {error.message}")


if __name__ == "__main__":
    anyio.run(main)
