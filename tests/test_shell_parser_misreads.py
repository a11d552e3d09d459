"""What tree-sitter-bash misreads, read as bash reads it: the respellings of the parser.

tree-sitter-bash 0.25 misreads some scripts bash accepts, in two ways: it
gives up (an ERROR node), or, worse, it reads them otherwise without a word
(a command run on into the next line, a backtick closed by the wrong one).
Each case here is a construct of that kind, in hostile or odd spellings:
every one is valid bash (checked with `bash -n` where bash is installed),
parses, passes `DangerousCommands` when what it runs is harmless, and is
refused when `rm -rf /` is put where a command runs in it.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor._core.errors import ShellParseError
from executor._policies.rules import check_script
from executor._shell.parser import parse_script

# `X` marks where a command runs.
CASES = {
    # Backticks inside double quotes, with quoted blanks in them.
    "backtick-in-quotes-quoted-blank": (
        "echo \"`gettext 'Select an editor.  To change'`\" \"'select-editor'.\"\nX"
    ),
    "two-backticks-in-quotes": "echo \"`gettext 'a b'` `X`\"",
    "backtick-after-blanks-in-quotes": "desc=\"        <---- ` gettext 'easiest'; X`\"",
    "backtick-escaped-quotes-in-quotes": 'echo "`echo \\"a b\\"; X`"',
    "backtick-in-quotes-in-function-with-heredoc": (
        "f() {\n  cat <<EOF\nusage: f [ a ]\nEOF\n  echo \"`gettext 'a  b'` `X`\"\n}\nf"
    ),
    "two-backticks": "echo `echo a` `X`",
    "nested-backticks": "echo `echo \\`X\\``",
    # Subshells in backticks.
    "subshell-in-backticks": "tmp=`(X) 2>/dev/null`",
    "subshell-in-backticks-in-group": "{ tmp=`(mktemp -d) 2>/dev/null` || {\n  X\n};}",
    "subshell-in-backticks-after-negation": (
        "! awk 'BEGIN { exit 1 }' &&\n"
        "    { tmp=`(X) 2>/dev/null` || {\n"
        '\ttmp=${TMPDIR-/tmp}/t.$$ &&\n\t(umask 77 && mkdir -- "$tmp")\n'
        "    };} &&\n"
        "    trap 'rm -fr -- \"$tmp\"' 0"
    ),
    "subshell-in-backticks-over-lines": "status=` ( \\\n  X\n ) 3>&1 `",
    # Backslashes in single quotes inside backticks, over lines.
    "sed-in-backticks-over-lines": (
        'pat=` echo "$pat" | \\\n'
        " sed -e 's/\\\\\\\\/\\\\\\\\\\\\\\\\/g' -e 's/|/\\\\\\|/g' -e 's/&/\\\\\\&/g' `\nX"
    ),
    "sed-in-backticks-of-for": (
        "for i in `unzip -Z1 \"$z\" | sed -e 's/\\\\\\\\/\\\\\\\\\\\\\\\\/g' `; do\n  X\ndone"
    ),
    "command-after-sed-in-backticks": "pat=` echo \"$pat\" | \\\n sed -e 's/\\\\\\\\/x/g' ; X `",
    # Case patterns with quoted blanks or escapes, over continued lines.
    "case-quoted-blanks-over-lines": (
        "case $v in\nless' '45[1-9]* | \\\nless' '4[6-9][0-9]* | \\\n"
        "less' '[5-9][0-9][0-9]*)\n   X;;\n*) :;;\nesac"
    ),
    "case-escaped-semicolons": (
        'case "$M" in\n  $MIME\\;*|*\\;$MIME\\;*|*\\;$MIME\\;|*\\;$MIME)\n    X\n    ;;\nesac'
    ),
    "case-escaped-blank": "case $x in $a\\ b) X;; esac",
    "case-escaped-parenthesis": "case $x in $a\\)) X;; esac",
    "case-ansi-c-blank": "case $x in abc$' 'd) X;; esac",
    "case-substitution-in-pattern": "case $x in ab' 'c|$(X)) :;; esac",
    "case-opening-parenthesis": "case $x in (less' '1) X;; esac",
    # `((` that is two subshells.
    "two-subshells-in-substitution": (
        "x=$(\n      ((X 4>&-\n        echo $? >&4) 3>&- 5<&- </dev/null |\n       cat) 5<&0\n)"
    ),
    "two-subshells-at-start": "((X) | cat)",
    "two-subshells-blank-inside": "(( X) | cat)",
    # Commands tree-sitter runs on into the next line.
    "pipeline-with-redirect-then-newline": "echo >x | cat | cat\nX >/dev/null",
    "elif-after-pipeline": (
        "if a; then\n  b 2>/dev/null | c | cut -d' ' -f4\nelif X 2>/dev/null; then\n  e\nfi"
    ),
    "assignments-then-newline": "slave () {\n\tdir=$1 filename=$2 target=$3\n\tX\n}\nslave",
    "pipeline-comment-then-newline": "a >x | c | d # note\nX >x",
    # `<>` with no number; a 0 before a redirect.
    "read-write-redirect": "if [ -t 0 ] && ! ( : <>/dev/tty ) 2>/dev/null; then X; fi",
    "descriptor-zero": "cat 0<f; X",
    # Commands after a here-document's start, on its line.
    "heredoc-then-semicolon": "cat > f <<EOF; X\nbody $(date)\nEOF\nls",
    "heredoc-redirect-then-semicolon": "cat <<EOF >f; X\nbody\nEOF",
    "heredoc-in-function-then-semicolon": "f() {\n  cat <<EOF; X\nbody\nEOF\n}\nf",
    # Here-documents in functions and groups.
    "heredocs-in-function-and-group": (
        "usage() {\n  cat << _USAGE\nxdg-mime - command line tool for querying information\n\n"
        "Synopsis\n\nxdg-mime query { filetype | default } ...\n_USAGE\n}\n"
        "{\n  cat <<EOF\nx $(X)\nEOF\n}"
    ),
    # A negated or coprocess compound after `if`, `while` and `!`.
    "negated-group-after-if": "if ! { X; }; then :; fi",
    "negated-subshell-after-while": "while ! (X); do :; done",
    "negated-coproc-group": "! coproc { X; }",
    "negated-coproc-group-after-if": "if ! coproc { X; }; then :; fi",
    "timed-coproc-group-after-then": "if [ -f x ]; then time coproc { X; }; fi",
    "timed-negated-coproc-subshell": "! time ! coproc ( X )",
}

HARMLESS = "mkdir -p out"
HARMFUL = "rm -rf /"


def bash_accepts(script: str) -> bool | None:
    """Whether `bash -n` accepts `script`; None where there is no bash."""
    bash = shutil.which("bash")
    if bash is None:
        return None
    checked = subprocess.run([bash, "-n"], input=script.encode(), capture_output=True, check=False)
    return checked.returncode == 0


@pytest.mark.parametrize("name", list(CASES))
def test_construct_is_valid_bash(name: str) -> None:
    """Each case is a script bash accepts, harmless or harmful, so the corpus is valid."""
    for command in (HARMLESS, HARMFUL):
        accepted = bash_accepts(CASES[name].replace("X", command))
        if accepted is None:
            pytest.skip("no bash on this machine")
        assert accepted, name


@pytest.mark.parametrize("name", list(CASES))
def test_construct_parses_and_passes(name: str) -> None:
    """With a harmless command inside, each parses and DangerousCommands lets it through."""
    script = CASES[name].replace("X", HARMLESS)
    commands = parse_script(script)
    assert ("mkdir", "-p", "out") in [c.argv for c in commands], name
    findings = check_script(script)
    assert [f.rule for f in findings if f.rule != "rm-variable-target"] == [], (name, findings)


@pytest.mark.parametrize("name", list(CASES))
def test_harmful_command_inside_is_found(name: str) -> None:
    """With `rm -rf /` where a command runs, DangerousCommands finds it."""
    script = CASES[name].replace("X", HARMFUL)
    assert ("rm", "-rf", "/") in [c.argv for c in parse_script(script)], name
    assert "rm-root" in [f.rule for f in check_script(script)], name


def test_backtick_closed_by_the_next_backtick() -> None:
    """Two backtick substitutions in quotes are two, as bash pairs them, not one long one."""
    found = parse_script("echo \"`gettext 'a b'` `rm -rf /`\"")
    assert [(c.argv, c.nesting) for c in found] == [
        (("gettext", "a b"), ("`...`",)),
        (("rm", "-rf", "/"), ("`...`",)),
        (("echo", "`gettext 'a b'` `rm -rf /`"), ()),
    ]


def test_backslashed_quotes_in_backticks_in_quotes() -> None:
    r"""In double quotes, `\"` inside backticks loses its backslash: the program is `rm`."""
    found = parse_script('echo "`\\"rm\\" -rf /`"')
    assert ("rm", "-rf", "/") in [c.argv for c in found]
    # Outside quotes it keeps it: the program is `"rm"`, which bash runs as such.
    assert ('"rm"', "-rf", "/") in [c.argv for c in parse_script('echo `\\"rm\\" -rf /`')]


def test_backslashed_quotes_where_bash_and_dash_differ() -> None:
    r"""Here-documents: bash keeps the backslash of `\"` in backticks, dash drops it: both read."""
    script = 'cat <<EOF\n`\\"rm\\" -rf /`\nEOF'
    argvs = [c.argv for c in parse_script(script)]
    assert ("rm", "-rf", "/") in argvs
    assert ('"rm"', "-rf", "/") in argvs


def test_command_run_on_into_the_next_line_is_split() -> None:
    """`a >x | b | c` then `rm -rf /` on the next line: two commands, as bash runs them."""
    found = parse_script("a >x | b | c\nrm -rf / >/dev/null")
    assert [c.argv for c in found] == [("a",), ("b",), ("c",), ("rm", "-rf", "/")]
    assert [r.target.value for r in found[-1].redirects if r.target] == ["/dev/null"]


def test_assignments_alone_on_their_line() -> None:
    """`a=$1 b=$2` alone on a line sets variables; the next line's command has none of them."""
    found = parse_script("a=$1 b=$2\necho hi")
    assert [(c.argv, [w.value for w in c.assignments]) for c in found] == [
        ((), ["a=$1", "b=$2"]),
        (("echo", "hi"), []),
    ]


def test_descriptor_zero_and_read_write_redirect() -> None:
    """`cat 0<f` redirects descriptor 0 (no argument `0`); `<>f` opens f on stdin, to write."""
    (cat,) = parse_script("cat 0<f")
    assert cat.argv == ("cat",)
    assert [(r.op, r.fd, r.target.value if r.target else None) for r in cat.redirects] == [
        ("<", 0, "f")
    ]
    (colon,) = parse_script(": <>/dev/tty")
    assert [(r.op, r.writes, r.reads_stdin) for r in colon.redirects] == [("<>", True, True)]


def test_words_after_a_heredoc_start_are_arguments() -> None:
    """`rm <<EOF -rf /`: the words after the here-document's start are the command's."""
    (rm,) = parse_script("rm <<EOF -rf /\nbody\nEOF")
    assert rm.argv == ("rm", "-rf", "/")
    assert "rm-root" in [f.rule for f in check_script("rm <<EOF -rf /\nbody\nEOF")]
    (continued,) = parse_script("rm <<EOF -rf \\\n/\nbody\nEOF")
    assert continued.argv[:3] == ("rm", "-rf", "/")


def test_unreadable_still_refused_with_its_line() -> None:
    """What stays unreadable is refused, naming the line of the original script."""
    with pytest.raises(ShellParseError) as caught:
        parse_script("echo `a` `b`\necho \"`x 'y'`\"\nfi")
    assert "'fi'" in caught.value.reason
    with pytest.raises(ShellParseError) as unclosed:
        parse_script("echo ok\necho `unclosed")
    assert "line 2" in unclosed.value.reason or "backtick" in unclosed.value.reason


def test_backtick_in_single_quotes_is_no_substitution() -> None:
    """A backtick in single quotes next to a misread one is text: nothing runs from it."""
    found = parse_script("echo \"`gettext 'a b'`\" '`rm -rf /`'")
    assert ("rm", "-rf", "/") not in [c.argv for c in found]
    assert found[-1].argv == ("echo", "`gettext 'a b'`", "`rm -rf /`")


# --- hypothesis: the constructs above, nested in each other ------------------------------

_PLAIN = st.sampled_from(["ls -la", "echo hi", ":", "cat f", "x=1", "[ -f x ]"])


def _quoted(script: str) -> str:
    """`script` as the text of a backtick substitution: its backslashes and backticks quoted."""
    return script.replace("\\", "\\\\").replace("`", "\\`").replace("$", "\\$")


def _misread(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The constructs tree-sitter misreads, each running `inner` where a command runs."""
    return st.one_of(
        inner.map(lambda s: f"echo \"`gettext 'a b'` `{_quoted(s)}`\""),
        inner.map(lambda s: f"x=\"  <- ` gettext 'e'; {_quoted(s)}`\""),
        inner.map(lambda s: f"x=`({_quoted(s)}) 2>/dev/null`"),
        inner.map(lambda s: f"x=` echo \"$p\" | \\\n sed -e 's/\\\\\\\\/x/g' ; {_quoted(s)} `"),
        inner.map(lambda s: f"case $v in\nless' '4* | \\\nless' '5*)\n  {s};;\nesac"),
        inner.map(lambda s: f"case $v in\n  $M\\;*|*\\;$M)\n    {s};;\nesac"),
        inner.map(lambda s: f"y=$(\n  (({s}) | cat) 5<&0\n)"),
        inner.map(lambda s: f"echo >x | cat | cat\n{s}"),
        inner.map(lambda s: f"if :; then\n  b 2>x | c | d\nelif {s}; then :; fi"),
        inner.map(lambda s: f"f() {{\n  cat <<EOF\nusage [ a ]\nEOF\n  {s}\n}}\nf"),
        inner.map(lambda s: f"if ! ( : <>/dev/tty ) 2>/dev/null; then {s}; fi"),
        st.tuples(inner, st.integers(0, 10**6)).map(
            lambda p: f"{{ cat > f <<E{p[1]}; {p[0]}\nbody\nE{p[1]}\n}}"
        ),
    )


def _valid(script: str) -> bool:
    return bash_accepts(script) is not False


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(script=st.recursive(st.just(HARMFUL), _misread, max_leaves=3).filter(_valid))
def test_harmful_command_found_in_nested_misread_constructs(script: str) -> None:
    """`rm -rf /` nested anywhere in these constructs parses and is found."""
    assert "rm-root" in [f.rule for f in check_script(script)], script


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(script=st.recursive(_PLAIN, _misread, max_leaves=3).filter(_valid))
def test_harmless_nested_misread_constructs_pass(script: str) -> None:
    """The same constructs running harmless commands parse and pass DangerousCommands."""
    parse_script(script)
    assert check_script(script) == [], script


@pytest.mark.parametrize("script", ["- A=", "- 00=", "ls; - A=", "if true; then - A=; fi"])
def test_a_word_tree_sitter_drops_is_refused(script: str) -> None:
    """`- A=` runs `-` in bash; tree-sitter reads the assignment alone: refused, not misjudged."""
    assert bash_accepts(script) is not False
    with pytest.raises(ShellParseError, match="passed over a word"):
        parse_script(script + " # the full parser")
