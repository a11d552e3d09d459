"""Path resolution that cannot leave a directory, however the path is spelled.

A confined `LocalExecutor` opens its workdir once and resolves every path a
command names *beneath* that directory descriptor:

- with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` where the
  kernel has it (Linux 5.6+, and not blocked by a seccomp filter): the kernel
  refuses, atomically with the open, any `..`, absolute path or symlink that
  would leave the directory, so no symlink swapped in between a check and the
  use can win a race;
- otherwise with a walk of our own, one component at a time, each opened with
  `O_NOFOLLOW` relative to the descriptor of the one before. It follows the
  same rules as the kernel: a symlink is followed only by reading it and
  walking its target from where it is, a relative target may go anywhere that
  stays beneath, an absolute target is refused (as `RESOLVE_BENEATH` does,
  even when it names a place inside), `..` goes back to the directory the walk
  came from and never above the root, and more than 40 links end the walk.
  Because every step opens a name relative to a descriptor already held, a
  swap between steps changes which *inside* file is reached, never whether the
  walk leaves.

Besides escapes, spellings that a model most likely meant as something else
are refused before any resolution (`~`, `$HOME`, Unicode or percent-encoded
look-alikes of `.` and `/`, a backslash standing for `/`), so that the model
is told instead of a folder named `~` appearing in the workdir.

Confinement is by path, not by inode: a hard link inside the workdir to a file
outside it is inside by name and is read and written like any other file
(making one takes a process that can already reach both). A directory moved
out of the workdir by another process while a call walks through it is not
detected either (the kernel's rule is the same); that takes write access
outside the workdir.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import stat
import threading
import unicodedata
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from executor._core.errors import PathRefused

# openat2's number is 437 on every architecture that shares the generic
# syscall table (all those listed); elsewhere (alpha, mips, ia64, x32) the
# walk is used instead of guessing.
_SYS_OPENAT2: Final = 437
_OPENAT2_MACHINES: Final = frozenset(
    {
        "x86_64",
        "amd64",
        "i386",
        "i686",
        "aarch64",
        "arm64",
        "armv7l",
        "armv8l",
        "riscv64",
        "ppc64le",
        "ppc64",
        "s390x",
        "loongarch64",
    }
)
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
# The kernel answers EAGAIN when a rename raced a `..` step; it asks for a retry.
_EAGAIN_RETRIES: Final = 16
# Linux's own limit on symlinks followed in one lookup (MAXSYMLINKS).
_MAX_LINKS: Final = 40

_DIRECTORY: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_TILDE: Final = re.compile(r"~[A-Za-z0-9._-]*")
_VARIABLE: Final = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")
# Characters that render as a slash but are not one (NFKC leaves them alone).
_SLASH_LOOKALIKES: Final = frozenset("\u2044\u2215\u29f8\u2571\u1735\u3033")


class _OpenHow(ctypes.Structure):
    # struct open_how from <linux/openat2.h>; its first version is 24 bytes.
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_lock = threading.Lock()
# None until probed; tests set it to False to exercise the walk.
_kernel: bool | None = None
_syscall: Callable[..., int] | None = None


def _openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    assert _syscall is not None
    how = _OpenHow(flags, 0, resolve)
    fd = int(
        _syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def kernel_resolves_beneath() -> bool:
    """Whether `openat2(RESOLVE_BENEATH)` works here; probed once, then remembered.

    A kernel older than 5.6 answers ENOSYS; a seccomp filter (Docker's default
    profile, some CI sandboxes) answers ENOSYS or EPERM. Either way the walk
    is used, with the same rules.
    """
    global _kernel, _syscall
    with _lock:
        if _kernel is not None:
            return _kernel
        _kernel = False
        if platform.machine().lower() not in _OPENAT2_MACHINES:
            return False
        try:
            function = ctypes.CDLL(None, use_errno=True).syscall
        except (OSError, AttributeError):
            return False
        function.restype = ctypes.c_long
        function.argtypes = (
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
        )
        _syscall = function
        root = os.open("/", _DIRECTORY)
        try:
            # Probing once tells a missing or filtered syscall (ENOSYS, EPERM)
            # apart from an EPERM a later open may meet for its own reasons.
            os.close(_openat2(root, ".", _DIRECTORY, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS))
        except OSError:
            return False
        finally:
            os.close(root)
        _kernel = True
        return True


def check_spelling(raw: str, shown: str) -> None:
    r"""Refuse spellings a model most likely meant as something else.

    Checked on the text a command gave, before it is joined onto the workdir:
    a NUL byte; a component that is a Unicode look-alike of `.`, `..` or
    holds one of `/` (U+2024 ONE DOT LEADER twice, fullwidth `.` or `/`,
    U+2215 DIVISION SLASH); a component that decodes, as a URL would, to `.`,
    `..` or something with `/` (`%2e%2e`); a component that holds `..`
    between backslashes (`..\..\etc`); `~` anywhere or `~user` first
    (no shell expands it here, and the home folder is outside the workdir);
    and a component that is a whole variable reference (`$HOME`, `${HOME}`).
    Names that merely contain these characters (`Foo$Bar.class`,
    `~$report.docx`, `notes~`) are ordinary files and pass.

    Args:
        raw: The path or `current_dir` exactly as the command gave it.
        shown: How to name the path in the refusal.

    Raises:
        PathRefused: The spelling is refused; the message says which rule.

    """
    if "\0" in raw:
        raise PathRefused(shown, "it contains a NUL byte", outside=False)
    parts = raw.split("/")
    for index, part in enumerate(parts):
        if part in ("", ".", ".."):
            continue
        # `~user` means a home folder only at the start; a bare `~` anywhere
        # (a scope joined in front moves it) is a folder no one wants.
        if part == "~" or (index == 0 and _TILDE.fullmatch(part)):
            raise PathRefused(
                shown,
                f"{part!r} is not expanded here: paths are relative to the workdir, "
                "and home folders are outside it",
                outside=False,
            )
        if _VARIABLE.fullmatch(part):
            raise PathRefused(
                shown,
                f"{part!r} is not expanded here: no shell reads this path, so write the "
                "path itself, relative to the workdir",
                outside=False,
            )
        folded = unicodedata.normalize("NFKC", part)
        if folded in (".", "..") or "/" in folded or not _SLASH_LOOKALIKES.isdisjoint(part):
            raise PathRefused(
                shown,
                f"{part!r} looks like {folded!r} but is not (a Unicode look-alike of '.' "
                "or '/'); write plain '.' and '/'",
                outside=False,
            )
        decoded = urllib.parse.unquote(part)
        if decoded != part and (decoded in (".", "..") or "/" in decoded or "\0" in decoded):
            raise PathRefused(
                shown,
                f"{part!r} is percent-encoded {decoded!r}; paths are not URL-decoded here",
                outside=False,
            )
        if "\\" in part and ".." in part.split("\\"):
            raise PathRefused(
                shown,
                f"{part!r} uses '\\' as a separator, which it is not here, around '..'",
                outside=False,
            )


def relative_to_workdir(path: str, workdirs: Sequence[str], shown: str) -> str:
    """`path`, absolute, made relative to the workdir it lies under, or refused.

    `workdirs` are the spellings of the workdir (absolute and normalised, such
    as the configured path and its real path); `path` is the workdir joined
    with what the command gave, so a relative command path comes back
    unchanged. The part after the workdir is kept exactly (trailing slash, `.`
    and `..` included): it is resolved beneath the workdir's descriptor later,
    which is what decides where symlinks lead. A `..` that climbs above the
    workdir on the text alone is refused here, before the disk is touched
    (also a path longer than PATH_MAX, which the kernel would refuse with a
    less helpful error). That also refuses the rare path whose `..` would,
    after a symlink, land inside again (`link/../..` with `link -> a/b`): the
    safe side, and consistent across both resolvers.

    Args:
        path: An absolute path.
        workdirs: The workdir's spellings.
        shown: How to name the path in a refusal.

    Returns:
        A relative path, `"."` for the workdir itself.

    Raises:
        PathRefused: `path` is not under the workdir, or its `..` climb out.

    """
    parts = path.split("/")
    rest: list[str] | None = None
    for workdir in workdirs:
        wanted = [part for part in workdir.split("/") if part]
        index = 0
        matched = 0
        while matched < len(wanted) and index < len(parts):
            part = parts[index]
            if part not in ("", "."):
                if part != wanted[matched]:
                    break
                matched += 1
            index += 1
        if matched == len(wanted):
            rest = parts[index:]
            break
    if rest is None:
        raise PathRefused(shown, "it is an absolute path that does not lie in the workdir")
    depth = 0
    for part in rest:
        if part == "..":
            depth -= 1
            if depth < 0:
                raise PathRefused(shown, "its '..' climbs above the workdir")
        elif part not in ("", "."):
            depth += 1
    # Only the joint is tidied (the separators and `.` after the workdir).
    while rest and rest[0] in ("", "."):
        rest.pop(0)
    return "/".join(rest) or "."


def open_beneath(root_fd: int, path: str, flags: int, *, shown: str) -> int:
    """Open `path` beneath the directory `root_fd`, never leaving it.

    Symlinks are followed while they stay beneath `root_fd`, also in the last
    component; an absolute symlink is refused even when it names a place
    inside. The descriptor is opened with `O_CLOEXEC`.

    Args:
        root_fd: The directory to stay beneath (an `O_PATH` descriptor will do).
        path: Relative to `root_fd`.
        flags: `os.open` flags, without `O_CREAT` (create with a plain name
            relative to a directory opened with `open_dir_beneath`).
        shown: How to name the path in a refusal.

    Returns:
        The new descriptor, which the caller closes.

    Raises:
        PathRefused: Resolution would leave `root_fd`, or follows too many
            symlinks (a loop).
        OSError: The open failed for any other reason (missing, not a directory...).

    """
    if flags & os.O_CREAT:
        raise ValueError("open_beneath does not create files")
    if path.startswith("/"):
        raise PathRefused(shown, "it is an absolute path")
    if kernel_resolves_beneath():
        for _ in range(_EAGAIN_RETRIES):
            try:
                return _openat2(
                    root_fd,
                    path,
                    flags | os.O_CLOEXEC,
                    _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS,
                )
            except OSError as error:
                if error.errno == errno.EAGAIN:
                    continue
                if error.errno in (errno.EXDEV, errno.ELOOP):
                    raise _explain(root_fd, path, shown, error.errno) from None
                raise
        # Still racing renames: the walk needs no retry, since it never trusts `..`.
    return _walk(root_fd, path, flags, shown)


def open_dir_beneath(root_fd: int, path: str, *, shown: str, create: bool = False) -> int:
    """Open the directory `path` beneath `root_fd` as an `O_PATH` descriptor.

    With `create`, missing directories are made one level at a time, each with
    `mkdir` relative to its parent's descriptor (mode 0o777 less the umask, as
    `os.makedirs`), so none is made outside. A refusal found only after some
    levels were made leaves those (empty, inside) folders behind.

    Args:
        root_fd: The directory to stay beneath.
        path: Relative to `root_fd`.
        shown: How to name the path in a refusal.
        create: Make missing directories.

    Returns:
        The new descriptor, which the caller closes.

    Raises:
        PathRefused: Resolution would leave `root_fd`.
        OSError: Missing (without `create`), not a directory, and the like.

    """
    try:
        return open_beneath(root_fd, path, _DIRECTORY, shown=shown)
    except FileNotFoundError:
        if not create:
            raise
    parts = [part for part in path.split("/") if part not in ("", ".")]
    made_last: int | None = None
    # Each round makes one directory or finds one made meanwhile; a round
    # that cannot make progress twice at the same level gives up.
    for _ in range(2 * len(parts) + 2):
        try:
            return open_beneath(root_fd, "/".join(parts) or ".", _DIRECTORY, shown=shown)
        except FileNotFoundError:
            pass
        missing = _first_missing(root_fd, parts, shown)
        name = parts[missing]
        if name == "..":
            # Only a directory removed while we walk has a missing `..`.
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown)
        parent = open_beneath(root_fd, "/".join(parts[:missing]) or ".", _DIRECTORY, shown=shown)
        try:
            os.mkdir(name, 0o777, dir_fd=parent)
        except FileExistsError:
            # A dangling symlink (which mkdir does not follow) or a racing
            # mkdir; the next round tells them apart.
            if made_last == missing:
                raise
            made_last = missing
        finally:
            os.close(parent)
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), shown)


def _first_missing(root_fd: int, parts: list[str], shown: str) -> int:
    for index in range(len(parts)):
        try:
            fd = open_beneath(root_fd, "/".join(parts[: index + 1]), _DIRECTORY, shown=shown)
        except FileNotFoundError:
            return index
        os.close(fd)
    # Everything exists now (made by someone else meanwhile): the caller retries.
    return len(parts) - 1


def _explain(root_fd: int, path: str, shown: str, code: int) -> PathRefused:
    # The kernel says only EXDEV or ELOOP; the walk, run on the same path,
    # names the `..` or the symlink at fault. If the tree changed meanwhile,
    # a general reason is given: the refusal itself stands either way.
    try:
        fd = _walk(root_fd, path, os.O_PATH, shown)
    except PathRefused as refused:
        return refused
    except OSError:
        pass
    else:
        os.close(fd)
    if code == errno.ELOOP:
        return PathRefused(
            shown, "it goes through too many symlinks, or a magic link", outside=False
        )
    return PathRefused(shown, "resolving it leads outside the workdir")


def _walk(root_fd: int, path: str, flags: int, shown: str) -> int:
    # The walk's state: the descriptors of the directories from the root to
    # where it is (the root itself is borrowed, never closed), their names for
    # messages, and the components still to go. Symlink targets are spliced
    # into `pending`; `..` pops a level, so it can only ever return to a
    # directory this walk opened, and popping past the root is an escape.
    texts = path.split("/")
    must_be_directory = texts[-1] in ("", ".", "..")
    pending = deque(part for part in texts if part not in ("", "."))
    opened: list[int] = []
    names: list[str] = []
    links = 0
    via: str | None = None
    try:
        while pending:
            name = pending.popleft()
            here = opened[-1] if opened else root_fd
            if name == "..":
                if not opened:
                    reason = "its '..' climbs above the workdir"
                    if via is not None:
                        reason = f"the symlink {via!r} leads out ('..' above the workdir)"
                    raise PathRefused(shown, reason)
                os.close(opened.pop())
                names.pop()
                continue
            final = not pending and not must_be_directory
            step = flags | os.O_NOFOLLOW | os.O_CLOEXEC if final else _DIRECTORY | os.O_NOFOLLOW
            try:
                fd = os.open(name, step, dir_fd=here)
            except OSError as error:
                # O_NOFOLLOW answers ELOOP for a final symlink, O_DIRECTORY
                # ENOTDIR for one on the way; anything else is the answer.
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _link_target(name, here)
                if target is None:
                    raise
            else:
                if not final:
                    opened.append(fd)
                    names.append(name)
                    continue
                if not (step & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode)):
                    return fd
                # O_PATH | O_NOFOLLOW opens a final symlink itself: read it instead.
                os.close(fd)
                target = _link_target(name, here)
                if target is None:
                    # Swapped for something else since the open: look again.
                    pending.appendleft(name)
                    links += 1
                    if links > _MAX_LINKS:
                        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown)
                    continue
            link = "/".join([*names, name])
            links += 1
            if links > _MAX_LINKS:
                raise PathRefused(
                    shown,
                    f"it goes through more than {_MAX_LINKS} symlinks (a loop at {link!r}?)",
                    outside=False,
                )
            if target.startswith("/"):
                raise PathRefused(
                    shown,
                    f"the symlink {link!r} points to the absolute path {target!r}; "
                    "only relative symlinks that stay in the workdir are followed",
                )
            if not pending and target.split("/")[-1] in ("", ".", ".."):
                must_be_directory = True
            pending.extendleft(
                reversed([part for part in target.split("/") if part not in ("", ".")])
            )
            via = link
        # Ended on a directory: the root, a trailing slash, `.` or `..`.
        here = opened[-1] if opened else root_fd
        return os.open(".", flags | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here)
    finally:
        for fd in opened:
            os.close(fd)


def _link_target(name: str, dir_fd: int) -> str | None:
    # None when `name` is not (or no longer) a symlink.
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.EINVAL:
            return None
        raise
