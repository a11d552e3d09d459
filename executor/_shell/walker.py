"""The walk: the simple commands of a script, in script order, from tree-sitter's tree of it.

`parse` reads a script (`executor._shell.reading`), walks its tree with an
explicit stack (`_Walker`), reads each word's value from the original text
(`_Scanner`), parses the code of substitutions on its own, and hands each
command found to `analyse` (`executor._shell.programs.analyse`: the command
and the programs it runs). Where the walk finds that tree-sitter misread a
script without an error (`Misread`), the script is respelt and read again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, TypeAlias

import attrs
import tree_sitter

from executor._core.errors import ShellParseError
from executor._shell.reading import (
    EMPTY_SUBSTITUTION,
    Misread,
    Text,
    all_joined,
    backtick_end,
    closing_brace,
    closing_paren,
    glued_heredoc,
    read_write,
    respell,
    run_on,
    snippet,
    tree,
)
from executor._shell.words import (
    ASSIGNMENT,
    Part,
    PartKind,
    Redirect,
    SimpleCommand,
    Word,
    ansi_c,
    ansi_c_end,
    merge,
)

# How deep `sh -c "sh -c '...'"`, substitutions and wrappers may nest before a
# script is refused; real scripts stay far below, and it bounds the recursion.
MAX_DEPTH = 24
# How deep compound commands (subshells, groups, ifs, loops) may nest; the
# walk is iterative, this only keeps hostile trees from costing much.
_MAX_NESTING = 200
# Bigger scripts are refused rather than parsed: the biggest shell scripts of
# a Debian system are some 60 KB, and a policy must not become a way to keep
# a worker thread busy.
_MAX_SCRIPT = 256 * 1024
# Respellings of what tree-sitter misreads (see `reading._repair`), per script: each
# costs a parse (and maybe a walk) of the whole script, so they are few.
_MAX_REPAIRS = 16
# How deep `${a:-"${b:-...}"}` may nest inside one word (each level is a call).
_MAX_WORD_NESTING = 64


_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?-$!")


@attrs.frozen
class Ctx:
    """Where a command is found: what it inherits from the script around it."""

    nesting: tuple[str, ...] = ()
    pipeline: tuple[int, int] | None = None
    stdin_piped: bool = False
    background: bool = False
    functions: tuple[str, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    pipeline_source: str = ""


_FAST = re.compile(r"[A-Za-z0-9_./,:+@%=-]+(?:[ \t]+[A-Za-z0-9_./,:+@%=-]+)*")
_RESERVED = frozenset(
    {
        "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
        "do", "done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]",
    }
)  # fmt: skip

# Nodes that hold statements, walked child by child.
_CONTAINERS = frozenset(
    {
        "program", "do_group", "compound_statement", "subshell", "else_clause", "elif_clause",
        "if_statement", "while_statement", "negated_command", "case_item",
    }
)  # fmt: skip
# Nodes of word syntax: their values are read by `_Walker.word`.
_WORD_NODES = frozenset(
    {
        "word", "string", "raw_string", "ansi_c_string", "translated_string", "concatenation",
        "simple_expansion", "expansion", "command_substitution", "process_substitution",
        "arithmetic_expansion", "number", "brace_expression", "extglob_pattern", "regex",
        "special_variable_name", "variable_name", "array", "test_operator",
    }
)  # fmt: skip
# Inside these, a word's text is scanned with the substitutions tree-sitter found.
_SPAN_NODES = frozenset(
    {"command_substitution", "process_substitution", "expansion", "arithmetic_expansion"}
)
_WORD_SPECIAL = re.compile(r"[\\'\"$`*?\[{,}~<>\n]")
_SUBSTITUTION_START = re.compile(r"[$`]|[<>]\(")
_STRAY = frozenset({"done", "fi", "esac", "then", "do", "else", "elif", "}", "in", "]]"})
_CONTINUATION = re.compile(r"(?:\\\n)*")
_REDIRECT_NODES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# Tokens tree-sitter makes operators of, even among a command's words.
_OPERATOR_WORDS = frozenset({"==", "!=", "=~"})


Analyse: TypeAlias = Callable[[SimpleCommand, int], list[SimpleCommand]]
"""What each command found at a depth becomes: itself and what it runs (`programs.analyse`)."""


def parse(script: str, ctx: Ctx, depth: int, analyse: Analyse) -> list[SimpleCommand]:
    """The commands of `script`, found in `ctx` at `depth`, each as `analyse` makes it."""
    if depth > MAX_DEPTH:
        raise ShellParseError("commands are nested too deeply")
    if "\0" in script:
        raise ShellParseError("it holds a NUL byte")
    if len(script) > _MAX_SCRIPT:
        raise ShellParseError(f"it is longer than {_MAX_SCRIPT} characters")
    stripped = script.strip(" \t\n")
    if _FAST.fullmatch(stripped):
        # Most agent commands are a plain `ls -la` or `git status`: words of
        # characters no shell treats specially. They need no parser, and the
        # policy's overhead per command stays far below the spawn's.
        words = stripped.split()
        if words[0] not in _RESERVED:
            count = 0
            while count < len(words) and ASSIGNMENT.match(words[count]):
                count += 1
            command = SimpleCommand(
                words=tuple(Word(raw=w, parts=(Part("text", w),)) for w in words[count:]),
                assignments=tuple(Word(raw=w, parts=(Part("text", w),)) for w in words[:count]),
                source=stripped,
                nesting=ctx.nesting,
                stdin_piped=ctx.stdin_piped,
                background=ctx.background,
                functions=ctx.functions,
                redirects=ctx.redirects,
            )
            return analyse(command, depth)
    if not stripped:
        return []
    try:
        chars = Text(script, respell(script))
    except UnicodeEncodeError:
        raise ShellParseError("it is not valid text (a lone surrogate)") from None
    if "<>" in script:
        chars = read_write(chars)
    budget = [_MAX_REPAIRS]
    while True:
        root, chars = tree(chars, budget)
        walker = _Walker(chars, depth, analyse)
        try:
            walker.walk(root, ctx)
        except Misread as misread:
            # The tree has no error but says something bash does not: respelt
            # where it went wrong, and read again from the start.
            if misread.repaired is None or budget[0] <= 0:
                raise ShellParseError(misread.reason) from None
            budget[0] -= 1
            chars = chars.respelt(misread.repaired)
            continue
        walker.finish()
        return walker.out


@attrs.frozen
class _Emit:
    """A stack item: a command whose substitutions have been queued before it."""

    command: SimpleCommand


@attrs.frozen
class _Ready:
    """A stack item: commands already parsed and analysed (a backtick substitution's)."""

    commands: tuple[SimpleCommand, ...]


@attrs.frozen
class _Visit:
    node: tree_sitter.Node
    ctx: Ctx
    level: int


class _Walker:
    """Turns tree-sitter's tree of one script into `SimpleCommand`s, in script order.

    Statements are walked with an explicit stack (a script nested 100,000
    levels deep is refused, not a `RecursionError`); words are read from the
    original text, with the substitutions tree-sitter found in them.
    """

    def __init__(self, chars: Text, depth: int, analyse: Analyse) -> None:
        self.chars = chars
        self.text = chars.text
        self.depth = depth
        self.analyse = analyse
        self.out: list[SimpleCommand] = []
        self.stack: list[_Item] = []
        # Substitutions the word scanner found and tree-sitter did not.
        self.pending: list[_Item] = []
        # The substitutions a respelling hid that were met (see `deferred`).
        self.taken: set[int] = set()
        # Words tree-sitter hung on a redirect, which are the command's (`>&2 "x"`).
        self.extra: list[Word] = []
        # Those words, by the command they belong to (the byte where it starts).
        self.arguments: dict[int, tuple[Word, ...]] = {}
        # The text of commands with trailing redirects, by where they start.
        self.sources: dict[int, str] = {}

    # structure

    def walk(self, root: tree_sitter.Node, ctx: Ctx) -> None:
        self.stack.append(_Visit(root, ctx, 0))
        while self.stack:
            item = self.stack.pop()
            if isinstance(item, _Emit):
                self.out.extend(self.analyse(item.command, self.depth))
                continue
            if isinstance(item, _Ready):
                self.out.extend(item.commands)
                continue
            if item.level > _MAX_NESTING:
                raise ShellParseError(f"it nests more than {_MAX_NESTING} levels deep")
            self.node(item.node, item.ctx, item.level)

    def push(self, items: Iterable[_Item]) -> None:
        # The stack runs last in, first out: push in reverse to keep script order.
        self.stack.extend(reversed(list(items)))

    def node(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        kind = node.type
        if kind in _CONTAINERS or kind == "list":
            self.push(self.statements(node, ctx, level))
        elif kind == "pipeline":
            self.pipeline(node, ctx, level)
        elif kind == "redirected_statement":
            self.redirected(node, ctx, level)
        elif kind == "command":
            self.command(node, ctx, level)
        elif kind in ("declaration_command", "unset_command"):
            self.declaration(node, ctx, level)
        elif kind == "test_command":
            self.test(node, ctx, level)
        elif kind in ("variable_assignment", "variable_assignments"):
            self.bare_assignment(node, ctx, level)
        elif kind in ("for_statement", "c_style_for_statement"):
            self.loop(node, ctx, level)
        elif kind == "case_statement":
            items: list[_Item] = []
            for child in node.named_children:
                if child.type == "case_item":
                    items.append(_Visit(child, ctx, level + 1))
                elif child.type != "comment":
                    items.extend(self.substitutions(child, ctx, level))
            self.push(items)
        elif kind == "function_definition":
            name_node = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name_node is None or body is None:
                raise ShellParseError("a function definition has no name or body")
            name = self.word(name_node, ctx, level).value
            inner = attrs.evolve(ctx, functions=(*ctx.functions, name))
            items = [_Visit(body, inner, level + 1)]
            for child in node.children_by_field_name("redirect"):
                items.extend(self.substitutions(child, ctx, level))
            self.push(items)
        elif kind in ("comment", "heredoc_body", "heredoc_end", "heredoc_start"):
            return
        elif kind in _EXPRESSIONS or kind in _WORD_NODES:
            # `(( ... ))`, arithmetic and test operands: only their substitutions run.
            self.push(self.substitutions(node, ctx, level))
        elif not node.is_named:
            return
        else:
            raise ShellParseError(f"it uses a construct the policies do not follow ({kind})")

    def covered(self, node: tree_sitter.Node, children: list[tree_sitter.Node]) -> None:
        """Refuse a statement list in which tree-sitter passed over a word.

        Between the statements (and their operators) of a list there is only
        blank space to bash. tree-sitter-bash sometimes drops a token without
        an error (`- A=` reads as the assignment `A=`, where bash runs `-`): a
        byte no node holds is a word the tree says nothing of, so the script
        is refused rather than judged on a reading bash does not make.
        """
        data = self.chars.data
        # The tree's root spans its first token to its last: the whole text is the script's.
        whole = node.parent is None
        at = 0 if whole else node.start_byte
        for child in (*children, None):
            end = (len(data) if whole else node.end_byte) if child is None else child.start_byte
            if end > at and data[at:end].replace(b"\\\n", b"").strip(b" \t\r\n"):
                where = snippet(self.text, self.chars.char(at))
                raise ShellParseError(f"tree-sitter-bash passed over a word here: {where}")
            if child is not None:
                at = max(at, child.end_byte)

    def statements(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> Iterator[_Item]:
        children = node.children
        self.covered(node, children)
        for index, child in enumerate(children):
            if not child.is_named:
                if child.type in (";;", ";&", ";;&") and node.type != "case_item":
                    # tree-sitter takes `x ;; y` for two commands; bash refuses it.
                    where = snippet(self.text, self.chars.char(child.start_byte))
                    raise ShellParseError(f"{child.type!r} outside a case: {where}")
                continue
            following = children[index + 1] if index + 1 < len(children) else None
            background = following is not None and following.type == "&"
            inner = attrs.evolve(ctx, background=True) if background else ctx
            # `a && b && c` nests lists to the left: as long as it is, it is one level.
            deeper = 0 if node.type == "list" and child.type == "list" else 1
            yield _Visit(child, inner, level + deeper)

    def pipeline(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        stages = [child for child in node.named_children if child.type != "comment"]
        text = self.chars.of(node) if len(stages) > 1 else ""
        items = []
        for index, stage in enumerate(stages):
            inner = attrs.evolve(
                ctx,
                pipeline=(index, len(stages)) if len(stages) > 1 else ctx.pipeline,
                stdin_piped=ctx.stdin_piped if index == 0 else True,
                pipeline_source=text or ctx.pipeline_source,
            )
            items.append(_Visit(stage, inner, level + 1))
        self.push(items)

    def redirected(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        items: list[_Item] = []
        after: list[_Item] = []
        for child in node.children:
            if child.type in _REDIRECT_NODES:
                redirects.extend(self.redirect(child, ctx, level, items, after))
        inner = attrs.evolve(ctx, redirects=ctx.redirects + tuple(redirects))
        if self.extra:
            # They belong to the last command before the redirect (tree-sitter
            # hangs a redirect after `a && b` on the list).
            last = body
            while last is not None and last.type in ("list", "pipeline", "redirected_statement"):
                last = last.named_children[-1] if last.named_children else None
                if last is not None and last.type == "redirected_statement":
                    last = last.child_by_field_name("body")
            if last is None or last.type != "command":
                where = snippet(self.text, self.chars.char(node.start_byte))
                raise ShellParseError(f"words after a redirect belong to no command: {where}")
            self.arguments[last.start_byte] = tuple(self.extra)
            self.extra.clear()
        if body is not None:
            if body.type == "command":
                # The command's text, for messages, is with its redirects: `ls > x`
                # (up to the line's end where a here-document's body follows).
                text = self.chars.of(node)
                if any(child.type == "heredoc_redirect" for child in node.children):
                    text = text.split("\n", 1)[0]
                self.sources[body.start_byte] = text
            items.append(_Visit(body, inner, level + 1))
        else:
            # `> file` alone: a command with no words that still opens the file.
            items.append(_Emit(self.simple(node, (), (), inner)))
        self.push([*items, *after])

    def redirect(
        self,
        node: tree_sitter.Node,
        ctx: Ctx,
        level: int,
        queued: list[_Item],
        after: list[_Item],
    ) -> list[Redirect]:
        """The redirects in `node`, queueing their substitutions first.

        tree-sitter hangs the rest of a here-document's line (`| sh`, `&& x`,
        `> f`) onto the here-document's node: redirects among it are returned
        with this one, and commands go to `after`, walked after the command.
        """
        fd: int | None = None
        op = ""
        target: tree_sitter.Node | None = None
        body: tree_sitter.Node | None = None
        opened: tree_sitter.Node | None = None
        closed: tree_sitter.Node | None = None
        delimiter = ""
        found: list[Redirect] = []
        piped_after = False
        for child in node.children:
            kind = child.type
            if kind == "file_descriptor":
                text = self.chars.of(child)
                fd = int(text) if text.isdigit() else None
            elif not child.is_named and not op:
                op = self.chars.ops.get(child.start_byte) or self.chars.of(child)
                if fd is None and op[:1] in "<>":
                    fd = self.glued(self.chars.char(child.start_byte))
            elif kind == "heredoc_start":
                delimiter = self.chars.ops.get(child.start_byte) or self.chars.of(child)
                opened = child
            elif kind == "heredoc_body":
                body = child
            elif kind == "heredoc_end":
                closed = child
            elif kind == "comment":
                continue
            elif kind in _REDIRECT_NODES:
                found.extend(self.redirect(child, ctx, level, queued, after))
            elif not child.is_named:
                # `|`, `|&`, `&&`, `||` after a here-document's start.
                piped_after = piped_after or kind in ("|", "|&")
            elif (
                node.type == "heredoc_redirect"
                and kind in _WORD_NODES
                and self.on_line(opened, child)
            ):
                # `rm <<EOF -rf /`: the words after a here-document's start, on its
                # line, are the command's (those after it are its body's, which
                # tree-sitter makes words when the body starts with a backslash).
                self.extra.append(self.read(child, ctx, level, queued))
            elif node.type == "heredoc_redirect":
                if kind == "pipeline" and child.children and child.children[0].type in ("|", "|&"):
                    piped_after = True
                inner = attrs.evolve(ctx, stdin_piped=True) if piped_after else ctx
                after.append(_Visit(child, inner, level + 1))
            elif target is None:
                target = child
            else:
                # `>&2 echo x`: tree-sitter hangs the words after a redirect on
                # it; bash gives them to the command, and so do the policies.
                self.extra.append(self.read(child, ctx, level, queued))
        if op in ("<<", "<<-"):
            quoted = any(c in delimiter for c in "'\"\\")
            self.check_heredoc_end(delimiter, op == "<<-", opened, closed)
            word = self.heredoc(node, body, (opened, closed), quoted, ctx, level, queued)
            return [Redirect(op=op, fd=fd, heredoc=word), *found]
        if target is None:
            if op in ("<&-", ">&-"):
                return [Redirect(op=op[:-1], fd=fd, dup="-"), *found]
            raise ShellParseError(f"a redirect has no target: {self.chars.of(node)}")
        word = self.read(target, ctx, level, queued)
        if op in (">&", "<&") and word.static and (word.value.isdigit() or word.value == "-"):
            return [Redirect(op=op, fd=fd, dup=word.value), *found]
        return [Redirect(op=op, fd=fd, target=word), *found]

    def one_line(self, node: tree_sitter.Node) -> None:
        """Check that tree-sitter did not run a simple command on past the end of its line.

        Where it did, every such command of the tree is respelt at once
        (each costs a parse otherwise, and a hostile script can hold many).
        """
        joined = run_on(self.chars, node)
        if joined is None:
            return
        reason, position = joined
        root = node
        while root.parent is not None:
            root = root.parent
        raise Misread(reason, None if position is None else all_joined(self.chars, root))

    def descriptor(self, node: tree_sitter.Node) -> int | None:
        """The number of a word that is all digits and glued to a `<` or `>` after it."""
        start, end = self.chars.span(node)
        if self.text[end : end + 1] not in ("<", ">") or not self.text[start:end].isdigit():
            return None
        return self.glued(end)

    def glued(self, op: int) -> int | None:
        """The file descriptor written just before the operator at `op`, as bash reads it.

        Digits glued to `<` or `>` and standing alone as a word (`cat 0>x`)
        name the descriptor; tree-sitter reads `0` so as a word of the command.
        """
        first = op
        while first > 0 and self.text[first - 1] in "0123456789":
            first -= 1
        if first == op or (first > 0 and self.text[first - 1] not in " \t\n;&|()"):
            return None
        return int(self.text[first:op])

    def on_line(self, opened: tree_sitter.Node | None, node: tree_sitter.Node) -> bool:
        """Whether `node` starts on the line of the here-document start `opened`."""
        if opened is None:
            return False
        newline = self.text.find("\n", self.chars.char(opened.end_byte))
        while newline > 0 and self.text[newline - 1] == "\\":
            # A line continued with a backslash goes on: `rm <<EOF -rf \<newline> /`.
            newline = self.text.find("\n", newline + 1)
        return newline < 0 or self.chars.char(node.start_byte) < newline

    def check_heredoc_end(
        self,
        delimiter: str,
        strip: bool,
        opened: tree_sitter.Node | None,
        closed: tree_sitter.Node | None,
    ) -> None:
        """Refuse a here-document whose end tree-sitter did not put where bash does.

        bash ends the body at the first line that is the delimiter exactly
        (tabs removed for `<<-`); tree-sitter sometimes takes a line that
        only starts with it. A body that ended anywhere else would hide
        commands from the policies, or show them text as commands.
        """
        if opened is None or closed is None:
            return
        word = delimiter.replace("\\", "").replace("'", "").replace('"', "")
        newline = self.text.find("\n", self.chars.char(opened.end_byte))
        start = len(self.text) if newline < 0 else newline + 1
        end = self.chars.char(closed.end_byte)
        lines = self.text[start:end].split("\n")
        # The closing line runs to its newline, past the node.
        line_end = self.text.find("\n", end)
        lines[-1] += self.text[end : len(self.text) if line_end < 0 else line_end]
        found = [line.lstrip("\t") if strip else line for line in lines]
        if found[-1] != word or word in found[:-1]:
            where = snippet(self.text, self.chars.char(closed.start_byte))
            reason = f"it cannot tell where the here-document delimited by {word!r} ends: {where}"
            start = self.chars.char(opened.start_byte)
            line_end = self.text.find("\n", start)
            fixed = glued_heredoc(
                self.chars,
                self.text.rfind("\n", 0, start) + 1,
                len(self.text) if line_end < 0 else line_end,
            )
            raise Misread(reason, fixed)

    def heredoc(
        self,
        node: tree_sitter.Node,
        body: tree_sitter.Node | None,
        bounds: tuple[tree_sitter.Node | None, tree_sitter.Node | None],
        quoted: bool,
        ctx: Ctx,
        level: int,
        queued: list[_Item],
    ) -> Word:
        """A here-document's body, as bash reads it: the lines up to the delimiter's.

        The lines are taken from the text, not from tree-sitter's body node,
        which misses some (a body that starts with a backslash becomes words
        of the redirect); the substitutions in them come from the tree.
        """
        opened, closed = bounds
        if opened is not None and closed is not None:
            newline = self.text.find("\n", self.chars.char(opened.end_byte))
            start = len(self.text) if newline < 0 else newline + 1
            end = max(start, self.chars.char(closed.start_byte))
            if self.text[end - 1 : end] not in ("", "\n"):
                # `<<-` delimiters may be indented with tabs: the body ends before them.
                end = self.text.rfind("\n", start, end) + 1 or start
        elif body is not None:
            start, end = self.chars.span(body)
        else:
            return Word(raw="", parts=())
        text = self.text[start:end]
        if quoted:
            return Word(raw=text, parts=(Part("text", text, quoted=True),))
        if body is not None:
            queued.extend(self.substitutions(body, ctx, level))
        parts: list[Part] = []
        spans = self.spans(node)
        _Scanner(self, spans, ctx, level).heredoc(start, end, parts)
        queued.extend(self.pending)
        self.pending.clear()
        return Word(raw=text, parts=merge(parts))

    def command(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        # Words and assignments in order, with where each ends in the text.
        items: list[tuple[bool, Word, int]] = []
        redirects: list[Redirect] = []
        queued: list[_Item] = []
        after: list[_Item] = []
        if node.start_point.row != node.end_point.row:
            self.one_line(node)
        data = self.chars.data
        for child in node.children:
            kind = child.type
            if kind in _REDIRECT_NODES:
                redirects.extend(self.redirect(child, ctx, level, queued, after))
                continue
            if kind in _OPERATOR_WORDS:
                # tree-sitter takes these for operators; in a command, bash takes
                # them for words (`[ a == b ]`, `0 == 0`).
                start, end = self.chars.span(child)
                items.append((False, _plain_word(self.text[start:end]), end))
                continue
            if kind == "comment" or not child.is_named:
                continue
            if (
                # A word of digits glued to `<` or `>` (`cat 0<f`), told from a byte
                # first: asked of every word.
                48 <= data[child.start_byte] <= 57
                and data[child.end_byte : child.end_byte + 1] in (b"<", b">")
                and kind in ("number", "word", "command_name")
                and self.descriptor(child) is not None
            ):
                # `cat 0>x`: tree-sitter takes the 0 for a word; bash, for the redirect's.
                continue
            # tree-sitter takes `1=x` for an assignment; bash, for a command name.
            # Once the name is read, `A=x` is an argument (`ls A=x`).
            assignment = (
                kind == "variable_assignment"
                and not any(not is_assignment for is_assignment, _, _ in items)
                and bool(ASSIGNMENT.match(self.text, self.chars.char(child.start_byte)))
            )
            word = self.read(child, ctx, level, queued, assignment=assignment)
            start, end = self.chars.span(child)
            if items and _CONTINUATION.fullmatch(self.text, items[-1][2], start):
                # `r\<newline>m` and `'r'\m`: one word to bash, which removes the
                # pair before it splits words, and splits only at blanks and
                # operators; tree-sitter splits both. Joined, as bash reads them.
                was_assignment, previous, _ = items[-1]
                joined = Word(
                    raw=previous.raw + self.text[items[-1][2] : end],
                    parts=merge((*previous.parts, *word.parts)),
                )
                items[-1] = (was_assignment, joined, end)
                continue
            items.append((assignment, word, end))
        assignments = [word for is_assignment, word, _ in items if is_assignment]
        words = [word for is_assignment, word, _ in items if not is_assignment]
        words.extend(self.extra)
        self.extra.clear()
        words.extend(self.arguments.pop(node.start_byte, ()))
        while words and ASSIGNMENT.match(words[0].raw.replace("\\\n", "")):
            # `PA\<newline>TH=x cmd`, joined above: an assignment after all.
            assignments.append(words.pop(0))
        if words and words[0].raw in _STRAY:
            # tree-sitter reads a stray `done` or `fi` as a command; bash refuses the script.
            where = snippet(self.text, self.chars.char(node.start_byte))
            raise ShellParseError(f"a {words[0].raw!r} that closes nothing: {where}")
        if words and words[0].raw == "time":
            # The `time` keyword times what follows; it runs nothing itself.
            words.pop(0)
            while words and words[0].raw in ("-p", "--"):
                words.pop(0)
        command = self.simple(node, words, assignments, ctx, redirects)
        source = self.sources.pop(node.start_byte, None)
        if source is not None:
            command = attrs.evolve(command, source=source)
        self.push([*queued, _Emit(command), *after])

    def read(
        self,
        node: tree_sitter.Node,
        ctx: Ctx,
        level: int,
        queued: list[_Item],
        *,
        assignment: bool = False,
    ) -> Word:
        """A word's value, queueing the commands of its substitutions first."""
        if self.maybe_substitutions(node):
            queued.extend(self.substitutions(node, ctx, level))
        word = self.word(node, ctx, level, assignment=assignment)
        if self.pending:
            queued.extend(self.pending)
            self.pending.clear()
        return word

    def simple(
        self,
        node: tree_sitter.Node,
        words: Sequence[Word],
        assignments: Sequence[Word],
        ctx: Ctx,
        redirects: Sequence[Redirect] = (),
    ) -> SimpleCommand:
        return SimpleCommand(
            words=tuple(words),
            redirects=ctx.redirects + tuple(redirects),
            assignments=tuple(assignments),
            source=self.chars.of(node),
            nesting=ctx.nesting,
            pipeline=ctx.pipeline,
            stdin_piped=ctx.stdin_piped,
            background=ctx.background,
            functions=ctx.functions,
            pipeline_source=ctx.pipeline_source,
        )

    def declaration(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        # `export X=1`, `declare -a a=(...)`, `local x`, `unset y`: a builtin and its words.
        words: list[Word] = []
        queued: list[_Item] = []
        for child in node.children:
            if child.type == "comment":
                continue
            if not child.is_named:
                text = self.chars.of(child)
                words.append(Word(raw=text, parts=(Part("text", text),)))
            else:
                words.append(self.read(child, ctx, level, queued, assignment=True))
        self.push([*queued, _Emit(self.simple(node, words, (), ctx))])

    def test(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        queued: list[_Item] = []
        first = node.children[0] if node.children else None
        if first is not None and first.type == "[":
            # `[ -f x ]` is the program `[` (as `test -f x`): a command like any other.
            words = [self.word_or_token(token, ctx, level, queued) for token in self.tokens(node)]
            queued.append(_Emit(self.simple(node, words, (), ctx)))
        else:
            queued.extend(self.substitutions(node, ctx, level))
        # `[[ ... ]]` is the shell's own syntax: only its substitutions run.
        self.push(queued)

    def tokens(self, node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
        """The words of a `[ ... ]` test, in order, as the program `[` receives them."""
        todo = [node]
        while todo:
            current = todo.pop()
            if current is not node and (current.type in _WORD_NODES or current.child_count == 0):
                yield current
                continue
            todo.extend(reversed(current.children))

    def word_or_token(
        self, node: tree_sitter.Node, ctx: Ctx, level: int, queued: list[_Item]
    ) -> Word:
        if node.is_named:
            return self.read(node, ctx, level, queued)
        text = self.chars.of(node)
        return Word(raw=text, parts=(Part("text", text),))

    def bare_assignment(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        nodes = [node] if node.type == "variable_assignment" else node.named_children
        queued: list[_Item] = []
        assignments = []
        words: list[Word] = []
        for child in nodes:
            if child.type != "variable_assignment":
                continue
            if words or not ASSIGNMENT.match(self.text, self.chars.char(child.start_byte)):
                # `1=x` alone: a command of that name to bash, and what follows its words.
                words.append(self.read(child, ctx, level, queued))
                continue
            assignments.append(self.read(child, ctx, level, queued, assignment=True))
        self.push([*queued, _Emit(self.simple(node, words, assignments, ctx))])

    def loop(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> None:
        items: list[_Item] = []
        body = node.child_by_field_name("body")
        variable = node.child_by_field_name("variable")
        for child in node.named_children:
            if child == body or child.type == "comment":
                continue
            items.extend(self.substitutions(child, ctx, level))
        name = self.chars.of(variable) if variable is not None else ""
        if variable is not None and name in LOOP_VARIABLES:
            # `for PATH in ...` sets PATH as `PATH=...` would.
            value = Word(
                raw=f"{name}=", parts=(Part("text", f"{name}="), Part("unknown", "<each item>"))
            )
            items.append(_Emit(self.simple(variable, (), (value,), ctx)))
        if body is not None:
            items.append(_Visit(body, ctx, level + 1))
        self.push(items)

    # substitutions

    def maybe_substitutions(self, node: tree_sitter.Node) -> bool:
        start, end = self.chars.span(node)
        return _SUBSTITUTION_START.search(self.text, start, end) is not None

    def substitutions(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> list[_Item]:
        """The commands inside `node`'s substitutions, as stack items, outermost only."""
        found: list[_Item] = []
        todo = [node]
        while todo:
            current = todo.pop()
            kind = current.type
            if kind in ("command_substitution", "process_substitution"):
                found.extend(self.substitution(current, ctx, level))
                continue
            if kind == "simple_expansion" and self.chars.deferred:
                start = self.chars.char(current.start_byte)
                if start in self.chars.deferred:
                    found.extend(self.deferred(start, ctx, _backtick_mode(current)))
                    continue
            if current.child_count:
                todo.extend(reversed(current.children))
        return found

    def substitution(self, node: tree_sitter.Node, ctx: Ctx, level: int) -> list[_Item]:
        opener = node.children[0].type if node.children else ""
        if node.type == "process_substitution":
            label = "<(...)" if opener == "<(" else ">(...)"
            # `tee >(sh)`: what runs in >(...) reads the pipe.
            piped = label == ">(...)" or ctx.stdin_piped
        else:
            label = "`...`" if opener == "`" else "$(...)"
            piped = ctx.stdin_piped
        inner = Ctx(
            nesting=(*ctx.nesting, label),
            stdin_piped=piped,
            functions=ctx.functions,
            redirects=ctx.redirects,
        )
        if len(ctx.nesting) > MAX_DEPTH:
            raise ShellParseError("substitutions are nested too deeply")
        if opener == "`":
            # tree-sitter starts the node (and its "`" token) at the blanks before it.
            start = self.chars.char(node.children[0].end_byte) - 1
            end = self.chars.char(node.end_byte)
            stop = backtick_end(self.text, start, len(self.text))
            if stop != end:
                # tree-sitter paired this backtick with another than bash does
                # (`"`x 'y'`"` is read on past the second backtick): hidden, and
                # its code, up to the backtick bash closes it with, parsed apart.
                if stop < 0:
                    raise Misread(f"a backtick is not closed: {snippet(self.text, start)}", None)
                raise Misread(
                    "it cannot tell where a backtick substitution ends: "
                    + snippet(self.text, start),
                    self.chars.defer(start, stop, self.text[start + 1 : stop - 1], label),
                )
            return [self.backtick(self.text[start + 1 : end - 1], _backtick_mode(node), ctx)]
        return [
            _Visit(child, inner, level + 1)
            for child in node.named_children
            if child.type != "comment"
        ]

    def backtick(self, inner: str, mode: _BacktickMode, ctx: Ctx) -> _Ready:
        r"""The commands of a backtick substitution's text, read as bash (and sh) read it.

        Inside backticks a backslash quotes `$`, `` ` `` and `\` (and `"`
        inside double quotes): the shell reads the text again after removing
        those backslashes, so that is what is parsed. Where bash and dash
        remove different ones (a here-document, `${x:-...}`), both readings
        are parsed, and the commands of both are judged.
        """
        readings = _backtick_readings(inner, mode)
        if len(readings) == 1:
            return self.nested(readings[0], "`...`", ctx)
        found: list[SimpleCommand] = []
        for reading in readings:
            found.extend(self.nested(reading, "`...`", ctx).commands)
        return _Ready(tuple(found))

    def deferred(self, start: int, ctx: Ctx, mode: _BacktickMode = "plain") -> list[_Item]:
        """The commands of a substitution a respelling hid, the first time it is met."""
        if start in self.taken:
            return []
        self.taken.add(start)
        _, code, label = self.chars.deferred[start]
        if label == "`...`":
            return [self.backtick(code, mode, ctx)]
        return [self.nested(code, label, ctx)]

    def finish(self) -> None:
        """Refuse the script if a substitution a respelling hid was met nowhere."""
        for start in self.chars.deferred:
            if start not in self.taken:
                raise ShellParseError(f"lost track of a substitution: {snippet(self.text, start)}")

    def nested(self, script: str, label: str, ctx: Ctx) -> _Ready:
        """The commands of a substitution's code, parsed on its own."""
        piped = ctx.stdin_piped or label == ">(...)"
        inner = Ctx(
            nesting=(*ctx.nesting, label),
            stdin_piped=piped,
            functions=ctx.functions,
            redirects=ctx.redirects,
        )
        if len(ctx.nesting) > MAX_DEPTH:
            raise ShellParseError("substitutions are nested too deeply")
        return _Ready(tuple(parse(script, inner, self.depth + 1, self.analyse)))

    # words

    def spans(self, node: tree_sitter.Node) -> dict[int, tree_sitter.Node]:
        """The substitutions and expansions in a word, by the character where they start."""
        found: dict[int, tree_sitter.Node] = {}
        todo = [node]
        while todo:
            current = todo.pop()
            if current.type in _SPAN_NODES or current.type == "ansi_c_string":
                opener = current.children[0] if current.children else current
                # tree-sitter starts some nodes at the blanks, comments or
                # line continuations before them: the opening token says where.
                start = self.chars.char(opener.end_byte) - len(opener.type)
                if opener is current:
                    start = self.chars.char(current.start_byte)
                found[start] = current
                if current.type != "expansion" and current.type != "arithmetic_expansion":
                    continue
            todo.extend(current.children)
        return found

    def word(
        self, node: tree_sitter.Node, ctx: Ctx, level: int, *, assignment: bool = False
    ) -> Word:
        start, end = self.chars.span(node)
        raw = self.text[start:end]
        if not _WORD_SPECIAL.search(raw):
            # Most words are plain text: nothing to scan.
            return _plain_word(raw)
        parts: list[Part] = []
        _Scanner(self, self.spans(node), ctx, level).scan(start, end, parts, assignment=assignment)
        return Word(raw=raw, parts=merge(parts))


@functools.lru_cache(maxsize=4096)
def _plain_word(raw: str) -> Word:
    # Words are immutable, and the same plain ones (`-rf`, `echo`, `/dev/null`)
    # come again and again: made once.
    return Word(raw=raw, parts=(Part("text", raw),) if raw else ())


_Item: TypeAlias = "_Visit | _Emit | _Ready"

LOOP_VARIABLES = frozenset(
    {
        "PATH", "IFS", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV",
        "PROMPT_COMMAND", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4",
    }
)  # fmt: skip
"""Variables a `for` or `select` loop over them reports as an assignment (`for PATH in ...`)."""

_EXPRESSIONS = frozenset(
    {
        "binary_expression", "unary_expression", "ternary_expression", "postfix_expression",
        "parenthesized_expression", "subscript",
    }
)  # fmt: skip


_BacktickMode: TypeAlias = Literal["plain", "double", "either"]


def _backtick_text(inner: str, quoted: bool = False) -> str:
    """The code of `` `inner` `` after the shell's backslash removal (`"` too if in quotes)."""
    special = '$`\\"' if quoted else "$`\\"
    out: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner) and inner[i + 1] in special:
            out.append(inner[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _backtick_readings(inner: str, mode: _BacktickMode) -> tuple[str, ...]:
    r"""The code a backtick substitution runs: one reading, or bash's and dash's if they differ.

    `mode` says where the backticks are: `plain` (code), `double` (in double
    quotes, where bash and dash both remove the backslash of `\"`), or
    `either` (a here-document, a `${...}` in double quotes: dash removes
    it, bash keeps it).
    """
    if '\\"' not in inner or mode == "plain":
        return (_backtick_text(inner),)
    if mode == "double":
        return (_backtick_text(inner, quoted=True),)
    return (_backtick_text(inner), _backtick_text(inner, quoted=True))


def _backtick_mode(node: tree_sitter.Node) -> _BacktickMode:
    """Where tree-sitter found the backtick substitution `node`: in code, double quotes, or else."""
    parent = node.parent
    if parent is None:
        return "plain"
    if parent.type == "string":
        return "double"
    while parent is not None and parent.type not in ("command_substitution", "program"):
        if parent.type in ("heredoc_body", "expansion"):
            return "either"
        parent = parent.parent
    return "plain"


class _Scanner:
    """Reads a word's value from the original text, as bash does after quote removal.

    Substitutions and `${...}` come from tree-sitter (`spans`); a `$(`, `${`
    or backtick tree-sitter did not see is refused, so the two readings
    cannot disagree silently.
    """

    def __init__(
        self, walker: _Walker, spans: dict[int, tree_sitter.Node], ctx: Ctx, level: int
    ) -> None:
        self.walker = walker
        self.src = walker.text
        self.spans = spans
        self.ctx = ctx
        self.level = level
        # How many `${...}` deep the reading is: each is read by a recursive call.
        self.nested = 0

    def span_end(self, i: int, end: int, mode: _BacktickMode = "plain") -> int:
        node = self.spans.get(i)
        if node is None:
            return self.unseen(i, end, mode)
        stop = self.walker.chars.char(node.end_byte)
        if stop > end:
            raise ShellParseError(f"lost track of a substitution: {snippet(self.src, i)}")
        return stop

    def unseen(self, i: int, end: int, mode: _BacktickMode) -> int:
        """A substitution tree-sitter did not see (or a repair hid): parsed here, on its own."""
        src = self.src
        deferred = self.walker.chars.deferred.get(i)
        if deferred is not None:
            # Its commands were queued from the tree's `$___` stand-in, if the
            # tree has it where the words have it; if not, they are now.
            self.walker.pending.extend(self.walker.deferred(i, self.ctx, mode))
            return deferred[0]
        if src[i] == "`":
            stop = backtick_end(src, i, end)
            if stop < 0:
                raise ShellParseError(f"a backtick is not closed: {snippet(src, i)}")
            self.walker.pending.append(self.walker.backtick(src[i + 1 : stop - 1], mode, self.ctx))
            return stop
        elif src.startswith("${", i):
            # `${a%${a#?}}`: tree-sitter saw the outer one only. Its value is
            # unknown anyway; the substitutions in it are found all the same.
            close = closing_brace(src, i + 1, end)
            if close < 0:
                raise ShellParseError(f"a ${{ is not closed: {snippet(src, i)}")
            self.inside(i + 2, close, in_double=True)
            return close + 1
        else:
            close = closing_paren(src, i + 1)
            if close < 0 or close >= end:
                raise ShellParseError(f"a {src[i : i + 2]} is not closed: {snippet(src, i)}")
            stop = close + 1
            script = src[i + 2 : close]
            label = {"$": "$(...)", "<": "<(...)", ">": ">(...)"}[src[i]]
        self.walker.pending.append(self.walker.nested(script, label, self.ctx))
        return stop

    def inside(self, i: int, end: int, *, in_double: bool) -> None:
        """Find the substitutions in `${...}` or `$((...))` tree-sitter left as plain words.

        tree-sitter reads `${X:-`cmd`}` as a word; bash runs `cmd`. Their
        values are unknown anyway: only the commands in them matter.
        """
        src = self.src
        ignored: list[Part] = []
        self.nested += 1
        if self.nested > _MAX_WORD_NESTING:
            raise ShellParseError(f"a word nests more than {_MAX_WORD_NESTING} levels deep")
        while i < end:
            c = src[i]
            if c == "\\":
                i += 2
            elif c == "'" and not in_double:
                close = src.find("'", i + 1, end)
                i = end if close < 0 else close + 1
            elif c == '"':
                i = self.double(i + 1, end, ignored)
            elif c == "$":
                i = self.dollar(i, end, ignored, quoted=True)
            elif c == "`" or (c in "<>" and src.startswith("(", i + 1)):
                i = self.span_end(i, end, "either")
            else:
                i += 1
        self.nested -= 1

    def scan(self, i: int, end: int, parts: list[Part], *, assignment: bool) -> None:
        src = self.src
        first = i
        while i < end:
            c = src[i]
            if c == "\\":
                if i + 1 < end:
                    if src[i + 1] != "\n":
                        parts.append(Part("text", src[i + 1], quoted=True))
                    i += 2
                else:
                    parts.append(Part("text", "\\", quoted=True))
                    i += 1
            elif c == "'":
                close = src.find("'", i + 1, end)
                if close < 0:
                    raise ShellParseError("a single quote is not closed")
                parts.append(Part("text", src[i + 1 : close], quoted=True))
                i = close + 1
            elif c == '"':
                i = self.double(i + 1, end, parts)
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=False)
            elif c == "`" or (c in "<>" and src.startswith("(", i + 1)):
                stop = self.span_end(i, end)
                kind: PartKind = "command" if c == "`" else "process"
                parts.append(Part(kind, src[i:stop], False))
                i = stop
            elif c in "*?":
                parts.append(Part("glob", c))
                i += 1
            elif c == "[":
                # A bracket expression needs its `]`; a lone `[` (the program `[`) is text.
                closing = src.find("]", i + 2, end)
                parts.append(Part("glob" if closing >= 0 else "text", c))
                i += 1
            elif c in "{},":
                parts.append(Part("brace", c))
                i += 1
            elif c == "~" and (i == first or (assignment and src[i - 1] in "=:")):
                j = i + 1
                while j < end and (src[j] in _NAME_CHARS or src[j] in ".-+"):
                    j += 1
                if j == end or src[j] == "/" or (assignment and src[j] == ":"):
                    parts.append(Part("tilde", src[i:j]))
                    i = j
                else:
                    parts.append(Part("text", c))
                    i += 1
            else:
                parts.append(Part("text", c))
                i += 1

    def double(self, i: int, end: int, parts: list[Part]) -> int:
        src = self.src
        while i < end:
            c = src[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < end and src[i + 1] in '$`"\\\n':
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=True)
            elif c == "`":
                stop = self.span_end(i, end, "double")
                parts.append(Part("command", src[i:stop], True))
                i = stop
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1
        raise ShellParseError("a double quote is not closed")

    def heredoc(self, i: int, end: int, parts: list[Part]) -> None:
        src = self.src
        while i < end:
            c = src[i]
            if c == "\\" and i + 1 < end and src[i + 1] in "$`\\\n":
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=True)
            elif c == "`":
                stop = self.span_end(i, end, "either")
                parts.append(Part("command", src[i:stop], True))
                i = stop
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1

    def dollar(self, i: int, end: int, parts: list[Part], *, quoted: bool) -> int:
        src = self.src
        following = src[i + 1] if i + 1 < end else ""
        if following == "'" and not quoted:
            close = ansi_c_end(src, i + 2)
            if close < 0 or close > end:
                raise ShellParseError("a $'...' string is not closed")
            if close != src.find("'", i + 2) + 1:
                # bash ends $'a\'...' at a later quote than a POSIX sh (dash, which
                # is /bin/sh on Debian) does, so the two run different code.
                raise ShellParseError(
                    "a $'...' string holds \\', which bash and sh read differently"
                )
            parts.append(Part("text", ansi_c(src[i + 2 : close - 1]), quoted=True))
            return close
        if following == '"' and not quoted:
            return self.double(i + 2, end, parts)
        if following == "(":
            empty = EMPTY_SUBSTITUTION.match(src, i, end)
            if empty is not None:
                parts.append(Part("command", empty.group(), quoted))
                return empty.end()
        if following in ("(", "{"):
            stop = self.span_end(i, end)
            node = self.spans.get(i)
            text = src[i:stop]
            if node is None:
                parts.append(Part("command", text, quoted))
            elif node.type == "arithmetic_expansion":
                self.inside(i + 3, stop - 2, in_double=True)
                parts.append(Part("arithmetic", text, quoted))
            elif node.type == "expansion":
                self.inside(i + 2, stop - 1, in_double=quoted)
                parts.append(Part("parameter", text, quoted))
            else:
                parts.append(Part("command", text, quoted))
            return stop
        if following and following in _NAME_START:
            j = i + 1
            while j < end and src[j] in _NAME_CHARS:
                j += 1
            parts.append(Part("parameter", src[i:j], quoted))
            return j
        if following and following in _SPECIAL_PARAMETERS:
            parts.append(Part("parameter", src[i : i + 2], quoted))
            return i + 2
        parts.append(Part("text", "$", quoted))
        return i + 1
