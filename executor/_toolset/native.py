"""The tools in the shapes models are trained on, each an ordinary `Tool` over any executor.

- Anthropic's `bash` (`bash_20250124`: `command`, `restart`): a persistent
  shell of its own; a timeout interrupts the command and keeps the shell.
- Anthropic's text editor, `str_replace_based_edit_tool`
  (`text_editor_20250728`: `view`, `create`, `str_replace`, `insert`), and
  the older `str_replace_editor` of SWE-agent and OpenHands
  (`text_editor_20250124`, with `undo_edit`). Paths are absolute, as the
  model sees them in its shell: a path inside the executor's working
  directory maps onto it, any other is refused. A directory's `view` lists
  two levels without hidden files. The error texts are the reference's
  (Anthropic's `computer_use_demo/tools/edit.py`): a missing path, no match,
  several matches with their line numbers. `str_replace` keeps every byte
  outside the edit (tabs, CRLF) and falls back as `edit_file` does, saying
  so, when only line endings, trailing whitespace or indentation differ.
- OpenAI's `shell` (`{commands, timeout_ms, max_output_length}`, answered by
  one `{stdout, stderr, outcome}` per command), `local_shell` (an argv with
  env, timeout and working directory) and `apply_patch` (the V4A format of
  Codex CLI, applied atomically across files: see `executor._toolset.patch`).

`Tool.spec_for` declares each natively where its API has the type
(`{"type": "bash_20250124", "name": "bash"}`; `{"type": "shell", ...}` in the
Responses API), and as a function elsewhere. `NativeTools` holds what they
share with their toolset: the limits, the hosts (the `bash` shell), the edit
history (`undo_edit`) and the yielded commands.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, Literal

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import CommandError, InvalidArgument, NonZeroExit, TimedOut
from executor._tools.args import WorkspacePath
from executor._tools.tools import Tool, ToolOutput, tool
from executor._toolset.commands import CommandTools
from executor._toolset.context import ToolsetContext, execute
from executor._toolset.history import CREATED, EditHistory, undo
from executor._toolset.limits import Limits
from executor._toolset.patch import PatchError, apply_patch
from executor._toolset.text import replace

NATIVE_TOOLS: Mapping[str, tuple[str, ...]] = {
    "anthropic": ("bash", "str_replace_based_edit_tool"),
    "openai": ("shell", "local_shell", "apply_patch"),
    "swe-agent": ("str_replace_editor",),
}
"""The native tools of each family, by the name the model calls them."""

_BASH = "bash shell"
_SNIPPET_LINES = 4
# A written file is the largest argument a model sends; 16 MiB is past any real one.
_MAX_WRITE_BYTES = 16 << 20
_EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")


class NativeTools:
    """The native tools of one toolset, each a method (`native_tools` makes them `Tool`s).

    Args:
        limits: The toolset's timeouts, yield window and output budget.
        commands: The toolset's command tools, whose shells and yields `bash`,
            `shell` and `local_shell` share.
        history: Where the editors keep what `undo_edit` restores.
        max_characters: The most characters a text editor's `view` shows
            (`text_editor_20250728`'s `max_characters`); `None`: the budget.
    """

    def __init__(
        self,
        limits: Limits,
        commands: CommandTools,
        history: EditHistory,
        *,
        max_characters: int | None = None,
    ) -> None:
        self._limits = limits
        self._commands = commands
        self._history = history
        self._max_characters = max_characters
        self._roots: dict[int, tuple[ToolExecutor, tuple[str, ...]]] = {}

    # --- Anthropic's bash ----------------------------------------------------------

    async def bash(  # noqa: D417 - context is not an argument
        self, context: ToolsetContext, command: str | None = None, restart: bool = False
    ) -> str | ToolOutput:
        """Run commands in a bash shell; its state (cd, variables) carries over between calls.

        Args:
            command: The bash command to run. Required unless the tool is being restarted.
            restart: Specifying true will restart this tool. Otherwise, leave this unspecified.
        """
        if restart:
            await self._commands.restart_shell(context, _BASH)
            return "tool has been restarted."
        if command is None or not command.strip():
            return ToolOutput.error("no command provided.")
        return await self._commands.in_shell(
            context, command, None, restart=False, yield_after=None, host=_BASH
        )

    # --- the text editors ------------------------------------------------------------

    async def str_replace_based_edit_tool(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        command: Literal["view", "create", "str_replace", "insert"],
        path: str,
        file_text: str | None = None,
        view_range: list[int] | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        insert_text: str | None = None,
    ) -> str | ToolOutput:
        """View, create and edit files: view, create, str_replace and insert.

        Args:
            command: The command to run: view, create, str_replace or insert.
            path: Absolute path to the file or directory.
            file_text: For create: the content of the file.
            view_range: For view of a file: [start_line, end_line], 1-based; -1 ends at the end.
            old_str: For str_replace: the text to replace, which must match exactly once.
            new_str: For str_replace: the new text; for insert, the text to insert.
            insert_line: For insert: the line after which to insert (0 for the top).
            insert_text: For insert: the text to insert.
        """
        return await self._edit(
            context,
            command,
            path,
            file_text=file_text,
            view_range=view_range,
            old_str=old_str,
            new_str=new_str,
            insert_line=insert_line,
            insert_text=insert_text,
            tool_name="str_replace_based_edit_tool",
            commands=_EDITOR_COMMANDS,
        )

    async def str_replace_editor(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
        path: str,
        file_text: str | None = None,
        view_range: list[int] | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
    ) -> str | ToolOutput:
        """View, create and edit files: view, create, str_replace, insert and undo_edit.

        Args:
            command: The command to run: view, create, str_replace, insert or undo_edit.
            path: Absolute path to the file or directory.
            file_text: For create: the content of the file.
            view_range: For view of a file: [start_line, end_line], 1-based; -1 ends at the end.
            old_str: For str_replace: the text to replace, which must match exactly once.
            new_str: For str_replace: the new text; for insert, the text to insert.
            insert_line: For insert: the line after which to insert (0 for the top).
        """
        return await self._edit(
            context,
            command,
            path,
            file_text=file_text,
            view_range=view_range,
            old_str=old_str,
            new_str=new_str,
            insert_line=insert_line,
            insert_text=None,
            tool_name="str_replace_editor",
            commands=(*_EDITOR_COMMANDS, "undo_edit"),
        )

    async def _edit(
        self,
        context: ToolsetContext,
        command: str,
        path: str,
        *,
        file_text: str | None,
        view_range: list[int] | None,
        old_str: str | None,
        new_str: str | None,
        insert_line: int | None,
        insert_text: str | None,
        tool_name: str,
        commands: tuple[str, ...],
    ) -> str | ToolOutput:
        if command not in commands:
            return ToolOutput.error(
                f"Unrecognized command {command}. The allowed commands for the {tool_name} "
                f"tool are: {', '.join(commands)}"
            )
        relative = await self._workspace_path(context, path)
        if isinstance(relative, ToolOutput):
            return relative
        data: bytes | None = None
        if command in ("view", "str_replace", "insert"):
            # A file, the usual case, is read at once; only a failed read asks what is there.
            try:
                data = (await execute(context, Command.read_file(relative), stream=False)).stdout
            except CommandError:
                data = None
        if data is None:
            kind = await _kind(context, relative)
            refused = await self._not_a_file(
                context, command, kind, relative, path, file_text, view_range
            )
            if refused is not None:
                return refused
            if command == "undo_edit":
                return await self._undo(context, relative, path)
            # A file that could not be read: the read's own error says why.
            data = (await execute(context, Command.read_file(relative), stream=False)).stdout
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolOutput.error(
                f"The file {path} is not UTF-8 text; it cannot be shown or edited"
            )
        if command == "view":
            return self._view_file(text, path, view_range)
        if command == "str_replace":
            return await self._str_replace(context, relative, path, text, old_str, new_str)
        inserted = insert_text if insert_text is not None else new_str
        return await self._insert(context, relative, path, text, insert_line, inserted)

    async def _not_a_file(
        self,
        context: ToolsetContext,
        command: str,
        kind: str,
        relative: str,
        path: str,
        file_text: str | None,
        view_range: list[int] | None,
    ) -> str | ToolOutput | None:
        """The answer for `create`, a missing path or a directory; `None` for a file."""
        if command == "create":
            if kind != "none":
                return ToolOutput.error(
                    f"File already exists at: {path}. "
                    "Cannot overwrite files using command `create`."
                )
            if file_text is None:
                return ToolOutput.error("Parameter `file_text` is required for command: create")
            await execute(context, Command.write_file(relative, file_text))
            self._history.created(context.executor(), relative)
            return f"File created successfully at: {path}"
        if kind == "none":
            return ToolOutput.error(f"The path {path} does not exist. Please provide a valid path.")
        if kind == "dir":
            if command != "view":
                return ToolOutput.error(
                    f"The path {path} is a directory and only the `view` command can be used "
                    "on directories"
                )
            if view_range is not None:
                return ToolOutput.error(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                )
            return await self._view_directory(context, relative, path)
        return None

    async def _view_directory(self, context: ToolsetContext, relative: str, shown: str) -> str:
        argv = ["find", relative, "-maxdepth", "2", "-not", "-path", "*/.*"]
        output = await execute(context, Command.exec(argv), stream=False)
        listing = output.stdout.decode("utf-8", "replace")
        if relative != ".":
            listing = "\n".join(
                shown.rstrip("/") + line[len(relative) :] if line.startswith(relative) else line
                for line in listing.splitlines()
            )
        else:
            root = shown.rstrip("/") or "/"
            listing = "\n".join(
                root + line[1:] if line.startswith(".") else line for line in listing.splitlines()
            )
        return (
            f"Here's the files and directories up to 2 levels deep in {shown}, "
            f"excluding hidden items:\n{listing}\n"
        )

    def _view_file(self, text: str, shown: str, view_range: list[int] | None) -> str | ToolOutput:
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            if len(view_range) != 2 or not all(isinstance(i, int) for i in view_range):
                return ToolOutput.error(
                    "Invalid `view_range`. It should be a list of two integers."
                )
            count = len(lines)
            first, last = view_range
            if first < 1 or first > count:
                return ToolOutput.error(
                    f"Invalid `view_range`: {view_range}. Its first element `{first}` should be "
                    f"within the range of lines of the file: {[1, count]}"
                )
            if last > count:
                return ToolOutput.error(
                    f"Invalid `view_range`: {view_range}. Its second element `{last}` should be "
                    f"smaller than the number of lines in the file: `{count}`"
                )
            if last != -1 and last < first:
                return ToolOutput.error(
                    f"Invalid `view_range`: {view_range}. Its second element `{last}` should be "
                    f"larger or equal than its first `{first}`"
                )
            lines = lines[first - 1 :] if last == -1 else lines[first - 1 : last]
        body = _numbered(lines, first)
        limit = self._max_characters or self._limits.budget
        if len(body) > limit:
            cut = body[:limit].rsplit("\n", 1)[0]
            shown_last = first + cut.count("\n")
            body = (
                f"{cut}\n[the file continues: {len(body) - len(cut)} more characters; "
                f"view it with view_range starting at line {shown_last + 1}]\n"
            )
        return f"Here's the result of running `cat -n` on {shown}:\n{body}"

    async def _str_replace(
        self,
        context: ToolsetContext,
        relative: str,
        shown: str,
        text: str,
        old_str: str | None,
        new_str: str | None,
    ) -> str | ToolOutput:
        if old_str is None:
            return ToolOutput.error("Parameter `old_str` is required for command: str_replace")
        new = new_str or ""
        count = text.count(old_str) if old_str else 0
        if count > 1:
            starts = [i for i in range(len(text)) if text.startswith(old_str, i)]
            lines = [text.count("\n", 0, at) + 1 for at in starts]
            return ToolOutput.error(
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in "
                f"lines {lines}. Please ensure it is unique"
            )
        try:
            edited, where, how = replace(text, old_str, new, replace_all=False)
        except InvalidArgument as error:
            if old_str and old_str != new:
                return ToolOutput.error(
                    f"No replacement was performed, old_str `{old_str}` did not appear verbatim "
                    f"in {shown}.\n{error.rule}"
                )
            return ToolOutput.error(f"No replacement was performed: {error.rule}")
        await self._write(context, relative, text, edited)
        line = where[0]
        edited_lines = edited.split("\n")
        start = max(0, line - 1 - _SNIPPET_LINES)
        end = line - 1 + _SNIPPET_LINES + new.count("\n")
        snippet = _numbered(edited_lines[start : end + 1], start + 1)
        matched = "" if how is None else f"(old_str matched {how}.) "
        return (
            f"The file {shown} has been edited. {matched}"
            f"Here's the result of running `cat -n` on a snippet of {shown}:\n{snippet}"
            "Review the changes and make sure they are as expected. "
            "Edit the file again if necessary."
        )

    async def _insert(
        self,
        context: ToolsetContext,
        relative: str,
        shown: str,
        text: str,
        insert_line: int | None,
        inserted: str | None,
    ) -> str | ToolOutput:
        if insert_line is None:
            return ToolOutput.error("Parameter `insert_line` is required for command: insert")
        if inserted is None:
            return ToolOutput.error("Parameter `insert_text` is required for command: insert")
        lines = text.splitlines(keepends=True)
        if not 0 <= insert_line <= len(lines):
            return ToolOutput.error(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                f"of lines of the file: {[0, len(lines)]}"
            )
        ending = "\r\n" if "\r\n" in text else "\n"
        block = inserted.replace("\r\n", "\n")
        if ending == "\r\n":
            block = block.replace("\n", "\r\n")
        if not block.endswith(ending):
            block += ending
        head = "".join(lines[:insert_line])
        if head and not head.endswith("\n"):
            # Inserting after a last line that has no newline: it gets one first.
            head += ending
            if insert_line == len(lines):
                block = block.removesuffix(ending)
        edited = head + block + "".join(lines[insert_line:])
        await self._write(context, relative, text, edited)
        shown_lines = edited.split("\n")
        start = max(0, insert_line - _SNIPPET_LINES)
        end = insert_line + block.count("\n") + _SNIPPET_LINES
        snippet = _numbered(shown_lines[start:end], start + 1)
        return (
            f"The file {shown} has been edited. Here's the result of running `cat -n` on a "
            f"snippet of the edited file:\n{snippet}"
            "Review the changes and make sure they are as expected (correct indentation, "
            "no duplicate lines, etc). Edit the file again if necessary."
        )

    async def _undo(self, context: ToolsetContext, relative: str, shown: str) -> str | ToolOutput:
        before = await undo(self._history, context, relative)
        if before == CREATED:
            return ToolOutput.error(
                f"The last edit of {shown} created it: there is no earlier content to restore "
                "(undo_edit does not delete files; remove it with a command if it should go)."
            )
        if not isinstance(before, bytes):
            return ToolOutput.error(f"No edit history found for {shown}.")
        text = before.decode("utf-8", "replace")
        return (
            f"Last edit to {shown} undone successfully. Here's the result of running `cat -n` "
            f"on {shown}:\n{_numbered(text.split(chr(10)), 1)}"
        )

    async def _write(self, context: ToolsetContext, relative: str, before: str, after: str) -> None:
        await execute(context, Command.write_file(relative, after))
        self._history.push(context.executor(), relative, before.encode("utf-8"))

    async def _workspace_path(self, context: ToolsetContext, path: str) -> str | ToolOutput:
        """`path` (absolute, as the model's shell shows it) as a path in the workspace."""
        if not isinstance(path, str) or not path.strip():
            return ToolOutput.error("Parameter `path` is required")
        path = path.strip()
        roots = await self._workspace_roots(context)
        if not path.startswith("/"):
            return ToolOutput.error(
                f"The path {path} is not an absolute path, it should start with `/`. "
                f"Maybe you meant {posixpath.join(roots[0], path)}?"
            )
        normal = posixpath.normpath(path)
        for root in roots:
            if normal == root:
                return "."
            if normal.startswith(root.rstrip("/") + "/"):
                relative = normal[len(root.rstrip("/")) + 1 :]
                try:
                    return str(WorkspacePath(relative))
                except InvalidArgument as error:
                    return ToolOutput.error(f"The path {path} cannot be used: {error.rule}")
        return ToolOutput.error(
            f"The path {path} is outside the workspace, {roots[0]}; give a path under {roots[0]}"
        )

    async def _workspace_roots(self, context: ToolsetContext) -> tuple[str, ...]:
        """The workspace's absolute path as the executor's commands see it, and its real path."""
        executor = context.executor()
        known = self._roots.get(id(executor))
        if known is not None and known[0] is executor:
            return known[1]
        output = await executor.exec_cmd(Command.exec(["sh", "-c", "pwd; pwd -P"]))
        found = tuple(dict.fromkeys(output.stdout.decode("utf-8", "replace").split("\n")[:2]))
        roots = tuple(root for root in found if root.startswith("/")) or ("/",)
        self._roots[id(executor)] = (executor, roots)
        return roots

    async def working_directory(self, context: ToolsetContext, path: str | None) -> str | None:
        """A model's working directory (absolute or relative) as a path in the workspace.

        Raises:
            InvalidArgument: It is outside the workspace.
        """
        if path is None or not path.strip():
            return None
        if not path.strip().startswith("/"):
            return str(WorkspacePath(path))
        relative = await self._workspace_path(context, path)
        if isinstance(relative, ToolOutput):
            raise InvalidArgument(path, relative.text)
        return relative

    # --- OpenAI's shell, local_shell and apply_patch ---------------------------------

    async def shell(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        commands: list[str],
        timeout_ms: int | None = None,
        max_output_length: int | None = None,
    ) -> str:
        """Run shell commands, one after another, each on its own; report each one's outcome.

        Args:
            commands: The shell commands to run, in order.
            timeout_ms: Milliseconds each command may run before it is killed.
            max_output_length: The most characters of stdout and of stderr kept per command.
        """
        if not commands:
            raise InvalidArgument(commands, "give at least one command")
        seconds = self._limits.timeout_for(None if timeout_ms is None else timeout_ms / 1000)
        if max_output_length is not None and max_output_length < 1:
            raise InvalidArgument(max_output_length, "max_output_length must be at least 1")
        idle = self._limits.idle_for(None)
        results: list[dict[str, Any]] = []
        for each in commands:
            cmd = Command.shell(each).with_timeout(seconds).with_idle_timeout(idle)
            outcome: dict[str, Any]
            try:
                output = await execute(context, cmd)
                outcome = {"type": "exit", "exit_code": output.exit_code}
            except TimedOut as error:
                output, outcome = error.output, {"type": "timeout"}
            except NonZeroExit as error:
                output = error.output
                outcome = {"type": "exit", "exit_code": output.exit_code}
            results.append(
                {
                    "command": each,
                    "stdout": _capped(output.stdout, max_output_length),
                    "stderr": _capped(output.stderr, max_output_length),
                    "outcome": outcome,
                }
            )
        answer: dict[str, Any] = {"output": results}
        if max_output_length is not None:
            answer["max_output_length"] = max_output_length
        return json.dumps(answer, ensure_ascii=False)

    async def local_shell(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        command: list[str],
        env: dict[str, str] | None = None,
        timeout_ms: int | None = None,
        working_directory: str | None = None,
        user: str | None = None,
    ) -> ToolOutput:
        """Run a program with its arguments (no shell), with variables, a timeout and a folder.

        Args:
            command: The program and its arguments, e.g. ["ls", "-la"].
            env: Variables to set for it.
            timeout_ms: Milliseconds before it is killed.
            working_directory: The folder to run in (absolute, or relative to the workspace).
            user: The user to run as; only the executor's own user is possible.
        """
        if not command:
            raise InvalidArgument(command, "command must name a program")
        if user:
            raise InvalidArgument(user, "commands run as the executor's own user; leave user out")
        seconds = self._limits.timeout_for(None if timeout_ms is None else timeout_ms / 1000)
        cmd = (
            Command.exec(command)
            .with_timeout(seconds)
            .with_idle_timeout(self._limits.idle_for(None))
            .with_env(env or {})
        )
        cwd = await self.working_directory(context, working_directory)
        if cwd is not None:
            cmd = cmd.with_current_dir(cwd)
        return await self._commands.one_shot(context, cmd, " ".join(command), None)

    async def apply_patch(  # noqa: D417 - context is not an argument
        self, context: ToolsetContext, input: str
    ) -> str | ToolOutput:
        """Apply a patch in the V4A format, to every file it names or to none.

        The patch starts with "*** Begin Patch" and ends with "*** End Patch";
        each file is "*** Add File: path" (lines of "+"), "*** Delete File: path"
        or "*** Update File: path" (optionally "*** Move to: path"), with hunks
        of context (" "), removed ("-") and added ("+") lines after "@@" lines.

        Args:
            input: The whole patch.
        """
        try:
            result = await apply_patch(context.executor(), input)
        except PatchError as error:
            return ToolOutput.error(str(error))
        return str(result)


def native_tools(native: NativeTools) -> dict[str, Tool]:
    """Every native tool by name, declared natively for the APIs that have its type."""
    bash = tool(native.bash)
    bash.native = {"anthropic": {"type": "bash_20250124", "name": "bash"}}
    editor = tool(max_argument_bytes=_MAX_WRITE_BYTES)(native.str_replace_based_edit_tool)
    declared: dict[str, Any] = {"type": "text_editor_20250728", "name": editor.name}
    if native._max_characters is not None:
        declared["max_characters"] = native._max_characters
    editor.native = {"anthropic": declared}
    old_editor = tool(max_argument_bytes=_MAX_WRITE_BYTES)(native.str_replace_editor)
    old_editor.native = {"anthropic": {"type": "text_editor_20250124", "name": old_editor.name}}
    shell = tool(native.shell)
    shell.native = {"openai-responses": {"type": "shell", "environment": {"type": "local"}}}
    local_shell = tool(native.local_shell)
    local_shell.native = {"openai-responses": {"type": "local_shell"}}
    patch = tool(max_argument_bytes=_MAX_WRITE_BYTES)(native.apply_patch)
    patch.native = {"openai-responses": {"type": "apply_patch"}}
    built = (bash, editor, old_editor, shell, local_shell, patch)
    return {each.name: each for each in built}


async def _kind(context: ToolsetContext, relative: str) -> Literal["file", "dir", "none", "other"]:
    script = 'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; else echo none; fi'
    output = await context.executor().exec_cmd(Command.exec(["sh", "-c", script, "sh", relative]))
    word = output.stdout.decode().strip()
    if word in ("file", "dir", "none"):
        return word  # type: ignore[return-value]
    return "other"


def _numbered(lines: list[str], first: int) -> str:
    """Lines as `cat -n` shows them (a six-wide number, a tab), each ended by a newline."""
    return "".join(
        f"{number:6}\t{line.rstrip(chr(13))}\n" for number, line in enumerate(lines, first)
    )


def _capped(data: bytes, limit: int | None) -> str:
    """Output as text, at most `limit` characters: head and tail, the cut marked."""
    text = data.decode("utf-8", "replace")
    if limit is None or len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    half = max(limit // 2, 1)
    return text[:half] + marker + text[-(limit - half) :] if limit > 1 else text[:limit]
