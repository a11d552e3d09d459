"""List a folder's text files as `rg --files` would: `stream_files`.

`stream_files(path, extensions=None)` yields a `LoadedFile(path, content)`
for each text file below `path`, relative to the workdir, depth first and in
sorted order. Inside a git repository `.gitignore` counts (and `.ignore`
files everywhere); hidden entries, symlinks and binary files (a NUL byte)
are skipped. `extensions` takes `"py"` or `".py"`.
"""

import tempfile

import anyio

from executor import Command, LocalExecutor

FILES: dict[str, str | bytes] = {
    ".git/HEAD": "ref: refs/heads/main\n",  # a repository, so .gitignore counts
    ".gitignore": "build/\n*.log\n",
    ".env": "TOKEN=not-for-listing\n",
    "build/generated.py": "x = 1\n",
    "debug.log": "noise\n",
    "docs/guide.md": "# Guide\n",
    "src/app.py": "print('app')\n",
    "src/logo.png": b"\x89PNG\r\n\x1a\n\0\0",
    "src/util.py": "def util() -> None: ...\n",
}


async def main() -> None:
    with tempfile.TemporaryDirectory() as checkout:
        async with LocalExecutor(checkout) as ex:
            for path, content in FILES.items():
                await ex.exec_cmd(Command.write_file(path, content))

            listed = [loaded.path async for loaded in ex.stream_files(".")]
            print(f"listed: {', '.join(listed)}")
            left_out = sorted(set(FILES) - set(listed) - {".git/HEAD"})
            print(f"left out: {', '.join(left_out)}")

            async for loaded in ex.stream_files("src", ["py"]):
                print(f"src, .py only: {loaded.path} {loaded.content!r}")


if __name__ == "__main__":
    anyio.run(main)
