"""Confinement: a confined LocalExecutor reads, writes, lists and runs commands only in its workdir.

The hostile corpus tries each path as `read_file`, `write_file`, `current_dir`
(for a command and for a file read), `stream_files` root and scope, with both
resolvers: the kernel's `openat2(RESOLVE_BENEATH)` and the `O_NOFOLLOW` walk.
Every attempt must be refused with `PolicyDenied` saying why, and the
`hostile` fixture checks on disk, after each test, that nothing outside the
workdir changed and no temporary file was left.

Writes never aim at a system file: a probe name that does not exist is used
instead of `/etc/passwd`, so even a broken build cannot damage the machine.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from executor import (
    Command,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    NonZeroExit,
    PathRefused,
    PolicyDenied,
    ToolExecutor,
)
from executor._local import confine as _confine
from executor.testing import ExecutorContract

pytestmark = pytest.mark.anyio

KERNEL = _confine.kernel_resolves_beneath()
PROBE = "executor-confinement-probe"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Resolve with the kernel's openat2 (where it works), then with the O_NOFOLLOW walk."""
    if request.param == "openat2":
        if not KERNEL:
            pytest.skip("openat2 is missing here or blocked by a seccomp filter")
    else:
        monkeypatch.setattr(_confine, "_kernel", False)
    return str(request.param)


# --- the tree ---------------------------------------------------------------------------


@attrs.frozen
class Tree:
    """A workdir full of traps, with the folders around it that must stay untouched."""

    root: Path
    work: Path
    outside: Path

    def snapshot(self) -> dict[str, tuple[int, int, int, str]]:
        """Every entry outside the workdir (and a system file) with its mode, size, mtime, hash."""
        found: dict[str, tuple[int, int, int, str]] = {}
        places = [self.outside, self.root / "workx", Path("/etc/passwd"), Path("/etc") / PROBE]
        for place in places:
            for path in _entries(place):
                try:
                    info = path.lstat()
                except FileNotFoundError:
                    continue
                digest = ""
                if stat.S_ISREG(info.st_mode):
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                elif stat.S_ISLNK(info.st_mode):
                    digest = os.readlink(path)
                found[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
        return found

    def temporaries(self) -> list[Path]:
        """Temporary files a write left behind, anywhere in the tree."""
        return [path for path in _entries(self.root) if path.name.endswith(".tmp")]


def _entries(top: Path) -> Iterator[Path]:
    yield top
    if top.is_dir() and not top.is_symlink():
        for directory, folders, files in os.walk(top):
            for name in folders + files:
                yield Path(directory) / name


def build_tree(root: Path) -> Tree:
    """Make `root/work` (with symlinks of every kind), `root/outside` and `root/workx`."""
    work = root / "work"
    outside = root / "outside"
    (work / "a" / "b" / "c").mkdir(parents=True)
    (work / "f.txt").write_text("INSIDE f.txt\n")
    (work / "a" / "f.txt").write_text("INSIDE a/f.txt\n")
    (work / "a" / "b" / "f.txt").write_text("INSIDE a/b/f.txt\n")
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("OUTSIDE secret\n")
    (outside / "f.txt").write_text("OUTSIDE f.txt\n")
    (outside / "dir" / "inner.txt").write_text("OUTSIDE inner\n")
    # A sibling whose name starts like the workdir's: not inside it.
    (root / "workx").mkdir()
    (root / "workx" / "f.txt").write_text("OUTSIDE workx\n")
    links = {
        "to_etc": "/etc",
        "to_parent": "..",
        "to_parent_slash": "../",
        "to_outside_abs": str(outside),
        "to_outside_rel": "../outside",
        "chain1": "chain2",
        "chain2": "chain3",
        "chain3": "../outside",
        "chain_abs1": "chain_abs2",
        "chain_abs2": "/etc",
        "loop1": "loop2",
        "loop2": "loop1",
        "self_loop": "self_loop",
        "dangling_out": "../outside/created_by_attack",
        "dangling_abs": str(outside / "created_by_attack_abs"),
        "proc_root": "/proc/self/root",
        "proc_cwd": "/proc/self/cwd",
        "to_work_abs": str(work),
        "inside": "a",
        "inside_file": "a/f.txt",
        "a/up": "../..",
        "a/deep": "../to_parent",
        "a/sideways": "../../outside/secret.txt",
        "a/b/back": "../../inside",
    }
    for name, target in links.items():
        os.symlink(target, work / name)
    return Tree(root=root, work=work, outside=outside)


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Tree]:
    """The trap tree; afterwards, nothing outside the workdir changed and no temp file is left."""
    tree = build_tree(tmp_path)
    before = tree.snapshot()
    yield tree
    after = tree.snapshot()
    assert after == before, "something outside the workdir changed"
    assert not (tree.outside / "created_by_attack").exists()
    assert not (tree.outside / "created_by_attack_abs").exists()
    assert not tree.temporaries(), "a write left a temporary file"


@pytest.fixture
async def confined(hostile: Tree, resolver: str) -> AsyncIterator[LocalExecutor]:
    """A confined executor on the trap tree, with the resolver under test."""
    async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
        yield executor


async def _drain(executor: ToolExecutor, path: str) -> list[str]:
    return [loaded.content async for loaded in executor.stream_files(path)]


# --- the contract -----------------------------------------------------------------------


class TestConfinedContract(ExecutorContract):
    """A confined executor keeps the whole executor contract, but for absolute paths outside."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A confined LocalExecutor in an empty `work` folder, closed after the test."""
        (tmp_path / "work").mkdir()
        async with LocalExecutor(tmp_path / "work", confine=True, kill_grace=0.2) as executor:
            yield executor

    async def test_current_dir_outside_is_refused(self, executor: ToolExecutor) -> None:
        """An absolute current_dir must lie in the workdir: "/" is refused, one inside runs."""
        await executor.exec_cmd(Command.write_file("sub/marker", "here"))
        workdir = (await executor.exec_cmd(Command.shell("pwd"))).text().strip()
        relative = await executor.exec_cmd(Command.shell("cat marker").with_current_dir("sub"))
        assert relative.stdout == b"here"
        absolute = await executor.exec_cmd(Command.shell("pwd").with_current_dir(f"{workdir}/sub"))
        assert absolute.stdout == f"{workdir}/sub\n".encode()
        with pytest.raises(PolicyDenied, match="outside the workdir"):
            await executor.exec_cmd(Command.shell("pwd").with_current_dir("/"))
        read = await executor.exec_cmd(Command.read_file("marker").with_current_dir("sub"))
        assert read.stdout == b"here"
        read = await executor.exec_cmd(Command.read_file(f"{workdir}/sub/marker"))
        assert read.stdout == b"here"


# --- the hostile corpus -----------------------------------------------------------------

DOTDOT = "'..' climbs above the workdir"
ABSOLUTE = "absolute path"
SYMLINK = "symlink"
LOOP = "symlinks"
LOOKALIKE = "look-alike"
ENCODED = "percent-encoded"
BACKSLASH = "separator"
EXPANSION = "not expanded"

# Each: the path (`{tmp}` is the folder holding work/ and outside/), and what
# the refusal must say. Reads aim at real files outside, writes at names that
# do not exist there: a leak shows as changed content or a new file.
HOSTILE = [
    pytest.param("..", DOTDOT, id="dotdot"),
    pytest.param("../outside/secret.txt", DOTDOT, id="dotdot-to-sibling"),
    pytest.param("a/../../outside/secret.txt", DOTDOT, id="down-then-up-past-root"),
    pytest.param("./../outside/secret.txt", DOTDOT, id="dot-then-dotdot"),
    pytest.param("a/./../..", DOTDOT, id="dot-between-dotdots"),
    pytest.param("a/b/c/../../../../outside", DOTDOT, id="deep-climb"),
    pytest.param("../", DOTDOT, id="dotdot-trailing-slash"),
    pytest.param("a/..//../", DOTDOT, id="doubled-slash-trailing-slash"),
    pytest.param("a/" * 1500 + "../" * 1501 + "outside/f.txt", DOTDOT, id="longer-than-path-max"),
    pytest.param("//etc/passwd", ABSOLUTE, id="double-slash-root"),
    pytest.param("/etc/passwd", ABSOLUTE, id="absolute-etc"),
    pytest.param("/proc/self/root/etc/passwd", ABSOLUTE, id="proc-self-root"),
    pytest.param("/proc/self/cwd/..", ABSOLUTE, id="proc-self-cwd"),
    pytest.param("{tmp}/outside/secret.txt", ABSOLUTE, id="absolute-sibling"),
    pytest.param("{tmp}/workx/f.txt", ABSOLUTE, id="absolute-prefix-look-alike"),
    pytest.param("{tmp}/work/../outside/secret.txt", DOTDOT, id="absolute-inside-then-dotdot"),
    pytest.param("{tmp}/work/to_outside_rel/f.txt", SYMLINK, id="absolute-inside-then-symlink"),
    pytest.param(f"to_etc/{PROBE}", SYMLINK, id="symlink-to-etc"),
    pytest.param("to_parent/outside/secret.txt", SYMLINK, id="symlink-to-parent"),
    pytest.param("to_parent_slash/outside/f.txt", SYMLINK, id="symlink-to-parent-slash"),
    pytest.param("to_outside_abs/secret.txt", SYMLINK, id="symlink-absolute-sibling"),
    pytest.param("to_outside_rel/secret.txt", SYMLINK, id="symlink-relative-sibling"),
    pytest.param("to_outside_rel", SYMLINK, id="symlink-to-outside-as-last"),
    pytest.param("chain1/secret.txt", SYMLINK, id="symlink-chain-ending-outside"),
    pytest.param(f"chain_abs1/{PROBE}", SYMLINK, id="symlink-chain-ending-absolute"),
    pytest.param("loop1/x", LOOP, id="symlink-loop"),
    pytest.param("self_loop", LOOP, id="symlink-self-loop"),
    pytest.param("dangling_out", SYMLINK, id="dangling-symlink-out"),
    pytest.param("dangling_abs", SYMLINK, id="dangling-symlink-absolute"),
    pytest.param("a/up/outside/secret.txt", SYMLINK, id="symlink-in-parent-component"),
    pytest.param("a/deep/outside/f.txt", SYMLINK, id="symlink-to-escaping-symlink"),
    pytest.param("a/sideways", SYMLINK, id="symlink-to-outside-file"),
    pytest.param("a/b/back/../../outside/f.txt", SYMLINK, id="inside-symlink-then-dotdots"),
    pytest.param("proc_root{tmp}/outside/secret.txt", SYMLINK, id="symlink-to-proc-self-root"),
    pytest.param("proc_cwd/x", SYMLINK, id="symlink-to-proc-self-cwd"),
    pytest.param("\u2024\u2024/outside/secret.txt", LOOKALIKE, id="one-dot-leaders"),
    pytest.param("\uff0e\uff0e/outside/secret.txt", LOOKALIKE, id="fullwidth-dots"),
    pytest.param("\u2025/outside/secret.txt", LOOKALIKE, id="two-dot-leader"),
    pytest.param("..\uff0foutside\uff0fsecret.txt", LOOKALIKE, id="fullwidth-slashes"),
    pytest.param("..\u2215outside\u2215secret.txt", LOOKALIKE, id="division-slashes"),
    pytest.param("%2e%2e/outside/secret.txt", ENCODED, id="percent-encoded-dots"),
    pytest.param("..%2Foutside%2Fsecret.txt", ENCODED, id="percent-encoded-slashes"),
    pytest.param("..\\..\\outside\\secret.txt", BACKSLASH, id="backslashes"),
    pytest.param("~/.ssh/id_rsa", EXPANSION, id="tilde"),
    pytest.param("~root/.bashrc", EXPANSION, id="tilde-user"),
    pytest.param("$HOME/.bashrc", EXPANSION, id="dollar-home"),
    pytest.param("a/${HOME}/.bashrc", EXPANSION, id="braced-variable"),
]


@pytest.mark.parametrize(("template", "why"), HOSTILE)
async def test_hostile_path_is_refused(
    confined: LocalExecutor, hostile: Tree, template: str, why: str
) -> None:
    """Every use of a hostile path is refused with PolicyDenied naming the path and why."""
    path = template.replace("{tmp}", str(hostile.root))
    in_path = os.path.join(path, "f.txt")
    attempts: dict[str, tuple[Callable[[], Awaitable[object]], str]] = {
        "read_file": (lambda: confined.exec_cmd(Command.read_file(path)), path),
        "write_file": (lambda: confined.exec_cmd(Command.write_file(path, b"PWNED")), path),
        "write_file below": (
            lambda: confined.exec_cmd(Command.write_file(f"{path}/{PROBE}", b"PWNED")),
            f"{path}/{PROBE}",
        ),
        "current_dir": (
            lambda: confined.exec_cmd(Command.shell("cat f.txt").with_current_dir(path)),
            path,
        ),
        "argv current_dir": (
            lambda: confined.exec_cmd(Command.exec(["pwd"]).with_current_dir(path)),
            path,
        ),
        "read_file in current_dir": (
            lambda: confined.exec_cmd(Command.read_file("f.txt").with_current_dir(path)),
            in_path,
        ),
        "stream_files": (lambda: _drain(confined, path), path),
        "scope": (
            lambda: confined.scoped(path).exec_cmd(Command.read_file("f.txt")),
            in_path,
        ),
    }
    for operation, (attempt, shown) in attempts.items():
        with pytest.raises(PolicyDenied) as caught:
            await attempt()
        message = str(caught.value)
        assert repr(shown) in message, (operation, message)
        assert why in message, (operation, message)


async def test_tilde_in_a_scope_is_refused(confined: LocalExecutor) -> None:
    """A bare `~` is refused also when a scope is joined in front of it."""
    with pytest.raises(PolicyDenied, match="not expanded"):
        await confined.scoped("a").exec_cmd(Command.write_file("~/x", "x"))


async def test_corpus_is_large_enough() -> None:
    """The corpus holds at least 30 hostile paths, each with its own id."""
    ids = [param.id for param in HOSTILE]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)


async def test_nul_byte_is_refused(confined: LocalExecutor, hostile: Tree) -> None:
    """A NUL byte is refused when the command is built, and by stream_files, saying so."""
    path = "a\0/../../outside/secret.txt"
    for build in (
        lambda: Command.read_file(path),
        lambda: Command.write_file(path, b"PWNED"),
        lambda: Command.shell("pwd").with_current_dir(path),
    ):
        with pytest.raises(InvalidArgument, match="NUL"):
            build()
    with pytest.raises(PolicyDenied, match="NUL byte"):
        await _drain(confined, path)


async def test_directory_swapped_for_symlink_mid_call(hostile: Tree, resolver: str) -> None:
    """While `d` flips between a folder and a symlink out, no read sees out, no write lands out."""
    exchange = _exchanger()
    (hostile.work / "d").mkdir()
    (hostile.work / "d" / "f.txt").write_text("INSIDE d/f.txt\n")
    os.symlink("../outside", hostile.work / "d_swap")
    outcomes: Counter[str] = Counter()
    with _flipping(exchange, hostile.work / "d", hostile.work / "d_swap") as flips:
        async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
            deadline = time.monotonic() + 2
            serial = 0
            while time.monotonic() < deadline:
                serial += 1
                attempts: list[tuple[str, Command]] = [
                    ("read", Command.read_file("d/f.txt")),
                    ("write", Command.write_file("d/f.txt", f"INSIDE write {serial}\n")),
                    ("write new", Command.write_file(f"d/{PROBE}", "INSIDE new\n")),
                    ("read via cwd", Command.read_file("f.txt").with_current_dir("d")),
                ]
                if serial % 8 == 0:
                    attempts.append(("cat", Command.exec(["cat", "f.txt"]).with_current_dir("d")))
                for kind, command in attempts:
                    try:
                        output = await executor.exec_cmd(command)
                    except PathRefused as refused:
                        outcomes["refused" if refused.outside else "refused otherwise"] += 1
                        continue
                    except NonZeroExit:
                        outcomes["failed"] += 1  # a file missing at that instant
                        continue
                    if kind != "write" and kind != "write new":
                        assert output.stdout.startswith(b"INSIDE"), output.stdout
                    outcomes["done"] += 1
    assert flips() > 10
    assert outcomes["done"], f"the race was never met: {outcomes}"
    assert outcomes["refused"], f"the race was never met: {outcomes}"
    assert not outcomes["refused otherwise"], outcomes


async def test_final_component_swapped_for_symlink_mid_write(hostile: Tree, resolver: str) -> None:
    """While `g` flips between a file and a dangling symlink out, writes replace it, not follow."""
    exchange = _exchanger()
    (hostile.work / "g").write_text("INSIDE g\n")
    os.symlink("../outside/created_by_attack", hostile.work / "g_swap")
    outcomes: Counter[str] = Counter()

    def rearm() -> None:
        # A write replaces the symlink by a file; put the trap back.
        if not (hostile.work / "g").is_symlink() and not (hostile.work / "g_swap").is_symlink():
            (hostile.work / "g_swap").unlink()
            os.symlink("../outside/created_by_attack", hostile.work / "g_swap")

    flipping = _flipping(exchange, hostile.work / "g", hostile.work / "g_swap", rearm)
    with flipping as flips:
        async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                try:
                    await executor.exec_cmd(Command.write_file("g", "INSIDE written\n"))
                except PolicyDenied:
                    outcomes["refused"] += 1
                else:
                    outcomes["written"] += 1
    assert flips() > 10
    assert outcomes["written"], outcomes


def _exchanger() -> Callable[[Path, Path], None]:
    # renameat2(RENAME_EXCHANGE) swaps two names atomically, so the path always exists.
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        pytest.skip("libc has no renameat2")
    at_fdcwd = -100
    rename_exchange = 2

    def exchange(first: Path, second: Path) -> None:
        if renameat2(at_fdcwd, bytes(first), at_fdcwd, bytes(second), rename_exchange) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    try:
        probe = Path(tempfile.mkdtemp(prefix="exchange-"))
        (probe / "x").touch()
        (probe / "y").mkdir()
        exchange(probe / "x", probe / "y")
    except OSError as error:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) does not work here: {error}")
    return exchange


class _flipping:
    """A thread swapping two names as fast as it can until the block ends; yields a flip counter."""

    def __init__(
        self,
        exchange: Callable[[Path, Path], None],
        first: Path,
        second: Path,
        between: Callable[[], None] = lambda: None,
    ) -> None:
        self._exchange = exchange
        self._first = first
        self._second = second
        self._between = between
        self._stop = threading.Event()
        self._flips = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._exchange(self._first, self._second)
            self._flips += 1
            self._between()

    def __enter__(self) -> Callable[[], int]:
        self._thread.start()
        return lambda: self._flips

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# --- what confinement still allows ---------------------------------------------------------


async def test_symlinks_that_stay_inside_are_followed(
    confined: LocalExecutor, hostile: Tree
) -> None:
    """Relative symlinks that stay inside work for reads, writes, listing and current_dir."""
    assert (
        await confined.exec_cmd(Command.read_file("inside/f.txt"))
    ).stdout == b"INSIDE a/f.txt\n"
    assert (await confined.exec_cmd(Command.read_file("inside_file"))).stdout == b"INSIDE a/f.txt\n"
    back = await confined.exec_cmd(Command.read_file("a/b/back/b/f.txt"))
    assert back.stdout == b"INSIDE a/b/f.txt\n"
    await confined.exec_cmd(Command.write_file("inside/new.txt", "new"))
    assert (hostile.work / "a" / "new.txt").read_text() == "new"
    where = await confined.exec_cmd(Command.exec(["pwd", "-P"]).with_current_dir("inside"))
    assert where.stdout.decode().strip() == os.path.realpath(hostile.work / "a")
    listed = [loaded.path async for loaded in confined.stream_files("inside")]
    assert "inside/f.txt" in listed


async def test_dotdot_that_stays_inside_is_allowed(confined: LocalExecutor) -> None:
    """A `..` that never climbs above the workdir resolves as usual."""
    output = await confined.exec_cmd(Command.read_file("a/b/../../f.txt"))
    assert output.stdout == b"INSIDE f.txt\n"
    output = await confined.exec_cmd(Command.read_file("../f.txt").with_current_dir("a/b"))
    assert output.stdout == b"INSIDE a/f.txt\n"


async def test_absolute_path_inside_is_accepted(confined: LocalExecutor, hostile: Tree) -> None:
    """An absolute path that lies in the workdir, as configured or as the OS spells it, works."""
    for work in (str(hostile.work), os.path.realpath(hostile.work)):
        output = await confined.exec_cmd(Command.read_file(f"{work}//a/./f.txt"))
        assert output.stdout == b"INSIDE a/f.txt\n"
        where = await confined.exec_cmd(Command.exec(["pwd", "-P"]).with_current_dir(f"{work}/a"))
        assert where.stdout.decode().strip() == os.path.realpath(hostile.work / "a")


async def test_absolute_symlink_is_refused_even_inside(confined: LocalExecutor) -> None:
    """An absolute symlink is refused even when it points inside, as RESOLVE_BENEATH does."""
    with pytest.raises(PolicyDenied, match="only relative symlinks"):
        await confined.exec_cmd(Command.read_file("to_work_abs/f.txt"))


async def test_spellings_that_merely_contain_special_characters_pass(
    confined: LocalExecutor, hostile: Tree
) -> None:
    r"""Names holding `$`, `~`, `%`, `\`, or dots in other places are ordinary files."""
    names = [
        "Foo$Bar.class",
        "~$report.docx",
        "notes~",
        "a..b",
        "...",
        "%41.txt",
        "back\\slash",
        "caf\u00e9",
    ]
    for name in names:
        await confined.exec_cmd(Command.write_file(f"a/{name}", name))
        assert (await confined.exec_cmd(Command.read_file(f"a/{name}"))).stdout == name.encode()
        assert (hostile.work / "a" / name).read_text() == name


async def test_write_replaces_a_symlink_that_stays_inside(
    confined: LocalExecutor, hostile: Tree
) -> None:
    """A symlink at the target is replaced, not followed, as an unconfined write does."""
    await confined.exec_cmd(Command.write_file("inside_file", "replaced"))
    assert not (hostile.work / "inside_file").is_symlink()
    assert (hostile.work / "inside_file").read_text() == "replaced"
    assert (hostile.work / "a" / "f.txt").read_text() == "INSIDE a/f.txt\n"


async def test_write_keeps_the_mode_and_makes_parents(
    confined: LocalExecutor, hostile: Tree
) -> None:
    """A confined write keeps a file's mode, makes missing folders, and leaves no temp file."""
    target = hostile.work / "a" / "f.txt"
    target.chmod(0o640)
    await confined.exec_cmd(Command.write_file("a/f.txt", "changed"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.read_text() == "changed"
    await confined.exec_cmd(Command.write_file("n1/n2/../n3/f", "deep"))
    assert (hostile.work / "n1" / "n3" / "f").read_text() == "deep"
    assert (hostile.work / "n1" / "n2").is_dir()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((hostile.work / "n1" / "n3" / "f").stat().st_mode) == 0o666 & ~umask


async def test_write_errors_match_unconfined(confined: LocalExecutor, hostile: Tree) -> None:
    """A write onto a folder, or below a file, fails as an unconfined write does."""
    for path in ("a", "a/", "a/b/..", "f.txt/x"):
        with pytest.raises(NonZeroExit):
            await confined.exec_cmd(Command.write_file(path, "x"))
    assert (hostile.work / "f.txt").read_text() == "INSIDE f.txt\n"


async def test_missing_current_dir_fails_like_unconfined(
    confined: LocalExecutor, hostile: Tree
) -> None:
    """A current_dir that is missing inside fails as a command, naming the folder."""
    with pytest.raises(NonZeroExit, match="cannot run in") as caught:
        await confined.exec_cmd(Command.shell("pwd").with_current_dir("missing"))
    assert caught.value.output.exit_code == 1
    assert str(hostile.work / "missing") in str(caught.value)


async def test_child_inherits_no_descriptor(confined: LocalExecutor, hostile: Tree) -> None:
    """The descriptor the child starts through is closed before the program runs."""
    output = await confined.exec_cmd(
        Command.exec(
            ["sh", "-c", 'for fd in /proc/$$/fd/*; do readlink "$fd"; done; true']
        ).with_current_dir("a")
    )
    targets = output.stdout.decode().split()
    assert not [target for target in targets if target.startswith(str(hostile.root))], targets


async def test_scoped_executor_stays_confined(confined: LocalExecutor, hostile: Tree) -> None:
    """A scope over a confined executor joins paths; the executor still refuses escapes."""
    scoped = confined.scoped("a")
    assert (await scoped.exec_cmd(Command.read_file("../f.txt"))).stdout == b"INSIDE f.txt\n"
    assert (await scoped.scoped("b").exec_cmd(Command.read_file("f.txt"))).stdout.startswith(
        b"INSIDE"
    )
    with pytest.raises(PolicyDenied, match="outside the workdir"):
        await scoped.exec_cmd(Command.read_file("../../outside/secret.txt"))
    with pytest.raises(PolicyDenied, match="outside the workdir"):
        await scoped.exec_cmd(Command.shell("pwd").with_current_dir("../.."))
    with pytest.raises(PolicyDenied, match="outside the workdir"):
        await _drain(scoped, "up")


async def test_listing_follows_no_symlink_out(confined: LocalExecutor, hostile: Tree) -> None:
    """stream_files over the workdir never yields content from outside."""
    listed = {loaded.path: loaded.content async for loaded in confined.stream_files(".")}
    assert listed
    assert not [path for path, content in listed.items() if content.startswith("OUTSIDE")]


async def test_listing_a_file_root(confined: LocalExecutor, hostile: Tree) -> None:
    """A file named as the root is listed by itself, filtered by extension, as unconfined."""
    found = [(f.path, f.content) async for f in confined.stream_files("inside/f.txt")]
    assert found == [("inside/f.txt", "INSIDE a/f.txt\n")]
    assert [f.path async for f in confined.stream_files("a/f.txt", ["py"])] == []
    assert [f.path async for f in confined.stream_files("a/f.txt", ["txt"])] == ["a/f.txt"]
    os.mkfifo(hostile.work / "a" / "fifo")
    assert [f.path async for f in confined.stream_files("a/fifo")] == []


async def test_listing_a_missing_root_names_it(confined: LocalExecutor) -> None:
    """A missing root (or one below a file) raises FileNotFoundError naming the path given."""
    for path in ("missing", "f.txt/below"):
        with pytest.raises(FileNotFoundError, match=path):
            await _drain(confined, path)


async def test_listing_a_subfolder_applies_ignore_files_above_it(tmp_path: Path) -> None:
    """Listing `src` of a repository hides what the repository's .gitignore ignores."""
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".gitignore").write_text("generated/\n")
    (work / "src" / "generated").mkdir(parents=True)
    (work / "src" / "a.py").write_text("a\n")
    (work / "src" / "generated" / "b.py").write_text("b\n")
    async with LocalExecutor(work) as unconfined:
        assert [f.path async for f in unconfined.stream_files("src")] == ["src/a.py"]
    async with LocalExecutor(work, confine=True) as executor:
        assert [f.path async for f in executor.stream_files("src")] == ["src/a.py"]


async def test_hardlink_to_outside_is_inside_by_name(
    confined: LocalExecutor, hostile: Tree
) -> None:
    """Confinement is by path, not inode: a hard link inside to an outside file is inside."""
    try:
        os.link(hostile.outside / "f.txt", hostile.work / "hard.txt")
    except OSError as error:
        pytest.skip(f"cannot make a hard link here: {error}")
    output = await confined.exec_cmd(Command.read_file("hard.txt"))
    assert output.stdout == b"OUTSIDE f.txt\n"


async def test_unconfined_executor_is_unchanged(hostile: Tree) -> None:
    """Without `confine`, paths resolve as before: symlinks out and `..` are followed."""
    async with LocalExecutor(hostile.work) as executor:
        through_link = await executor.exec_cmd(Command.read_file("to_outside_rel/secret.txt"))
        assert through_link.stdout == b"OUTSIDE secret\n"
        up = await executor.exec_cmd(Command.read_file("../outside/secret.txt"))
        assert up.stdout == b"OUTSIDE secret\n"
        where = await executor.exec_cmd(Command.shell("pwd").with_current_dir("/"))
        assert where.stdout == b"/\n"


# --- the workdir's descriptor ----------------------------------------------------------------


async def test_workdir_is_opened_once_and_closed_by_aclose(hostile: Tree) -> None:
    """The workdir is opened at first use, kept, and closed by aclose; later calls are refused."""

    def holding() -> int:
        return sum(
            os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(hostile.work)
            for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")
        )

    before = holding()
    executor = LocalExecutor(hostile.work, confine=True, kill_grace=0.2)
    assert holding() == before
    await executor.exec_cmd(Command.read_file("f.txt"))
    await executor.exec_cmd(Command.shell("true"))
    assert holding() == before + 1
    await executor.aclose()
    assert holding() == before
    with pytest.raises(ExecutorError, match="closed"):
        await executor.exec_cmd(Command.read_file("f.txt"))


async def test_missing_workdir_is_an_executor_error_until_made(tmp_path: Path) -> None:
    """A workdir missing at first use is the executor's error; once it exists, calls work."""
    async with LocalExecutor(tmp_path / "later", confine=True, kill_grace=0.2) as executor:
        for command in (Command.read_file("f"), Command.shell("true")):
            with pytest.raises(ExecutorError, match="cannot open the workdir"):
                await executor.exec_cmd(command)
        (tmp_path / "later").mkdir()
        await executor.exec_cmd(Command.write_file("f", "now"))
        assert (tmp_path / "later" / "f").read_text() == "now"


async def test_renamed_workdir_is_still_the_one_opened(hostile: Tree) -> None:
    """After first use the executor keeps the directory it opened, even if the path moves."""
    async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
        await executor.exec_cmd(Command.read_file("f.txt"))
        moved = hostile.root / "moved"
        hostile.work.rename(moved)
        hostile.work.mkdir()
        try:
            output = await executor.exec_cmd(Command.read_file("f.txt"))
            assert output.stdout == b"INSIDE f.txt\n"
            where = await executor.exec_cmd(Command.exec(["pwd", "-P"]))
            assert where.stdout.decode().strip() == os.path.realpath(moved)
        finally:
            hostile.work.rmdir()
            moved.rename(hostile.work)


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM])
async def test_blocked_openat2_falls_back_to_the_walk(
    hostile: Tree, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """When openat2 is missing or filtered (ENOSYS, EPERM), the walk confines just the same."""

    def blocked(dir_fd: int, path: str, flags: int, resolve: int) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(_confine, "_kernel", None)
    monkeypatch.setattr(_confine, "_openat2", blocked)
    assert not _confine.kernel_resolves_beneath()
    async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
        assert (await executor.exec_cmd(Command.read_file("inside/f.txt"))).stdout.startswith(
            b"INSIDE"
        )
        with pytest.raises(PolicyDenied, match="symlink 'to_outside_rel'"):
            await executor.exec_cmd(Command.read_file("to_outside_rel/secret.txt"))


async def test_kernel_refusal_is_explained(hostile: Tree, resolver: str) -> None:
    """Both resolvers name the symlink at fault, not just "cross-device link"."""
    async with LocalExecutor(hostile.work, confine=True, kill_grace=0.2) as executor:
        with pytest.raises(PolicyDenied) as caught:
            await executor.exec_cmd(Command.read_file("chain1/secret.txt"))
    assert "symlink 'chain3'" in str(caught.value)


# --- the resolver on its own -----------------------------------------------------------------


def test_open_beneath_does_not_create() -> None:
    """open_beneath refuses O_CREAT: a file is made by a plain name in a folder opened beneath."""
    with pytest.raises(ValueError, match="does not create"):
        _confine.open_beneath(0, "x", os.O_CREAT | os.O_WRONLY, shown="x")


def test_making_folders_through_a_dangling_symlink_fails_as_makedirs(
    hostile: Tree, resolver: str
) -> None:
    """A missing parent that is a dangling symlink is not made: FileExistsError, as makedirs."""
    os.symlink("nowhere", hostile.work / "dangling_in")
    root = os.open(hostile.work, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            _confine.open_dir_beneath(root, "dangling_in/x", shown="dangling_in/x", create=True)
        fd = _confine.open_dir_beneath(root, "new/../made/x", shown="new/../made/x", create=True)
        os.close(fd)
    finally:
        os.close(root)
    assert not (hostile.work / "nowhere").exists()
    assert (hostile.work / "new").is_dir()
    assert (hostile.work / "made" / "x").is_dir()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/w/x", "x"),
        ("/w//./x/", "x/"),
        ("/w/x/../y", "x/../y"),
        ("/w", "."),
        ("/w/.", "."),
        ("/real/w/x", "x"),
    ],
)
def test_relative_to_workdir_keeps_the_rest(path: str, expected: str) -> None:
    """A path under any spelling of the workdir keeps its rest exactly, trailing slash and `..`."""
    assert _confine.relative_to_workdir(path, ("/w", "/real/w"), path) == expected


@pytest.mark.parametrize("path", ["/wx/y", "/", "/real", "/w/../w/x", "/w/x/../../y"])
def test_relative_to_workdir_refuses(path: str) -> None:
    """A path beside the workdir, above it, or climbing out of it on the text is refused."""
    with pytest.raises(PathRefused, match="outside the workdir"):
        _confine.relative_to_workdir(path, ("/w", "/real/w"), path)


# --- generated paths -------------------------------------------------------------------------

# Names that lead somewhere inside, and names that lead out or nowhere.
INSIDE_PIECES = [
    "a",
    "a/b",
    "a/b/c",
    "b",
    "inside",
    "inside/b",
    "a/b/back",
    "back",
    "inside_file",
    ".",
    "..",
    "",
]
HOSTILE_PIECES = [
    "..",
    "up",
    "deep",
    "sideways",
    "a/up",
    "a/deep",
    "a/sideways",
    "to_parent",
    "to_parent_slash",
    "to_outside_rel",
    "to_outside_abs",
    "outside",
    "secret.txt",
    "chain1",
    "loop1",
    "dangling_out",
    "proc_cwd",
]


@st.composite
def generated_paths(draw: st.DrawFn) -> str:
    """Paths of names in the trap tree, `.`, `..` and empty parts; some absolute, half to a file."""
    # Inside names weigh more, so that many paths lead somewhere.
    piece = st.sampled_from(INSIDE_PIECES * 3 + HOSTILE_PIECES)
    parts = draw(st.lists(piece, min_size=1, max_size=5))
    if draw(st.booleans()):
        parts.append("f.txt")
    path = "/".join(parts) or "."  # a command's path is never empty
    if draw(st.integers(0, 3)) == 0:
        path = "{work}/" + path
    return path


@pytest.mark.slow
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(template=generated_paths())
async def test_generated_paths_stay_beneath_or_are_refused(resolver: str, template: str) -> None:
    """Any generated path is either refused or reads, writes, lists and starts commands inside."""
    with tempfile.TemporaryDirectory(prefix="confine-") as directory:
        tree = build_tree(Path(directory))
        path = template.replace("{work}", str(tree.work))
        inside = os.path.realpath(tree.work)
        before = tree.snapshot()
        async with LocalExecutor(tree.work, confine=True, kill_grace=0.2) as executor:
            try:
                output = await executor.exec_cmd(Command.read_file(path))
            except (PolicyDenied, NonZeroExit) as error:
                event(f"read: {type(error).__name__}")
            else:
                event("read: done")
                assert output.stdout.startswith(b"INSIDE"), output.stdout
            try:
                async for loaded in executor.stream_files(path):
                    assert loaded.content.startswith("INSIDE"), loaded
            except (PolicyDenied, OSError) as error:
                event(f"list: {type(error).__name__}")
            else:
                event("list: done")
            try:
                output = await executor.exec_cmd(Command.exec(["pwd", "-P"]).with_current_dir(path))
            except (PolicyDenied, NonZeroExit) as error:
                event(f"current_dir: {type(error).__name__}")
            else:
                event("current_dir: done")
                where = output.stdout.decode().strip()
                assert where == inside or where.startswith(inside + "/"), where
            marker = f"INSIDE written to {path!r}"
            try:
                await executor.exec_cmd(Command.write_file(path, marker))
            except (PolicyDenied, NonZeroExit) as error:
                event(f"write: {type(error).__name__}")
            else:
                event("write: done")
                holders = [
                    entry
                    for entry in _entries(tree.work)
                    if entry.is_file() and not entry.is_symlink() and entry.read_text() == marker
                ]
                assert holders, f"the write to {path!r} landed nowhere inside"
        assert tree.snapshot() == before
        assert not tree.temporaries()


async def test_confined_listing_applies_the_same_ignore_files_as_unconfined(
    tmp_path: Path,
) -> None:
    """Ignore files of the workdir, above it and between it and the folder hide the same files."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.log\n")
    work = repo / "work"
    (work / "a" / "b").mkdir(parents=True)
    (work / ".ignore").write_text("skip/\n")
    (work / "a" / ".gitignore").write_text("*.tmp\n")
    for name in ("keep.py", "x.log", "y.tmp", "skip/z.py"):
        target = work / "a" / "b" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("text\n")
    for folder in (".", "a", "a/b"):
        async with LocalExecutor(work) as unconfined:
            expected = [f.path async for f in unconfined.stream_files(folder)]
        async with LocalExecutor(work, confine=True) as executor:
            assert [f.path async for f in executor.stream_files(folder)] == expected
        assert [p.rsplit("/", 1)[-1] for p in expected] == ["keep.py"]


async def test_listing_through_a_symlink_inside_keeps_the_folders_own_rules(
    tmp_path: Path,
) -> None:
    """A folder reached through a symlink inside the workdir is listed with its own rules."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / ".ignore").write_text("*.tmp\n")
    (work / "src" / "a.py").write_text("a\n")
    (work / "src" / "b.tmp").write_text("b\n")
    (work / "alias").symlink_to("src")
    async with LocalExecutor(work, confine=True) as executor:
        assert [f.path async for f in executor.stream_files("alias")] == ["alias/a.py"]
