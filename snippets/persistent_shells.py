"""A persistent shell and its background jobs: `ex.shell()`.

State carries from one `run` to the next (the directory, variables,
functions, aliases, an activated virtualenv); each `run` returns the output
of that command alone; a timeout interrupts the command and keeps the
shell; a command that ends the shell is reported, and the next one runs in
a fresh shell that says its state was lost. Jobs run beside the shell:
read what they printed since the last read, write to them, signal them,
kill them.
"""

import tempfile

import anyio

from executor import Job, LocalExecutor, NonZeroExit, ShellExited, TimedOut, UnixSignal

SERVER = (
    "trap 'echo reloading' INT; echo listening; "
    'while :; do if read -r line; then echo "request: $line"; fi; sleep 0.05; done'
)


async def read_until(job: Job, needle: str) -> str:
    seen = ""
    with anyio.fail_after(10):
        while needle not in seen:
            seen += (await job.read(wait=0.2)).text()
    return seen


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as ex, ex.shell() as sh:
            await sh.run("mkdir -p app && cd app && export MODE=test && greet() { echo hi $1; }")
            output = await sh.run('echo "$(basename "$PWD") $MODE"; greet agent')
            print(f"state: {output.stdout.decode().split()}")

            try:
                await sh.run("echo out; echo err >&2; exit_with() { return $1; }; exit_with 4")
            except NonZeroExit as failed:
                out = failed.output
                print(f"exit {out.exit_code}: stdout={out.stdout!r} stderr={out.stderr!r}")

            try:
                await sh.run("export LAST=1; sleep 30", timeout=0.5)
            except TimedOut:
                kept = await sh.run("echo $LAST")
                print(f"timed out; the shell kept LAST={kept.stdout.decode().strip()}")

            try:
                await sh.run("exit 3")
            except ShellExited as ended:
                print(f"the shell exited with {ended.output.exit_code}")
            fresh = await sh.run('echo "[$MODE]"')
            print(f"next run: {fresh.stdout.decode().strip()} state_lost={fresh.state_lost}")

            job = await sh.start_job(SERVER)
            await read_until(job, "listening")
            await job.write("GET /\n")
            print(f"job {job.id}: {(await read_until(job, 'request')).strip()}")
            await job.signal(UnixSignal.SIGINT)
            print(f"job {job.id}: {(await read_until(job, 'reloading')).strip()}")
            print(f"jobs: {[(status.id, status.state.value) for status in sh.jobs()]}")
            status = await job.kill()
            print(f"killed: {status.state.value}")


if __name__ == "__main__":
    anyio.run(main)
