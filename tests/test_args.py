"""Validated argument types: each rule, properties over hostile text, pydantic and @tool."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from pydantic import BaseModel, ValidationError

from executor._core.errors import InvalidArgument
from executor._tools.args import (
    BoundedInt,
    GitRange,
    GitRevision,
    RestrictedUrl,
    WorkspaceGlob,
    WorkspacePath,
)
from executor._tools.tools import ToolOutput, tool


class Lines(BoundedInt, minimum=1, maximum=10_000):
    """How many lines to show."""


class WebUrl(
    RestrictedUrl,
    schemes={"https"},
    hosts={"docs.python.org", "*.github.com", "127.0.0.1", "::1"},
    ports={8443},
):
    """A page the agent may fetch."""


def refused(kind: Any, raw: object) -> InvalidArgument:
    """Construct `kind(raw)`, expecting InvalidArgument whose message names the raw value."""
    with pytest.raises(InvalidArgument) as caught:
        kind(raw)
    # Long values are shortened in the message; their start is always shown.
    assert repr(raw)[:100] in str(caught.value)
    return caught.value


def texts(*specials: str, max_size: int = 12) -> st.SearchStrategy[str]:
    """Text built from tricky pieces and arbitrary characters (surrogates included)."""
    pieces = st.one_of(
        st.sampled_from(specials),
        st.characters(),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    )
    return st.lists(pieces, max_size=max_size).map("".join)


PATH_PIECES = ("/", ".", "..", "\0", " ", "\t", "\n", "\\", "~", "a", "\u2024", "\uff0f", "é")


# --- WorkspacePath ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("a", "a"),
        ("src/app.py", "src/app.py"),
        (" src/./pkg//mod.py \n", "src/pkg/mod.py"),
        ("./", "."),
        ("a/.", "a"),
        ("a..b/...", "a..b/..."),
        (".hidden/.x", ".hidden/.x"),
        ("a\\b", "a\\b"),
        ("café/naïve.txt", "café/naïve.txt"),
        ("a/b/", "a/b"),
    ],
)
def test_workspace_path_accepts_and_normalises(raw: str, normal: str) -> None:
    """A relative path is accepted and normalised, keeping the raw value."""
    path = WorkspacePath(raw)
    assert str(path) == os.fspath(path) == normal
    assert path.raw == raw


# Each hostile path is either refused with the rule named, or accepted as
# ordinary names (the listed parts) that cannot leave the workspace.
HOSTILE_PATHS: list[tuple[str, str | tuple[str, ...]]] = [
    ("..", "'..'"),
    ("../x", "'..'"),
    ("../../etc/passwd", "'..'"),
    ("a/..", "'..'"),
    ("a/../b", "'..'"),
    ("a/./../../b", "'..'"),
    ("./../x", "'..'"),
    ("a//..//b", "'..'"),
    (" ../x ", "'..'"),
    ("a/../../../../../../../../etc/shadow", "'..'"),
    ("/etc/passwd", "relative"),
    ("//etc/passwd", "relative"),
    ("/", "relative"),
    (" /x", "relative"),
    ("/./x", "relative"),
    ("", "empty"),
    ("   ", "blank"),
    ("\t\n\u3000", "blank"),
    ("a\0b", "NUL"),
    ("\0", "NUL"),
    ("../\0", "NUL"),
    ("a\udc80b", "surrogate"),
    ("\ud800", "surrogate"),
    ("x/\udfff", "surrogate"),
    ("~", ("~",)),
    ("~/.ssh/id_rsa", ("~", ".ssh", "id_rsa")),
    ("~root/x", ("~root", "x")),
    ("\u2024\u2024/x", ("\u2024\u2024", "x")),
    ("\uff0e\uff0e/x", ("\uff0e\uff0e", "x")),
    ("..\uff0fx", ("..\uff0fx",)),
    ("..\\x", ("..\\x",)),
    ("..\\..\\windows", ("..\\..\\windows",)),
    ("C:\\Windows", ("C:\\Windows",)),
    ("...", ("...",)),
    (".. ", "'..'"),
    ("a/.. /b", ("a", ".. ", "b")),
    ("%2e%2e/x", ("%2e%2e", "x")),
    ("$HOME/x", ("$HOME", "x")),
    ("a\u2215b", ("a\u2215b",)),
    ("file:///etc/passwd", ("file:", "etc", "passwd")),
]


@pytest.mark.parametrize(("raw", "expected"), HOSTILE_PATHS)
def test_workspace_path_hostile(raw: str, expected: str | tuple[str, ...]) -> None:
    """A hostile path is refused naming the value and rule, or is only harmless literal names."""
    if isinstance(expected, str):
        assert expected in refused(WorkspacePath, raw).rule
        return
    path = WorkspacePath(raw)
    assert path.parts == expected
    joined = posixpath.normpath(posixpath.join("/workspace", path))
    assert joined.startswith("/workspace/")


def test_hostile_path_list_is_long() -> None:
    """At least 30 hostile paths are checked, most of them refused."""
    assert len(HOSTILE_PATHS) >= 30
    assert sum(isinstance(expected, str) for _, expected in HOSTILE_PATHS) >= 20


@pytest.mark.parametrize("raw", [None, 5, b"a/b", ["a"], {"path": "a"}])
def test_workspace_path_refuses_non_text(raw: object) -> None:
    """A value that is not text is refused with InvalidArgument, not TypeError."""
    assert "text" in refused(WorkspacePath, raw).rule


def test_workspace_path_takes_path_like() -> None:
    """A relative os.PathLike, a WorkspacePath included, is accepted and normalised."""
    assert str(WorkspacePath(Path("a/b"))) == "a/b"
    assert str(WorkspacePath(WorkspacePath("x//y"))) == "x/y"


def expected_workspace_path(raw: str) -> bool:
    """The stated rule: non-blank, no NUL, not absolute, no '..' component, valid Unicode."""
    path = raw.strip()
    if not path or "\0" in path or path.startswith("/") or ".." in path.split("/"):
        return False
    try:
        path.encode("utf-8")
        os.fsencode(path)
    except UnicodeEncodeError:
        return False
    return True


@given(texts(*PATH_PIECES, max_size=16))
def test_workspace_path_accepts_exactly_the_stated_rule(raw: str) -> None:
    """WorkspacePath accepts a text exactly when the rule stated in its docstring holds."""
    try:
        WorkspacePath(raw)
    except InvalidArgument:
        accepted = False
    else:
        accepted = True
    assert accepted == expected_workspace_path(raw)


@given(texts(*PATH_PIECES, max_size=16))
def test_workspace_path_normal_form_stays_inside(raw: str) -> None:
    """Every accepted path, joined onto a root and normalised, stays under the root."""
    try:
        path = WorkspacePath(raw)
    except InvalidArgument:
        return
    for root in ("/workspace", "/"):
        joined = posixpath.normpath(posixpath.join(root, path))
        assert joined == root or joined.startswith(root.rstrip("/") + "/")
    assert str(path) == posixpath.normpath(raw.strip())
    assert ".." not in path.parts
    assert not str(path).startswith("/")


def test_workspace_path_joins_checked_parts() -> None:
    """Joining checks each added part, refusing an absolute one instead of rebasing it."""
    base = WorkspacePath("src")
    assert base / "pkg/mod.py" == WorkspacePath("src/pkg/mod.py")
    assert base.joinpath("a", "b") == WorkspacePath("src/a/b")
    assert WorkspacePath(".") / "x" == WorkspacePath("x")
    assert "relative" in refused(base.joinpath, "/etc").rule
    assert "'..'" in refused(base.joinpath, "../x").rule


def test_workspace_path_value_semantics() -> None:
    """Equal normal forms are equal and hash alike; parts of the root are empty."""
    assert WorkspacePath("a/b") == WorkspacePath("a//b/.")
    assert hash(WorkspacePath("a/b")) == hash(WorkspacePath("./a/b"))
    assert WorkspacePath("./").parts == ()
    assert repr(WorkspacePath("a")) == "WorkspacePath('a')"
    assert Path("/w") / WorkspacePath("x/y") == Path("/w/x/y")


# --- WorkspaceGlob ------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "*.py",
        "src/**/*.py",
        "**",
        "**/test_*.py",
        "*.{py,pyi}",
        "{src,tests}/**/*.py",
        ".github/workflows/*.yml",
        ".[!.]*",
        ".??*",
        "[Mm]akefile",
        "data/[0-9][0-9].csv",
        "*~",
        "./-rf",
        "a/#b",
        "?.txt",
        "...",
        "docs/",
    ],
)
def test_workspace_glob_accepts(raw: str) -> None:
    """Ordinary globs, including ** and brace lists, are accepted as given (trimmed)."""
    assert WorkspaceGlob(f" {raw}\n") == raw


# Every hostile glob is refused; the rule text says why.
HOSTILE_GLOBS: list[tuple[str, str]] = [
    ("..", "'..'"),
    ("../*", "'..'"),
    ("src/../../*", "'..'"),
    ("./../x", "'..'"),
    ("**/../..", "'..'"),
    (".*", "could match '..'"),
    (".*/secret", "could match '..'"),
    (".?", "could match '..'"),
    (".?/x", "could match '..'"),
    ("[.].", "could match '..'"),
    (".[.]", "could match '..'"),
    ("[.][.]", "could match '..'"),
    ("[!a].", "could match '..'"),
    (".[,-0]", "could match '..'"),
    (".[[:punct:]]", "'['"),
    ("[[:punct:]][[:punct:]]/x", "'['"),
    ("/etc/*", "relative"),
    ("//*", "relative"),
    ("{/etc,x}/*", "relative"),
    ("{..,x}/etc", "'..'"),
    ("{.,x}./etc", "'..'"),
    ("{.,x}*/etc", "could match '..'"),
    ("{a..c}", "'..'"),
    ("{abc}", "commas"),
    ("{-..0}{-..0}", "'..'"),
    ("x{a,b", "balanced"),
    ("x}", "balanced"),
    ("{{{{{a,b},c},d},e},f}", "nest"),
    ("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", "at most 64"),
    ("{,}", "alternative"),
    ("~", "'~'"),
    ("~/.ssh/*", "'~'"),
    ("~root/*", "'~'"),
    ("x/~+", "'~'"),
    ("a=~/x", "'~'"),
    ("b=c:~/y", "'~'"),
    ("{~,x}/*", "'~'"),
    ("-rf", "'-'"),
    ("{-rf,x}", "'-'"),
    ("#*", "'#'"),
    ("a\0b", "control"),
    ("a b", "whitespace"),
    ("*.py\n../x", "whitespace"),
    ("\t", "blank"),
    ("", "blank"),
    ("\\.\\./x", "backslash"),
    ("..\\x", "backslash"),
    ("$(rm -rf ~)", "whitespace"),
    ("$(id)", "$"),
    ("`id`", "`"),
    ("a;id", ";"),
    ("a|id", "|"),
    ("x>y", ">"),
    ("'..'/x", "quotes"),
    ('"..".', "quotes"),
    ("@(..)", "("),
    ("\ud800*", "surrogate"),
    ("a" * 1025, "1024"),
]


@pytest.mark.parametrize(("raw", "rule"), HOSTILE_GLOBS)
def test_workspace_glob_refuses_hostile(raw: str, rule: str) -> None:
    """A hostile glob is refused with InvalidArgument naming the raw value and the rule."""
    assert rule in refused(WorkspaceGlob, raw).rule


def test_hostile_glob_list_is_long() -> None:
    """At least 30 hostile globs are checked."""
    assert len(HOSTILE_GLOBS) >= 30


@pytest.mark.parametrize("raw", [None, 3, b"*.py", ["*.py"]])
def test_workspace_glob_refuses_non_text(raw: object) -> None:
    """A value that is not text is refused with InvalidArgument."""
    assert "text" in refused(WorkspaceGlob, raw).rule


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("*.py", ".hidden.py", True),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**/*.py", "src/.h/a.py", True),
        ("src/**/*.py", "src/a.pyc", False),
        ("src/**/*.py", "lib/src/a.py", False),
        ("**", "a/b/c", True),
        ("**/c", "c", True),
        ("a/**", "a", True),
        ("a/**", "a/b/c", True),
        ("*.{py,pyi}", "m.pyi", True),
        ("*.{py,pyi}", "m.pyc", False),
        ("{src,tests}/*.py", "tests/t.py", True),
        ("[Mm]akefile", "makefile", True),
        ("[!M]akefile", "Makefile", False),
        ("data/[0-9][0-9].csv", "data/42.csv", True),
        ("data/[0-9][0-9].csv", "data/4x.csv", False),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("a*b*c*d*e*f*g*h*z", "a" * 200, False),
        ("docs/", "docs", True),
        ("src/*.py", "./src//a.py", True),
        ("*", "..", False),
        ("**", "../x", False),
        ("**", "/etc/passwd", False),
        ("**", "", False),
        ("**", ".", False),
        ("*", "a\0b", False),
        ("x[", "x[", True),
    ],
)
def test_workspace_glob_match(glob: str, path: str, matches: bool) -> None:
    """match() follows the documented semantics and never matches a path that leaves the root."""
    assert WorkspaceGlob(glob).match(path) is matches


def test_workspace_glob_alternatives() -> None:
    """The alternatives property lists the brace-free patterns, in bash's order."""
    assert WorkspaceGlob("{src,tests}/*.{py,pyi}").alternatives == (
        "src/*.py",
        "src/*.pyi",
        "tests/*.py",
        "tests/*.pyi",
    )
    assert WorkspaceGlob("a{b,{c,d}}").alternatives == ("ab", "ac", "ad")


GLOB_PIECES = (
    "a",
    "b.py",
    ".",
    "..",
    "*",
    "**",
    "?",
    "[",
    "]",
    "!",
    "^",
    "-",
    ",",
    "{",
    "}",
    "/",
    "~",
    "=",
    ":",
    "#",
    "[.]",
    "[!a]",
    "src",
)


def glob_texts() -> st.SearchStrategy[str]:
    """Globs built from the pieces that matter to confinement."""
    return st.lists(st.sampled_from(GLOB_PIECES), min_size=1, max_size=8).map("".join)


@given(glob_texts(), texts(*PATH_PIECES, "*", "b.py", "src"))
def test_workspace_glob_never_matches_outside(raw: str, path: str) -> None:
    """An accepted glob matches only paths that stay inside a root when joined onto it."""
    try:
        glob = WorkspaceGlob(raw)
    except InvalidArgument:
        return
    if glob.match(path):
        joined = posixpath.normpath(posixpath.join("/workspace", path))
        assert joined.startswith("/workspace/")
        assert ".." not in path.split("/")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace `ws` with hidden and nested files, beside files it must not reach."""
    root = tmp_path_factory.mktemp("glob")
    for name in (
        "secret.txt",
        ".secret",
        "ws2/x.py",
        "ws/a.py",
        "ws/.hidden.py",
        "ws/src/m.py",
        "ws/src/.h/n.py",
        "ws/.git/config",
        "ws/.../x",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    return root


# Characters that must never reach a shell in a test, whatever a bug accepted.
_UNSAFE_FOR_TEST = set(";&|<>()$`\"'\\ \t\n\0")


def shell_expand(shell: str, root: Path, glob: str) -> list[str]:
    """What `shell` expands an unquoted glob to in the workspace (bash at its most permissive)."""
    assert not _UNSAFE_FOR_TEST & set(glob)
    setup = "shopt -s dotglob globstar nullglob; shopt -u globskipdots 2>/dev/null; "
    script = (setup if shell == "bash" else "") + f"cd ws && printf '%s\\n' {glob}"
    result = subprocess.run(
        [shell, "-c", script], cwd=root, capture_output=True, text=True, timeout=10, check=False
    )
    return [line for line in result.stdout.splitlines() if line]


def assert_inside(root: Path, results: list[str]) -> None:
    """Each expanded path, resolved from the workspace, is inside it."""
    workspace = os.path.realpath(root / "ws")
    for result in results:
        resolved = os.path.realpath(os.path.join(workspace, result))
        assert resolved == workspace or resolved.startswith(workspace + "/"), result


SHELLS = [shell for shell in ("bash", "dash") if shutil.which(shell)]


@pytest.mark.parametrize("shell", SHELLS)
def test_shell_expansion_of_refused_globs_would_escape(shell: str, tree: Path) -> None:
    """The oracle works: a refused glob such as `.*/secret.txt` does escape in a real shell."""
    escaped = [os.path.normpath(p) for p in shell_expand(shell, tree, ".*/secret.txt")]
    assert "../secret.txt" in escaped


@pytest.mark.parametrize("shell", SHELLS)
@settings(max_examples=150, deadline=None)
@given(raw=glob_texts())
def test_accepted_globs_stay_inside_in_a_real_shell(shell: str, tree: Path, raw: str) -> None:
    """A real shell expanding any accepted glob unquoted finds only paths inside the workspace."""
    try:
        glob = WorkspaceGlob(raw)
    except InvalidArgument:
        return
    assert_inside(tree, shell_expand(shell, tree, glob))


@pytest.mark.parametrize("shell", SHELLS)
def test_accepted_example_globs_stay_inside_in_a_real_shell(shell: str, tree: Path) -> None:
    """The accepted example globs, expanded by a real shell, stay inside the workspace."""
    for raw in ("*", "**", ".??*", ".[!.]*", "**/*.py", "?.py", "{src,.git}/*", "..."):
        assert_inside(tree, shell_expand(shell, tree, WorkspaceGlob(raw)))


# --- GitRevision and GitRange -------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "main",
        "HEAD",
        "HEAD~3",
        "HEAD~",
        "HEAD^",
        "main^2",
        "HEAD~2^2~1",
        "v1.2.3",
        "origin/main",
        "refs/heads/feature/x-y_z",
        "abcd",
        "0123456789abcdef0123456789abcdef01234567",
        "a" * 64,
        "release-2024.01",
        "a@b",
        "fix/café",
    ],
)
def test_git_revision_accepts(raw: str) -> None:
    """Branch, tag, commit and HEAD names, with ~N and ^N steps, are accepted."""
    assert GitRevision(f" {raw} ") == raw


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("-n", "'-'"),
        ("--output=/etc/passwd", "'-'"),
        (" -x", "'-'"),
        ("", "blank"),
        ("  ", "blank"),
        ("a b", "whitespace"),
        ("a\tb", "whitespace"),
        ("a\0b", "control"),
        ("a\x7fb", "control"),
        ("a\u202eb", "control"),
        ("main..HEAD", "'..'"),
        ("a...b", "'..'"),
        ("..", "'..'"),
        ("HEAD@{1}", "@{"),
        ("@{upstream}", "@{"),
        ("main@{yesterday}", "@{"),
        ("HEAD:secret.txt", "':'"),
        (":/fix", "':'"),
        ("ma?n", "'?'"),
        ("ma*n", "'*'"),
        ("ma[n", "'['"),
        ("ma\\n", "'\\\\'"),
        ("HEAD^{tree}", "may only end"),
        ("HEAD^!", "may only end"),
        ("HEAD^@", "may only end"),
        ("HEAD~x", "may only end"),
        ("HEAD~-1", "may only end"),
        ("^main", "must start with"),
        ("~1", "must start with"),
        ("@", "HEAD"),
        ("/main", "'/'"),
        ("main/", "'/'"),
        ("a//b", "'//'"),
        ("main.", "'.'"),
        (".hidden", "start with '.'"),
        ("a/.b", "start with '.'"),
        ("main.lock", ".lock"),
        ("a.lock/b", ".lock"),
        ("a" * 256, "255"),
    ],
)
def test_git_revision_refuses(raw: str, rule: str) -> None:
    """A revision git could misread is refused, naming the raw value and the rule."""
    assert rule in refused(GitRevision, raw).rule


@pytest.mark.parametrize("raw", [None, 7, b"main"])
def test_git_revision_refuses_non_text(raw: object) -> None:
    """A value that is not text is refused with InvalidArgument."""
    assert "text" in refused(GitRevision, raw).rule


REVISION_PIECES = ("-", " ", "\t", "..", ".", "/", "~", "^", "@{", "{", "}", "@", "main", "1")


@given(texts(*REVISION_PIECES))
def test_git_revision_never_starts_with_dash_or_holds_whitespace(raw: str) -> None:
    """An accepted revision never starts with '-' and holds no whitespace, '..' or '@{'."""
    try:
        revision = GitRevision(raw)
    except InvalidArgument:
        return
    assert revision == raw.strip()
    assert not revision.startswith("-")
    assert not any(char.isspace() or not char.isprintable() for char in revision)
    assert ".." not in revision
    assert "@{" not in revision


@settings(max_examples=60, deadline=None)
@given(texts(*REVISION_PIECES))
def test_git_revision_names_pass_git_check_ref_format(raw: str) -> None:
    """The name part of every accepted revision is one `git check-ref-format` accepts."""
    try:
        revision = GitRevision(raw)
    except InvalidArgument:
        return
    name = revision.split("~")[0].split("^")[0]
    result = subprocess.run(
        ["git", "check-ref-format", "--allow-onelevel", name],
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert result.returncode == 0, name


def test_git_range() -> None:
    """A range has two named sides joined by .. or ..., each a GitRevision."""
    plain = GitRange(" main..HEAD~2 ")
    assert plain == "main..HEAD~2"
    assert (plain.left, plain.right, plain.symmetric) == ("main", "HEAD~2", False)
    assert isinstance(plain.left, GitRevision)
    symmetric = GitRange("origin/main...feature")
    assert (symmetric.left, symmetric.right, symmetric.symmetric) == (
        "origin/main",
        "feature",
        True,
    )


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("main", "a..b"),
        ("main..", "both sides"),
        ("..HEAD", "both sides"),
        ("...", "both sides"),
        ("-x..main", "left side"),
        ("main..--output=x", "right side"),
        ("a..b..c", "'..'"),
        ("a....b", "'.'"),
        ("HEAD@{1}..HEAD", "@{"),
        ("a .. b", "whitespace"),
    ],
)
def test_git_range_refuses(raw: str, rule: str) -> None:
    """A malformed range is refused, naming the whole raw value and which side broke which rule."""
    assert rule in refused(GitRange, raw).rule


# --- BoundedInt ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [(1, 1), (10_000, 10_000), (5, 5), (5.0, 5), ("5", 5), (" 42\n", 42), ("+7", 7)],
)
def test_bounded_int_accepts(raw: object, value: int) -> None:
    """Whole numbers in bounds are accepted, from int, integral float or digit text."""
    lines = Lines(raw)
    assert lines == value
    assert isinstance(lines, int)
    assert isinstance(lines, Lines)
    assert lines + 1 == value + 1


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        (0, "from 1 to 10000"),
        (-1, "from 1 to 10000"),
        (10_001, "from 1 to 10000"),
        (10**100, "from 1 to 10000"),
        (1e300, "from 1 to 10000"),
        ("0", "from 1 to 10000"),
        (True, "whole number"),
        (False, "whole number"),
        (5.5, "whole number"),
        (float("nan"), "whole number"),
        (float("inf"), "whole number"),
        ("5.0", "whole number"),
        ("1e3", "whole number"),
        ("1_000", "whole number"),
        ("0x10", "whole number"),
        ("\u0665", "whole number"),
        ("", "whole number"),
        ("9" * 30, "whole number"),
        (None, "whole number"),
        ([5], "whole number"),
    ],
)
def test_bounded_int_refuses(raw: object, rule: str) -> None:
    """Out-of-range and non-integer values are refused, naming the raw value and the bounds."""
    assert rule in refused(Lines, raw).rule


@given(st.integers())
def test_bounded_int_accepts_exactly_its_range(number: int) -> None:
    """An int is accepted exactly when it lies within the bounds, both included."""
    try:
        Lines(number)
    except InvalidArgument:
        assert not 1 <= number <= 10_000
    else:
        assert 1 <= number <= 10_000


def test_bounded_int_schema_and_definition_errors() -> None:
    """The schema carries the bounds; bad bounds and the unbounded base fail loudly."""
    assert Lines.__json_schema__() == {"type": "integer", "minimum": 1, "maximum": 10_000}
    with pytest.raises(ValueError, match="above"):

        class Backwards(BoundedInt, minimum=5, maximum=1):
            pass

    with pytest.raises(TypeError, match="int"):

        class Flag(BoundedInt, minimum=False, maximum=1):
            pass

    with pytest.raises(TypeError, match="subclass"):
        BoundedInt(5)
    with pytest.raises(TypeError, match="subclass"):
        BoundedInt.__json_schema__()


def test_bounded_int_allows_zero_and_negative_bounds() -> None:
    """Bounds are any ints, so an offset from 0 or a signed range can be declared."""

    class Offset(BoundedInt, minimum=0, maximum=100):
        pass

    assert Offset(0) == 0
    assert "from 0 to 100" in refused(Offset, -1).rule


# --- RestrictedUrl ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("https://docs.python.org/3/", "https://docs.python.org/3/"),
        ("  https://docs.python.org/3/library/os.html#os.fspath \n", None),
        ("HTTPS://Docs.Python.ORG/3/", "https://docs.python.org/3/"),
        ("https://docs.python.org:443/x", "https://docs.python.org/x"),
        ("https://docs.python.org:8443/x", "https://docs.python.org:8443/x"),
        ("https://docs.python.org./x", "https://docs.python.org/x"),
        ("https://api.github.com/repos", "https://api.github.com/repos"),
        ("https://a.b.github.com/", "https://a.b.github.com/"),
        ("https://docs.python.org/search?q=é", "https://docs.python.org/search?q=%C3%A9"),
        ("https://docs.python.org/a%20b", "https://docs.python.org/a%20b"),
        ("https://docs.python.org/{x}", "https://docs.python.org/%7Bx%7D"),
        ("https://\uff44ocs.python.org/", "https://docs.python.org/"),
        ("https://docs\u3002python\u3002org/", "https://docs.python.org/"),
        ("https://127.0.0.1/x", "https://127.0.0.1/x"),
        ("https://[::1]:8443/x", "https://[::1]:8443/x"),
        ("https://[0:0::1]/", "https://[::1]/"),
        ("https://docs.python.org", "https://docs.python.org"),
    ],
)
def test_restricted_url_accepts_and_normalises(raw: str, normal: str | None) -> None:
    """An allowed URL is accepted as its normal form: lowercase ASCII host, default port dropped."""
    url = WebUrl(raw)
    assert url == (normal or raw.strip())
    assert url.isascii()
    assert WebUrl(url) == url


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("http://docs.python.org/", "https://"),
        ("ftp://docs.python.org/", "https://"),
        ("javascript:alert(1)", "https://"),
        ("file:///etc/passwd", "https://"),
        ("//docs.python.org/", "https://"),
        ("docs.python.org/x", "https://"),
        ("https:docs.python.org", "host"),
        ("https:///x", "host"),
        ("https://evil.com/", "not allowed"),
        ("https://github.com/", "not allowed"),
        ("https://evilgithub.com/", "not allowed"),
        ("https://x.github.com.evil.com/", "not allowed"),
        ("https://docs.python.org.evil.com/", "not allowed"),
        ("https://d\u043ecs.python.org/", "not allowed"),
        ("https://docs.python.org@evil.com/", "user"),
        ("https://user:pw@docs.python.org/", "user"),
        ("https://@docs.python.org/", "user"),
        ("https://evil.com\\@docs.python.org/", "backslash"),
        ("https://docs.python.org\\x", "backslash"),
        ("https://docs.python.org:8080/", "port 8080"),
        ("https://docs.python.org:0/", "port"),
        ("https://docs.python.org:99999/", "port"),
        ("https://docs.python.org:x/", "port"),
        ("https://docs.python.org:443:443/", "port"),
        ("https://10.0.0.1/", "not allowed"),
        ("https://127.1/", "four decimal"),
        ("https://2130706433/", "four decimal"),
        ("https://0x7f.0.0.1/", "four decimal"),
        ("https://0177.0.0.1/", "four decimal"),
        ("https://[::2]/", "not allowed"),
        ("https://[fe80::1%25eth0]/", "IPv6"),
        ("https://[1.2.3.4]/", "IPv"),
        ("https://[::1/", "not a valid URL"),
        ("https://docs%2epython.org/", "domain"),
        ("https://docs..python.org/", "domain"),
        ("https://-x.github.com/", "domain"),
        ("https://a\uff0fb.github.com/", "not a valid URL"),
        ("https://docs.python.org/a b", "whitespace"),
        ("https://docs.python.org/\r\nHost: evil", "whitespace"),
        ("https://docs.python.org/\0", "control"),
        ("https://docs.python.org/\x1b[31m", "control"),
        ("https://docs.python.org/\ud800", "control"),
        ("", "blank"),
        ("https://docs.python.org/" + "a" * 5000, "4096"),
    ],
)
def test_restricted_url_refuses(raw: str, rule: str) -> None:
    """A URL outside the allowed schemes, hosts and ports, or with tricks, is refused."""
    assert rule in refused(WebUrl, raw).rule


@pytest.mark.parametrize("raw", [None, 1, b"https://docs.python.org/"])
def test_restricted_url_refuses_non_text(raw: object) -> None:
    """A value that is not text is refused with InvalidArgument."""
    assert "text" in refused(WebUrl, raw).rule


URL_PIECES = (
    "https://",
    "http://",
    "docs.python.org",
    "github.com",
    ".github.com",
    "evil.com",
    "api",
    "@",
    ":",
    "443",
    "8443",
    "/",
    "?",
    "#",
    "[",
    "]",
    "::1",
    "%2e",
    ".",
    "\\",
    "\u043e",
    "\uff0e",
)


@given(texts(*URL_PIECES, max_size=8))
def test_restricted_url_only_reaches_allowed_hosts(raw: str) -> None:
    """Any accepted URL, as urllib splits it, uses an allowed scheme, host and port and no user."""
    try:
        url = WebUrl(raw)
    except InvalidArgument:
        return
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    assert parts.scheme == "https"
    assert parts.username is None
    assert parts.port in (None, 8443)
    assert host in {"docs.python.org", "127.0.0.1", "::1"} or host.endswith(".github.com")
    assert (url.scheme, url.host, url.port) == (parts.scheme, host, parts.port)
    assert url.isascii()


def test_restricted_url_parts_and_schema() -> None:
    """scheme, host and port come from the normal form; the schema says uri and what is allowed."""
    url = WebUrl("https://API.github.com:8443/x")
    assert (url.scheme, url.host, url.port) == ("https", "api.github.com", 8443)
    assert WebUrl("https://[::1]/").host == "::1"
    schema = WebUrl.__json_schema__()
    assert schema["type"] == "string"
    assert schema["format"] == "uri"
    assert "*.github.com" in schema["description"]
    assert "https" in schema["description"]


def test_restricted_url_definition_errors() -> None:
    """A subclass with no hosts, a bad host pattern or a bad scheme fails at definition."""
    with pytest.raises(ValueError, match="host"):

        class NoHosts(RestrictedUrl, schemes={"https"}, hosts=()):
            pass

    with pytest.raises(ValueError, match="host"):

        class Star(RestrictedUrl, schemes={"https"}, hosts={"*"}):
            pass

    with pytest.raises(ValueError, match="scheme"):

        class BadScheme(RestrictedUrl, schemes={"ht tp"}, hosts={"x.org"}):
            pass

    with pytest.raises(TypeError, match="sets"):

        class OneString(RestrictedUrl, schemes="https", hosts={"x.org"}):
            pass

    with pytest.raises(TypeError, match="subclass"):
        RestrictedUrl("https://x.org/")


def test_restricted_url_idn_allow_list() -> None:
    """An allow-listed Unicode host matches in its IDNA form, and only that host."""

    class Munich(RestrictedUrl, schemes={"https"}, hosts={"münchen.de"}):
        pass

    assert Munich("https://MÜNCHEN.de/") == "https://xn--mnchen-3ya.de/"
    assert Munich("https://xn--mnchen-3ya.de/") == "https://xn--mnchen-3ya.de/"
    assert "not allowed" in refused(Munich, "https://munchen.de/").rule


# --- pydantic -----------------------------------------------------------------------


class Args(BaseModel):
    path: WorkspacePath
    glob: WorkspaceGlob
    revision: GitRevision
    changes: GitRange
    lines: Lines
    url: WebUrl
    optional: WorkspacePath | None = None


GOOD_ARGS: dict[str, Any] = {
    "path": " src//app.py ",
    "glob": "**/*.py",
    "revision": "main~2",
    "changes": "main..HEAD",
    "lines": "20",
    "url": "https://docs.python.org/3/",
}


def test_pydantic_validates_into_the_types() -> None:
    """A pydantic model validates each field into its type and dumps JSON with plain values."""
    args = Args.model_validate(GOOD_ARGS)
    assert args.path == WorkspacePath("src/app.py")
    assert isinstance(args.glob, WorkspaceGlob)
    assert isinstance(args.revision, GitRevision)
    assert isinstance(args.changes, GitRange)
    assert args.lines == 20
    assert isinstance(args.lines, Lines)
    assert isinstance(args.url, WebUrl)
    dumped = json.loads(args.model_dump_json())
    assert dumped["path"] == "src/app.py"
    assert dumped["lines"] == 20
    assert Args.model_validate_json(args.model_dump_json()) == args


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("path", "../x", "a path must not contain '..'"),
        ("path", 5, "a path must be text"),
        ("glob", ".*", "could match '..'"),
        ("revision", "--upload-pack=x", "must not start with '-'"),
        ("changes", "main", "a..b"),
        ("lines", 0, "from 1 to 10000"),
        ("lines", True, "whole number"),
        ("url", "https://evil.com/", "not allowed"),
        ("optional", "/etc", "relative"),
    ],
)
def test_pydantic_reports_our_rule(field: str, value: object, rule: str) -> None:
    """A bad field raises pydantic's ValidationError carrying the raw value and the rule."""
    with pytest.raises(ValidationError) as caught:
        Args.model_validate({**GOOD_ARGS, field: value})
    errors = caught.value.errors()
    assert [error["loc"][0] for error in errors] == [field]
    assert rule in errors[0]["msg"]
    assert repr(value) in errors[0]["msg"]


def test_pydantic_json_schema_shows_the_types() -> None:
    """model_json_schema shows each field as the type's own JSON schema."""
    properties = Args.model_json_schema()["properties"]
    assert properties["path"]["type"] == "string"
    assert "relative path inside the workspace" in properties["path"]["description"]
    assert properties["glob"]["type"] == "string"
    assert properties["revision"]["maxLength"] == 255
    assert properties["lines"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 10_000,
        "title": "Lines",
    }
    assert properties["url"]["format"] == "uri"
    assert {"type": "null"} in properties["optional"]["anyOf"]


def test_package_does_not_import_pydantic() -> None:
    """Importing the validated types leaves pydantic unimported: it stays optional."""
    code = (
        "import sys, executor._tools.args\n"
        "assert 'pydantic' not in sys.modules and 'pydantic_core' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


# --- @tool --------------------------------------------------------------------------


TEN_LINES = Lines(10)


@tool
async def head(path: WorkspacePath, lines: Lines = TEN_LINES) -> str:
    """Show the first lines of a file.

    Args:
        path: File path relative to the workspace root.
        lines: How many lines to show.
    """
    return f"{type(path).__name__}({path}) {type(lines).__name__}({lines})"


@tool
async def fetch(url: WebUrl, revision: GitRevision | None = None) -> str:
    """Fetch a page.

    Args:
        url: The page.
        revision: A revision to name in the request.
    """
    return f"{url} {revision}"


def test_tool_spec_uses_the_types_schemas() -> None:
    """A @tool spec shows each validated parameter's JSON schema, description and default."""
    properties = head.spec["parameters"]["properties"]
    assert properties["path"]["type"] == "string"
    assert properties["path"]["description"] == "File path relative to the workspace root."
    assert properties["lines"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 10_000,
        "description": "How many lines to show.",
        "default": 10,
    }
    assert fetch.spec["parameters"]["properties"]["url"]["format"] == "uri"


@pytest.mark.anyio
async def test_tool_converts_valid_arguments() -> None:
    """A tool receives its arguments already converted into the validated types."""
    output = await head.invoke(None, '{"path": "src//a.py", "lines": "5"}')
    assert output == ToolOutput("WorkspacePath(src/a.py) Lines(5)")
    output = await fetch.invoke(None, {"url": "https://docs.python.org", "revision": "v1.2"})
    assert output == ToolOutput("https://docs.python.org v1.2")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ('{"path": "../x"}', ["'../x'", "argument 'path'", "a path must not contain '..'"]),
        ('{"path": "/etc/passwd"}', ["'/etc/passwd'", "relative to the workspace root"]),
        ('{"path": 5}', ["argument 'path'", "a path must be text"]),
        ('{"path": "a", "lines": 0}', ["argument 'lines'", "from 1 to 10000"]),
        ('{"path": "a", "lines": true}', ["argument 'lines'", "whole number"]),
    ],
)
async def test_tool_turns_bad_arguments_into_an_error_for_the_model(
    arguments: str, words: list[str]
) -> None:
    """A bad argument comes back as an error ToolOutput naming the argument, value and rule."""
    output = await head.invoke(None, arguments)
    assert output.is_error
    for word in words:
        assert word in output.text


@pytest.mark.anyio
async def test_tool_optional_validated_argument() -> None:
    """An optional validated argument takes null, and a bad value names the rule."""
    output = await fetch.invoke(None, {"url": "https://docs.python.org", "revision": None})
    assert output == ToolOutput("https://docs.python.org None")
    output = await fetch.invoke(None, {"url": "https://docs.python.org", "revision": "-x"})
    assert output.is_error
    assert "must not start with '-'" in output.text
    output = await fetch.invoke(None, {"url": "https://evil.com/"})
    assert output.is_error
    assert "not allowed" in output.text
