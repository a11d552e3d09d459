"""The real-world corpus: every shell script of this machine that bash accepts is read.

The corpus is found when the tests run, so it grows with the machine: every
maintainer script of the installed Debian packages
(`/var/lib/dpkg/info/*.{preinst,postinst,prerm,postrm}`) and every `sh`,
`bash` or `dash` script in `/usr/bin`, each one kept only if `bash -n`
accepts it. Each must parse without an exception, and none may be refused
for its syntax alone (`unparseable-script`): what bash reads, the policies
read. Other refusals are expected (a maintainer script that writes /etc is
rightly flagged); their counts by rule are printed with the test's output.

Some of these scripts are ones tree-sitter-bash 0.25 misreads (see
`tests/test_shell_parser_misreads.py` for the constructs): where one is on
this machine, a command it runs inside what is misread must be found, so
that such a script is not merely passed but read right.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from executor._core.errors import ShellParseError
from executor._policies.rules import check_script
from executor._shell.parser import parse_script

_SHELLS = (b"sh", b"bash", b"dash")

# Scripts of Debian packages tree-sitter-bash 0.25 misreads, with a command each
# runs inside what it misreads (its first words, and where it is found).
KNOWN: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # A backtick substitution inside double quotes, quoted blanks in it.
    "/usr/bin/select-editor": (("gettext", "easiest"), ("`...`",)),
    # `(mktemp -d) 2>/dev/null` in backticks.
    "/usr/bin/tzselect": (("mktemp", "-d"), ("`...`",)),
    # `((gzip ...) ...)` inside `$(...)`: two subshells.
    "/usr/bin/zdiff": (("gzip", "-cdfq", "--", "$file2"), ("$(...)",)),
    # Backslashes in single quotes inside backticks, over two lines.
    "/usr/bin/zipgrep": (("unzip", "-Z1", "$zipfile"), ("`...`",)),
    # Case patterns with quoted blanks, continued over lines.
    "/usr/bin/zless": (("less", "-V"), ("`...`",)),
    # `( : <>/dev/tty )`, and a pipeline tree-sitter runs on into the next line.
    "/usr/bin/xdg-open": (("get_key", "$file", "Terminal"), ("$(...)",)),
    # A pipeline run on into an `elif` line.
    "/usr/bin/xdg-mime": (("gnomevfs-info", "--help"), ()),
    # A case pattern `$MIME\;*`.
    "/usr/bin/xdg-settings": (("grep", "^MimeType="), ("`...`",)),
}
_MAINTAINER = ("preinst", "postinst", "prerm", "postrm")


def _is_shell_script(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            head = file.readline(256)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return False
    words = head[2:].split()
    if not words:
        return False
    program = os.path.basename(words[0])
    if program == b"env" and len(words) > 1:
        program = words[1]
    return program in _SHELLS


def corpus() -> list[Path]:
    """The scripts of this machine that `bash -n` accepts (empty where there are none)."""
    found: set[Path] = set()
    info = Path("/var/lib/dpkg/info")
    if info.is_dir():
        for suffix in _MAINTAINER:
            found.update(info.glob(f"*.{suffix}"))
    usr_bin = Path("/usr/bin")
    if usr_bin.is_dir():
        found.update(p for p in usr_bin.iterdir() if p.is_file() and _is_shell_script(p))
    bash = shutil.which("bash")
    if bash is None:
        return []
    accepted = []
    for path in sorted(found):
        checked = subprocess.run([bash, "-n", str(path)], capture_output=True, check=False)
        if checked.returncode == 0:
            accepted.append(path)
    return accepted


@pytest.fixture(scope="module")
def scripts() -> list[tuple[Path, str]]:
    """The corpus, read as text (bytes that are not UTF-8 kept as surrogates)."""
    found = corpus()
    if len(found) < 20:
        pytest.skip(f"this machine holds only {len(found)} shell scripts bash accepts")
    return [(path, path.read_text(encoding="utf-8", errors="surrogateescape")) for path in found]


def test_every_script_parses(scripts: list[tuple[Path, str]]) -> None:
    """Every script bash accepts parses without an exception."""
    failures: list[str] = []
    for path, text in scripts:
        try:
            parse_script(text)
        except ShellParseError as error:
            failures.append(f"{path}: {error.reason}")
    assert failures == [], "\n".join(failures)


def test_no_script_is_refused_for_syntax_alone(
    scripts: list[tuple[Path, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """DangerousCommands refuses no script for its syntax; the refusals by rule are reported."""
    by_rule: collections.Counter[str] = collections.Counter()
    unreadable = []
    passed = 0
    for path, text in scripts:
        findings = check_script(text)
        rules = sorted({finding.rule for finding in findings})
        by_rule.update(rules)
        passed += not findings
        if "unparseable-script" in rules:
            unreadable.append(f"{path}: {findings[0].reason}")
    with capsys.disabled():
        print(f"\n{len(scripts)} scripts: {passed} pass DangerousCommands, refused by rule:")
        for rule, count in by_rule.most_common():
            print(f"  {count:5d}  {rule}")
    assert unreadable == [], "\n".join(unreadable)


@pytest.mark.parametrize("path", list(KNOWN))
def test_commands_inside_misread_constructs_are_found(path: str) -> None:
    """In the scripts tree-sitter misreads, a command inside what it misreads is found."""
    script = Path(path)
    if not script.is_file() or not _is_shell_script(script):
        pytest.skip(f"{path} is not on this machine")
    text = script.read_text(encoding="utf-8", errors="surrogateescape")
    argv, nesting = KNOWN[path]
    found = [(command.argv[: len(argv)], command.nesting) for command in parse_script(text)]
    if not any(words == argv for words, _ in found):
        pytest.skip(f"{path} is another version, without `{' '.join(argv)}`")
    assert (argv, nesting) in found
