"""Reading a script with tree-sitter-bash, respelling what it misreads as bash reads it.

`tree` parses a script and, where the tree has an error, respells the
script as bash would read it (`_repair`) and parses it again, within a
budget; `respell` and `read_write` respell what tree-sitter-bash always
misreads before the first parse. Every respelling keeps the script's
length, so positions agree with the original text, from which every word is
read (`Text` holds both). The helpers that pair parentheses, braces and
backticks as bash does serve the walker too.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator

import tree_sitter
import tree_sitter_bash

from executor._core.errors import ShellParseError
from executor._shell.words import ansi_c_end

_local = threading.local()


def _ts_parser() -> tree_sitter.Parser:
    # A Parser is not safe to share between threads, and long scripts are
    # parsed in worker threads: one per thread, made once.
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
        _local.parser = parser
    return parser


_PLAIN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./,:+@%=-")
_EMPTY_ASSIGNMENTS = re.compile(
    r"^([ \t]*)((?:[A-Za-z_][A-Za-z0-9_]*=[^\s'\"`$\\;&|()<>]*[ \t]+)+)([A-Za-z_][A-Za-z0-9_]*=)$",
    re.MULTILINE,
)
_NEGATED_COMPOUND = re.compile(
    r"(?:^|(?<=[\n;&|({)!])|(?<=\bthen)|(?<=\bdo)|(?<=\belse)|(?<=\bif)|(?<=\belif)"
    r"|(?<=\bwhile)|(?<=\buntil))([ \t]*)"
    r"(?:time(?:[ \t]+-p)?(?=[ \t\n]|$)"
    r"|!(?=[ \t]+(?:(?:if|while|until|for|case|select|function|time)[ \t\n]|[{(!]|\[\["
    r"|[A-Za-z_][A-Za-z0-9_-]*[ \t]*\(\))))",
    re.MULTILINE,
)
_TEST_BRACKET = re.compile(r"(?:^|(?<=[\s;&|(!{]))\[(?=[ \t])", re.MULTILINE)
_COMMENT = re.compile(r"(?<![^ \t\n])#[^\n]*")
_QUOTED_NODES = frozenset(
    {"raw_string", "string_content", "comment", "heredoc_body", "heredoc_content", "ansi_c_string"}
)
EMPTY_SUBSTITUTION = re.compile(r"\$\([ \t]*\)")
_COMPOUND_START = re.compile(r"[{(]|(?:while|until|if|for|case|select|\[\[)(?=[\s;&|()])")
_COPROC = re.compile(
    r"(?:^|(?<=[\n;&|({)!])|(?<=\bthen)|(?<=\bdo)|(?<=\belse)|(?<=\bif)|(?<=\belif)"
    r"|(?<=\bwhile)|(?<=\buntil))"
    r"([ \t]*)(coproc[ \t]+(?:[A-Za-z_][A-Za-z0-9_]*[ \t]+)?)"
    r"(?=[{(]|(?:while|until|if|for|case|select|\[\[)[\s;&|()])",
    re.MULTILINE,
)


class Text:
    """The script as tree-sitter reads it (UTF-8) and as the parser does (str)."""

    def __init__(self, text: str, repaired: str) -> None:
        self.text = text
        self.repaired = repaired
        self.data = repaired.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(text)
        self._chars: list[int] | None = None
        # Operators a repair respelled, by the byte where the node now starts.
        self.ops: dict[int, str] = {}
        # Substitutions a repair hid from tree-sitter (spelt `$___`), by the
        # character where they start: where they end, the code inside (parsed
        # apart, as bash parses it) and the label of the substitution.
        self.deferred: dict[int, tuple[int, str, str]] = {}

    def respelt(self, repaired: str) -> Text:
        """The same script respelt otherwise, keeping what the repairs noted."""
        chars = Text(self.text, repaired)
        chars.ops, chars.deferred = self.ops, self.deferred
        return chars

    def defer(self, start: int, end: int, code: str, label: str) -> str:
        """Hide the substitution `text[start:end]` from tree-sitter; the respelt script.

        It is spelt `$___` (as long as it was), a parameter to tree-sitter;
        its code is parsed on its own, as bash parses a substitution's code.
        Lines are told from the original text, so the newlines it hides move
        no message.
        """
        self.deferred[start] = (end, code, label)
        return self.repaired[:start] + "$" + "_" * (end - start - 1) + self.repaired[end:]

    def char(self, byte: int) -> int:
        if self.ascii:
            return byte
        if self._chars is None:
            chars = [0] * (len(self.data) + 1)
            position = 0
            for index, c in enumerate(self.repaired):
                size = len(c.encode("utf-8", "surrogatepass"))
                for k in range(size):
                    chars[position + k] = index
                position += size
            chars[position] = len(self.repaired)
            self._chars = chars
        return self._chars[byte]

    def span(self, node: tree_sitter.Node) -> tuple[int, int]:
        return self.char(node.start_byte), self.char(node.end_byte)

    def of(self, node: tree_sitter.Node) -> str:
        start, end = self.span(node)
        return self.text[start:end]


class Misread(Exception):
    """tree-sitter read, without an error, something bash reads otherwise.

    `repaired` is the script respelt so that tree-sitter reads it as bash
    does, or `None` when there is no such respelling (it is then refused,
    with `reason`).
    """

    def __init__(self, reason: str, repaired: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.repaired = repaired


def _first_error(root: tree_sitter.Node) -> tree_sitter.Node:
    """The first ERROR or MISSING node, innermost, in document order (iteratively)."""
    node = root
    while True:
        for child in node.children:
            if child.is_missing or (child.is_error and not child.has_error):
                return child
            if child.has_error:
                node = child
                break
        else:
            return node


def _describe_error(text: str, node: tree_sitter.Node, chars: Text) -> str:
    start, end = chars.span(node)
    # From the text, not the tree: a respelling may have moved tree-sitter's rows.
    line = text.count("\n", 0, start) + 1
    if node.is_missing:
        return f"line {line}: a {node.type!r} is missing before {snippet(text, start)}"
    piece = " ".join(text[start:end].split())
    if not piece:
        return f"line {line}: it cannot read {snippet(text, start)}"
    if len(piece) > 60:
        piece = piece[:57] + "..."
    return f"line {line}: it cannot read {piece!r}"


def snippet(text: str, start: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start : len(text) if line_end < 0 else line_end].strip()
    if len(line) > 60:
        line = line[:57] + "..."
    return repr(line) if line else "the end of the script"


def _replace(text: str, start: int, new: str) -> str:
    return text[:start] + new + text[start + len(new) :]


def _repair(chars: Text, node: tree_sitter.Node) -> str | None:
    """A respelling of the script that bash reads the same way and tree-sitter can read.

    tree-sitter-bash misreads a few things bash accepts. Each repair here
    keeps the script's length (so positions agree with the original, from
    which every word is read) and its meaning for the policies; anything
    else stays unreadable and is refused.
    """
    text = chars.repaired
    start, end = chars.span(node)
    parent = node.parent
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end]
    # `$()`: an empty substitution (expands to nothing), which tree-sitter wants a
    # command in. Spelt as a parameter for the parser; the words say `$()`.
    empty: tree_sitter.Node | None = node
    while empty is not None and empty.type != "command_substitution":
        empty = empty.parent
    if empty is not None and EMPTY_SUBSTITUTION.fullmatch(chars.of(empty)):
        first, last = chars.span(empty)
        return text[:first] + "$" + "_" * (last - first - 1) + text[last:]
    # A backtick tree-sitter pairs otherwise than bash, or that holds what it
    # cannot read (a subshell, backslashes in quotes over lines): hidden, its
    # code parsed apart, as bash parses it.
    fixed = _backticks(chars, node, start, end)
    if fixed is not None:
        return fixed
    # A command run on into the next line before the error (see `run_on`).
    root = node
    while root.parent is not None:
        root = root.parent
    fixed = _first_joined(chars, root, end)
    if fixed is not None:
        return fixed
    # A case pattern tree-sitter cannot read (`less' '4*`, `$MIME\\;*`): its quoted
    # and escaped characters respelt `_`. They are literal, and a pattern's
    # text matters to no policy; its substitutions are kept.
    fixed = _case_pattern(chars, node)
    if fixed is not None:
        return fixed
    # `{a,b}` at the start of a command is a word, not a group (`{` needs a blank after it).
    group: tree_sitter.Node | None = node
    while group is not None and group.type != "compound_statement":
        group = group.parent
    if group is not None and group.children and group.children[0].type == "{":
        brace = chars.char(group.children[0].start_byte)
        if brace + 1 < len(text) and text[brace + 1] not in " \t\n":
            return _replace(text, brace, "_")
    if text.startswith("{", start) and start + 1 < len(text) and text[start + 1] not in " \t\n":
        return _replace(text, start, "_")
    # `cmd 2>&1 <<< word`: a here-string after another redirect.
    if node.is_error and text[start:end] == "<<" and text.startswith("<<<", start):
        chars.ops[node.start_byte] = "<<<"
        return _replace(text, start, "<  ")
    # `for name do` (no `in`, no `;`): POSIX, and bash's own scripts use it.
    match = re.search(r"\bfor[ \t]+[A-Za-z_][A-Za-z0-9_]*([ \t]+)do\b", line)
    if match is not None:
        return _replace(text, line_start + match.end(1) - 1, ";")
    # `;&` and `;;&` end a case item too; the policies read every item anyway.
    match = re.search(r";;&|;&", line)
    if match is not None:
        new = ";; " if match.group() == ";;&" else ";;"
        return _replace(text, line_start + match.start(), new)
    # `[ ... ` without its `]`, or with a bare `~` operand: `[` is a command, read as one.
    test = node if node.type == "test_command" else parent
    while test is not None and test.type not in ("test_command", "program"):
        test = test.parent
    if test is not None and test.type == "test_command":
        opener = test.children[0] if test.children else None
        if opener is not None and opener.type == "[":
            return _replace(text, chars.char(opener.start_byte), "_")
    # `((cmd) | x)`: two subshells, not arithmetic (bash reads it so too, when
    # what follows `((` is no arithmetic). Found in the error, or opening a node
    # around it (`((gzip -cd x) | y)` fails at `-cd`, inside the `((`).
    index = text.find("((", start, max(end, start + 2))
    around: tree_sitter.Node | None = node
    while index < 0 and around is not None:
        if around.children and around.children[0].type == "((":
            index = chars.char(around.children[0].start_byte)
        around = around.parent
    if index >= 0 and text[index - 1 : index] in (" ", "\t"):
        return text[: index - 1] + "( (" + text[index + 2 :]
    if index >= 0 and text[index + 2 : index + 3] in (" ", "\t"):
        return text[:index] + "( (" + text[index + 3 :]
    if index >= 0:
        # No blank to make room (`((a) | b)` at the start of a line): the outer
        # parentheses blanked. Its commands, and the redirects after it, are
        # found all the same (a subshell changes nothing the policies judge).
        closing = closing_paren(text, index)
        if closing > index:
            return text[:index] + " " + text[index + 1 : closing] + " " + text[closing + 1 :]
    # `$` before `)` is a plain character: `$(grep p$)`.
    match = re.search(r"\$\)", line)
    if match is not None:
        return _replace(text, line_start + match.start(), "_")
    # Whatever tree-sitter cannot read inside a `$( ... )` (`$((cmd) | x)`, say):
    # the substitution is hidden from it and its code parsed on its own.
    opening = text.rfind("$(", 0, start + 1)
    root = node
    while root.parent is not None:
        root = root.parent
    while opening >= 0:
        closing = closing_paren(text, opening + 1)
        if closing >= start and opening not in chars.deferred and _code_at(root, chars, opening):
            return chars.defer(opening, closing + 1, chars.text[opening + 2 : closing], "$(...)")
        opening = text.rfind("$(", 0, opening)
    # `a@` or `0@` as a command name: plain characters to bash, which tree-sitter
    # takes for some parameter syntax. Respelt with other plain characters.
    first, last = start, start
    while first > 0 and text[first - 1] in _PLAIN_CHARS:
        first -= 1
    while last < len(text) and text[last] in _PLAIN_CHARS:
        last += 1
    piece = text[first:last]
    bounded = text[first - 1 : first] in ("", " ", "\t", "\n", ";", "(", "|", "&")
    after = text[last : last + 1]
    if (
        bounded
        and after in ("", " ", "\t", "\n", ";", ")", "|", "&")
        and any(c in piece for c in "@%:+,")
    ):
        return _replace(text, first, re.sub(r"[@%:+,]", "_", piece))
    # `1=x`: no assignment (a name cannot start with a digit) but a command
    # name to bash; tree-sitter reads an assignment and then stumbles.
    match = re.search(r"(?:^|(?<=[\s;&|(]))\d[A-Za-z0-9_]*(=)", line)
    if match is not None:
        return _replace(text, line_start + match.start(1), "_")
    # A here-document followed by `;` on its line (after redirects too: `cat <<EOF
    # >x; ls`): spelt `&&`, which tree-sitter reads there; the same commands run.
    # (It may be on an earlier line: tree-sitter stumbles where the body ends.)
    next_line = text.find("\n", end)
    fixed = glued_heredoc(chars, 0, len(text) if next_line < 0 else next_line)
    if fixed is not None:
        return fixed
    match = re.search(r"<<-?[ \t]*\S+[^;\n]*?([ \t]*;[ \t])", line)
    if match is not None and "&&" not in match.group(1):
        semicolon = line_start + match.start(1) + match.group(1).index(";")
        if text[semicolon + 1] in " \t":
            return _replace(text, semicolon, "&&")
    return None


_GLUED_HEREDOC = re.compile(r"([A-Za-z0-9_./'\"-]) (<<-?)([A-Za-z0-9_]+); ")
_CASE_ITEM_END = frozenset({"in", ";;", ";&", ";;&"})
# Quoted text respelt in a case pattern holds nothing that could end a command
# or start a substitution, were the quotes not what bash reads: a misreading
# of where they are can then hide no command.
_INERT = re.compile(r"[^;&|<>()$`\"'\n]*")


def _case_pattern(chars: Text, node: tree_sitter.Node) -> str | None:
    """Respell the case patterns around the error `node` so that tree-sitter can read them.

    The pattern is found from the tree (after the `in`, or after the `;;` of
    the item before) and read to its `)` as bash reads it; inside it, the
    characters quoted by `'...'`, `$'...'` or a backslash become `_`: still
    quoted text to bash, of the same length, which changes no structure. A
    line continuation in it becomes two blanks.
    """
    start = chars.char(node.start_byte)
    item: tree_sitter.Node | None = node
    while item is not None:
        kind = item.type
        if kind == "case_item" or (
            kind in ("case_statement", "ERROR") and any(c.type == "case" for c in item.children)
        ):
            break
        item = item.parent
    if item is None:
        return None
    if item.type == "case_item":
        first = chars.char(item.start_byte)
    else:
        first = -1
        for child in item.children:
            if chars.char(child.start_byte) >= start:
                break
            if child.type in _CASE_ITEM_END or child.type == "case_item":
                first = chars.char(child.end_byte)
        if first < 0:
            return None
    text = chars.repaired
    found = _pattern_quotes(text, first)
    if not found:
        return None
    out = list(text)
    for low, high in found:
        if text[low : low + 2] == "\\\n":
            # A line continuation: nothing, to bash; blanks do as well.
            out[low:high] = "  "
        else:
            out[low:high] = "_" * (high - low)
    fixed = "".join(out)
    # Respelt already, and the error is another one.
    return None if fixed == text else fixed


def _pattern_quotes(text: str, i: int) -> list[tuple[int, int]]:
    """The quoted characters of the case pattern (or patterns, `a | b`) that starts near `i`.

    Empty when it is no pattern bash would read (no `)` before a bare newline).
    """
    n = len(text)
    while i < n:
        if text[i] in " \t\n":
            i += 1
        elif text.startswith("\\\n", i):
            i += 2
        elif text[i] == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        else:
            break
    if text.startswith("(", i):
        i += 1
    found: list[tuple[int, int]] = []
    depth = 0
    while i < n:
        c = text[i]
        if c == "\\":
            if text[i + 1 : i + 2] != "":
                found.append((i, i + 2))
            i += 2
        elif c == "'":
            close = text.find("'", i + 1)
            if close < 0:
                return []
            if _INERT.fullmatch(text, i + 1, close):
                found.append((i + 1, close))
            i = close + 1
        elif text.startswith("$'", i):
            close = ansi_c_end(text, i + 2)
            if close < 0:
                return []
            if _INERT.fullmatch(text, i + 2, close - 1):
                found.append((i + 2, close - 1))
            i = close
        elif c == '"':
            i = _double_end(text, i + 1)
        elif c == "`":
            i = backtick_end(text, i, n)
        elif text.startswith("$(", i):
            close = closing_paren(text, i + 1)
            i = close + 1 if close >= 0 else -1
        elif text.startswith("${", i):
            close = closing_brace(text, i + 1, n)
            i = close + 1 if close >= 0 else -1
        elif c == "(":
            # An extglob group: `@(a|b)`, `+(x)`.
            depth += 1
            i += 1
        elif c == ")":
            if depth == 0:
                return found
            depth -= 1
            i += 1
        elif c == "\n":
            return []
        else:
            i += 1
        if i < 0:
            return []
    return []


def _double_end(text: str, i: int) -> int:
    """The index after the `"` closing a double-quoted string whose text starts at `i`, or -1."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = backtick_end(text, i, n)
            if i < 0:
                return -1
        elif text.startswith("$(", i):
            close = closing_paren(text, i + 1)
            if close < 0:
                return -1
            i = close + 1
        else:
            i += 1
    return -1


def _backticks(chars: Text, node: tree_sitter.Node, start: int, end: int) -> str | None:
    """Hide the first backtick substitution tree-sitter misreads, up to the error at `start`.

    The backticks tree-sitter read as code are paired as bash pairs them
    (each opening one closed by the next unescaped backtick); the first pair
    that holds the error, or that tree-sitter closed elsewhere, is hidden.
    """
    root = node
    while root.parent is not None:
        root = root.parent
    text = chars.repaired
    if "`" not in text:
        return None
    ticks: list[tree_sitter.Node] = []
    todo = [root]
    while todo:
        current = todo.pop()
        if current.type == "`" and not current.is_missing:
            ticks.append(current)
        elif current.child_count and chars.char(current.start_byte) <= end:
            todo.extend(current.children)
    ticks.sort(key=lambda tick: tick.start_byte)
    after = 0
    for tick in ticks:
        # A "`" token may start at the blanks before it.
        opening = chars.char(tick.end_byte) - 1
        if opening < after:
            continue
        if opening > end or opening in chars.deferred or not _code_at(root, chars, opening):
            return None
        stop = backtick_end(text, opening, len(text))
        if stop < 0:
            return None
        parent = tick.parent
        closed = (
            parent is not None
            and parent.type == "command_substitution"
            and parent.children[0] == tick
            and parent.children[-1].type == "`"
            and chars.char(parent.end_byte) == stop
        )
        if not closed or opening <= start < stop:
            return chars.defer(opening, stop, chars.text[opening + 1 : stop - 1], "`...`")
        after = stop
    return None


def run_on(chars: Text, node: tree_sitter.Node) -> tuple[str, int | None] | None:
    """Whether tree-sitter ran the simple command `node` on past the end of its line.

    It sometimes does (`a >x | b | c` and the next line `rm -rf /` become
    one command `c rm -rf /`): bash ends a command at a newline that no
    quote, backslash or here-document holds, and so must the policies. For
    such a command: why it is wrong, and where a `;` ends it as bash does
    (`None` if no `;` can go there).
    """
    if node.start_point.row == node.end_point.row:
        return None
    text = chars.text
    previous: tree_sitter.Node | None = None
    for child in node.children:
        if child.type == "comment":
            continue
        if previous is None:
            previous = child
            continue
        first, last = chars.char(previous.end_byte), chars.char(child.start_byte)
        heredoc = previous.type == "heredoc_redirect"
        previous = child
        # Blanks, line continuations and a comment may stand between words.
        gap = _COMMENT.sub("", text[first:last].replace("\\\n", "  "))
        if "\n" not in gap:
            continue
        reason = f"it cannot tell where a command ends: {snippet(text, first)}"
        line_start = text.rfind("\n", 0, first) + 1
        if heredoc or "<<" in text[line_start:first] or gap[:1] not in (" ", "\t", "\n"):
            return reason, None
        return reason, first
    return None


def _run_ons(
    chars: Text, root: tree_sitter.Node, descend: Callable[[tree_sitter.Node], bool]
) -> Iterator[int | None]:
    """Where each command of the tree that runs on into the next line ends, in script order.

    `None` for one that cannot be respelt. Only the nodes `descend` accepts
    are looked into.
    """
    todo = [root]
    while todo:
        current = todo.pop()
        if current.type in ("command", "declaration_command"):
            joined = run_on(chars, current)
            if joined is not None:
                yield joined[1]
        if current.child_count and descend(current):
            todo.extend(reversed(current.children))


def all_joined(chars: Text, root: tree_sitter.Node) -> str | None:
    """The script respelt where every command of the tree runs on into the next line.

    `None` if one of them cannot be respelt.
    """
    text = chars.repaired
    for at in _run_ons(chars, root, lambda node: node.start_point.row != node.end_point.row):
        if at is None:
            return None
        # Each respelling is one `;` for one character: they add up.
        text = _replace(text, at, ";")
    return text


def _first_joined(chars: Text, root: tree_sitter.Node, end: int) -> str | None:
    """The script respelt where the first command before `end` runs on into the next line."""
    for at in _run_ons(chars, root, lambda node: chars.char(node.start_byte) <= end):
        # Only the first: after it, a tree with an error is no guide.
        return None if at is None else _replace(chars.repaired, at, ";")
    return None


def glued_heredoc(chars: Text, start: int, end: int) -> str | None:
    """The first `cat <<EOF; ls` between `start` and `end`, respelt `cat<<EOF &&ls`; else `None`.

    tree-sitter takes `EOF;` for the delimiter. Moved one to the left over
    the blank before it, with `&&` for `; ` (the same commands run), it is
    read; the operator and the delimiter keep their text (`Text.ops`).
    """
    text = chars.repaired
    glued = _GLUED_HEREDOC.search(text, start, end)
    if glued is None:
        return None
    op, delimiter = glued.group(2), glued.group(3)
    blank = glued.start(2) - 1
    byte = len(text[:blank].encode("utf-8", "surrogatepass"))
    chars.ops[byte] = op
    chars.ops[byte + len(op.encode())] = delimiter
    return text[:blank] + op + delimiter + " &&" + text[glued.end() :]


def _code_at(root: tree_sitter.Node, chars: Text, index: int) -> bool:
    """Whether tree-sitter reads the character at `index` as code, not as quoted text.

    A `$(` inside quotes, a comment or a here-document is no substitution:
    hiding text from there to a `)` would hide commands.
    """
    byte = len(chars.repaired[:index].encode("utf-8", "surrogatepass"))
    here: tree_sitter.Node | None = root.descendant_for_byte_range(byte, byte + 2)
    while here is not None:
        if here.type in _QUOTED_NODES:
            return False
        here = here.parent
    return True


def closing_paren(text: str, i: int) -> int:
    """The index of the `)` that closes the `(` at `i`, as bash pairs them; -1 if none.

    Quotes, backslashes, backticks and comments are skipped; a `)` that bash
    reads otherwise (a `case` pattern) ends the match early, so the code
    inside is cut short and fails to parse: refused, never skipped.
    """
    waiting = [")"]
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        top = waiting[-1]
        if c == "\\":
            j += 2
            continue
        if top in ('"', "`"):
            if c == top:
                waiting.pop()
            elif top == '"' and c == "$" and text.startswith("(", j + 1):
                waiting.append(")")
                j += 1
            elif top == '"' and c == "`":
                waiting.append("`")
            j += 1
            continue
        if c == "'":
            close = text.find("'", j + 1)
            if close < 0:
                return -1
            j = close + 1
            continue
        if c in ('"', "`", "("):
            waiting.append(")" if c == "(" else c)
        elif c == ")":
            waiting.pop()
            if not waiting:
                return j
        elif c == "#" and (j == 0 or text[j - 1] in " \t\n;&|("):
            newline = text.find("\n", j)
            j = n if newline < 0 else newline
            continue
        j += 1
    return -1


def closing_brace(text: str, i: int, end: int) -> int:
    """The index of the `}` closing the `{` of a `${` at `i`; -1 if none before `end`."""
    depth = 0
    j = i
    while j < end:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            close = text.find("'", j + 1, end)
            if close < 0:
                return -1
            j = close + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def backtick_end(text: str, i: int, end: int) -> int:
    """The index after the backtick closing the one at `i`; -1 if none before `end`."""
    j = i + 1
    while j < end:
        if text[j] == "\\":
            j += 2
        elif text[j] == "`":
            return j + 1
        else:
            j += 1
    return -1


def respell(script: str) -> str:
    """The script with what tree-sitter always misreads respelt, position for position."""
    repaired = script
    # `! if ...; fi`, `time { ...; }`: tree-sitter reads these keywords only
    # before simple commands and pipelines; and `coproc [NAME] compound` it takes
    # for a command named coproc. None of them changes what runs: blanked (a
    # coproc's compound runs in the background), over and over, since one
    # blanked may show the next (`! time if`, `time coproc {`, `! coproc {`).
    for _ in range(8):
        blanked = repaired
        if "!" in blanked or "time" in blanked:
            blanked = _NEGATED_COMPOUND.sub(
                lambda m: m.group(1) + " " * (m.end() - m.start(1) - len(m.group(1))), blanked
            )
        if "coproc" in blanked:
            blanked = _COPROC.sub(lambda m: m.group(1) + " " * len(m.group(2)), blanked)
        if blanked == repaired:
            break
        repaired = blanked
    if "=" in repaired:
        # `a= b=` at the end of a line: tree-sitter runs the statement on into the
        # next line (`a= b=\nls` becomes `ls` with two assignments). As `a=;b=`
        # it reads the line alone; the assignments are the same.
        repaired = _EMPTY_ASSIGNMENTS.sub(
            lambda m: (
                m.group(1)
                + re.sub(r"[ \t]+", lambda b: ";" + b.group()[1:], m.group(2))
                + m.group(3)
            ),
            repaired,
        )
    if "[" in repaired:
        # `[` is a program, and tree-sitter's reading of `[ ... ]` tests fails on
        # plenty bash runs (`\\(`, a bare `~`, a missing `]`): spelt `_`, it is read
        # as the command it is, its words taken from the original text.
        repaired = _TEST_BRACKET.sub("_", repaired)
    return repaired


_READ_WRITE = re.compile(r"(?<![<>])<>(?![<>&|])")


def read_write(chars: Text) -> Text:
    """`<>file` and `n<>file` (open to read and write) respelt `> file`, which tree-sitter reads.

    tree-sitter-bash reads no `<>` at all. The redirect keeps its operator
    (`Text.ops`, by the byte where the `>` now is); a `<>` in quotes or a
    comment is respelt too, which changes no word (words are read from the
    original text) and no structure.
    """
    text = chars.repaired
    out = _READ_WRITE.sub("> ", text)
    respelt = chars.respelt(out)
    for match in _READ_WRITE.finditer(text):
        byte = len(text[: match.start()].encode("utf-8", "surrogatepass"))
        respelt.ops[byte] = "<>"
    return respelt


def tree(chars: Text, budget: list[int]) -> tuple[tree_sitter.Node, Text]:
    """Parse `chars`, repairing what tree-sitter misreads; refuse what stays unreadable.

    `budget` holds how many respellings are left for the whole script (the
    walker spends it too, on misreadings it finds in a tree without errors).
    """
    while True:
        root = _ts_parser().parse(chars.data).root_node
        if not root.has_error:
            return root, chars
        error = _first_error(root)
        fixed = _repair(chars, error) if budget[0] > 0 else None
        if fixed is None or fixed == chars.repaired:
            raise ShellParseError(_describe_error(chars.text, error, chars))
        budget[0] -= 1
        chars = chars.respelt(fixed)
