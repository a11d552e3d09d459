"""Run commands under an OS sandbox: `LocalExecutor(workdir, sandbox=Sandbox(...))`.

The kernel bounds what a script does, not the script's own words: every
path is read-only but the workdir, the home folder is hidden, there is no
network, and the rlimits asked for (`open_files` here) bind every process
of the command. `ReadOnly` over a sandboxed executor runs shell commands
with nothing writable at all, instead of refusing them. Needs bubblewrap
(`apt-get install bubblewrap`) or Landlock (Linux 5.13+); `Sandbox.probe()`
says what this machine gives, and an executor asked for more than that
raises `ExecutorError` when it is built, never running unconfined.
"""

import tempfile

import anyio

from executor import Command, LocalExecutor, NonZeroExit, ReadOnly, Sandbox

ATTEMPTS = {
    "the workdir": "echo built > out.txt && cat out.txt",
    "/var/tmp": "echo x > /var/tmp/executor-sandbox-snippet",
    "entries in the home folder": "ls -A ~ 2>/dev/null | wc -l",
}


async def main() -> None:
    sandbox = Sandbox(open_files=256)
    print(f"backend: {sandbox.choose_backend()}")
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir, sandbox=sandbox) as ex:
            for place, script in ATTEMPTS.items():
                try:
                    output = await ex.exec_cmd(Command.shell(script))
                    print(f"{place}: {output.text().strip()}")
                except NonZeroExit:
                    print(f"{place}: refused by the kernel")
            limit = await ex.exec_cmd(Command.shell("ulimit -n"))
            print(f"open files: {limit.text().strip()}")
            try:
                await ReadOnly(ex).exec_cmd(Command.shell("echo again > out.txt"))
            except NonZeroExit:
                print("ReadOnly: even the workdir is read-only")


if __name__ == "__main__":
    anyio.run(main)
