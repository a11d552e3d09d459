"""Run commands on another host over one SSH connection: `SshExecutor`.

Each command is a channel of its own on one connection, opened at the first
command; files go over SFTP on the same connection. Host keys are checked
against `known_hosts`. A timeout kills the command's whole tree on the
remote host, and `TimedOut` carries what it printed first. Needs the `ssh`
extra (asyncssh), which runs on asyncio only.

The host to use comes from the environment:

- `EXECUTOR_SSH_HOST` (default `localhost`) and `EXECUTOR_SSH_PORT` (22);
- `EXECUTOR_SSH_USER`: the login (default: yours);
- `EXECUTOR_SSH_KEY`: a private key file (default: `~/.ssh/id_*` and the agent);
- `EXECUTOR_SSH_KNOWN_HOSTS`: the file listing the host's key
  (default `~/.ssh/known_hosts`).

The snippet works in a new folder it makes on the host, and removes it.
"""

import os

import anyio

from executor import Command, SshExecutor, TimedOut


async def main() -> None:
    key = os.environ.get("EXECUTOR_SSH_KEY")
    async with SshExecutor(
        os.environ.get("EXECUTOR_SSH_HOST", "localhost"),
        port=int(os.environ.get("EXECUTOR_SSH_PORT", "22")),
        user=os.environ.get("EXECUTOR_SSH_USER"),
        client_keys=[key] if key else None,
        known_hosts=os.environ.get("EXECUTOR_SSH_KNOWN_HOSTS", "~/.ssh/known_hosts"),
        default_timeout=30,
    ) as host:
        folder = (await host.exec_cmd(Command.exec(["mktemp", "-d"]))).text().strip()
        ex = host.scoped(folder)
        try:
            await ex.exec_cmd(Command.write_file("src/app.py", "print('hi')\n"))  # over SFTP
            listing = [loaded.path async for loaded in ex.stream_files(".", ["py"])]
            print(f"stream_files over SFTP: {listing}")

            # Three commands at once: three channels on the one connection.
            lines: list[str] = []

            async def run(script: str) -> None:
                lines.append((await ex.exec_cmd(Command.shell(script))).text().strip())

            async with anyio.create_task_group() as tasks:
                for n in (1, 2, 3):
                    tasks.start_soon(run, f"sleep 0.{n}; echo channel {n}")
            print(f"concurrent: {sorted(lines)}")

            try:
                await ex.exec_cmd(Command.shell("echo started; sleep 30 & wait").with_timeout(1))
            except TimedOut as error:
                print(f"TimedOut after {error.timeout}s: {error.output.text()!r}")
        finally:
            await host.exec_cmd(Command.exec(["rm", "-rf", folder]))


if __name__ == "__main__":
    anyio.run(main)
