"""Streaming tools: typed tools, handles, sessions, the policies, stdin, cancellation, events."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import math
import weakref
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pydantic
import pytest
from hypothesis import given, settings, strategies as st

from executor._core.errors import (
    InvalidArgument,
    NonZeroExit,
    PolicyDenied,
    ToolCancelled,
    ToolStreamError,
)
from executor._core.output import Chunk, CommandOutput, Stderr, Stdout
from executor._core.stdin import Bytes, Resize, Signal, StdinEvent, Text, UnixSignal
from executor._policies.verdict import Verdict
from executor._tools.context import ContextWindow, StreamingToolResult, truncate as _truncate
from executor._tools.events import MemoryBus, ToolEvent, ToolEventKind, bridge
from executor._tools.handle import Progress, StreamingToolHandle, TaskHandle, ToolChannel
from executor._tools.policies import (
    Buffer,
    Manual,
    OutputApprovalRequest,
    StreamingPolicy,
    Summarise,
    TimeoutAction,
    Window,
)
from executor._tools.session import StreamingToolSession
from executor._tools.tool import StreamingTool

pytestmark = pytest.mark.anyio


# --- tools used by the tests ----------------------------------------------------------


class Lines(pydantic.BaseModel):
    count: int
    prefix: str = "line"


class Summary(pydantic.BaseModel):
    lines: int


class Counter(StreamingTool[Lines, str, Summary]):
    """Streams numbered lines, then says how many."""

    name = "counter"

    def __init__(self, *, chunk_buffer: int = 16) -> None:
        self.chunk_buffer = chunk_buffer
        self.sent = 0

    async def start(self, input: Lines) -> StreamingToolHandle[str, Summary]:
        async def run(channel: ToolChannel[str]) -> Summary:
            for index in range(input.count):
                await channel.send(f"{input.prefix} {index}\n")
                self.sent += 1
            return Summary(lines=input.count)

        return TaskHandle(run, chunk_buffer=self.chunk_buffer)


class Generated(StreamingTool[int, Any, int]):
    """Streams what an async generator yields; the input is how many items to ask for."""

    name = "generated"

    def __init__(
        self, make: Callable[[int], AsyncGenerator[Any, None]], *, chunk_buffer: int = 16
    ) -> None:
        self.make = make
        self.chunk_buffer = chunk_buffer

    async def start(self, input: int) -> StreamingToolHandle[Any, int]:
        async def run(channel: ToolChannel[Any]) -> int:
            count = 0
            async with contextlib.aclosing(self.make(input)) as stream:
                async for item in stream:
                    if isinstance(item, Progress):
                        await channel.progress(item.fraction, item.payload)
                        continue
                    await channel.send(item)
                    count += 1
            return count

        return TaskHandle(run, chunk_buffer=self.chunk_buffer)

    def render(self, value: object) -> str:
        """Plain str() of each item: the tests count its characters."""
        return value if isinstance(value, str) else str(value)


class Echo(StreamingTool[str, str, int]):
    """Answers each stdin event with a chunk; stops at SIGINT or when stdin ends."""

    name = "echo"

    async def start(self, input: str) -> StreamingToolHandle[str, int]:
        async def run(channel: ToolChannel[str]) -> int:
            count = 0
            async for event in channel.stdin():
                match event:
                    case Text(text=text):
                        reply = f"{input}{text}"
                    case Bytes(data=data):
                        reply = f"{input}{data.hex()}"
                    case Resize(cols=cols, rows=rows):
                        reply = f"{input}resize {cols}x{rows}"
                    case Signal(signal=signal):
                        await channel.send(f"{input}{signal.name}")
                        return count
                await channel.send(reply)
                count += 1
            return count

        return TaskHandle(run, stdin=True)


class Forever(StreamingTool[float, int, int]):
    """Ticks until cancelled, with a cleanup that takes a while."""

    name = "forever"

    def __init__(self) -> None:
        self.sent = 0
        self.saw_cancel = False
        self.cleaned_up = False

    async def start(self, input: float) -> StreamingToolHandle[int, int]:
        async def run(channel: ToolChannel[int]) -> int:
            try:
                while True:
                    await channel.send(self.sent)
                    self.sent += 1
                    await anyio.sleep(input)
            except anyio.get_cancelled_exc_class():
                self.saw_cancel = True
                raise
            finally:
                # A slow cleanup: the session must wait for it before its block ends.
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.02)
                self.cleaned_up = True

        return TaskHandle(run, chunk_buffer=2)


class Failing(StreamingTool[int, str, int]):
    """Sends `input` chunks, then raises."""

    name = "failing"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def start(self, input: int) -> StreamingToolHandle[str, int]:
        async def run(channel: ToolChannel[str]) -> int:
            for index in range(input):
                await channel.send(f"ok {index}")
            raise self.error

        return TaskHandle(run)


async def items(values: list[Any]) -> AsyncGenerator[Any, None]:
    """An async generator over `values`."""
    for value in values:
        yield value


def generated(values: list[Any], **kwargs: Any) -> Generated:
    """A tool that streams `values` (whatever input it is given)."""
    return Generated(lambda _: items(values), **kwargs)


async def run_all(
    tool: StreamingTool[Any, Any, Any], input: Any, policy: StreamingPolicy | None = None
) -> tuple[list[Any], StreamingToolResult[Any, Any]]:
    """Read every chunk of a session, then finalize it."""
    async with StreamingToolSession(tool, input, policy=policy or tool.policy) as session:
        chunks = [chunk async for chunk in session]
        return chunks, await session.finalize()


# --- stdin events ---------------------------------------------------------------------


def test_stdin_events_hold_their_values() -> None:
    """Text, Bytes, Signal and Resize keep what they were given, converted where it is safe."""
    assert Text("ls\n").text == "ls\n"
    assert Bytes(bytearray(b"\x00\xff")).data == b"\x00\xff"
    assert Signal(2).signal is UnixSignal.SIGINT
    assert Signal(UnixSignal.SIGHUP) == Signal(UnixSignal.SIGHUP)
    assert (Resize(80, 24).cols, Resize(80, 24).rows) == (80, 24)


def test_unix_signals_are_the_os_numbers() -> None:
    """Each UnixSignal is the number the OS uses, so a process side can pass it to kill()."""
    import signal

    assert [int(member) for member in UnixSignal][:4] == [
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGKILL,
        signal.SIGHUP,
    ]
    assert {member.name: int(member) for member in UnixSignal} == {
        member.name: int(getattr(signal, member.name)) for member in UnixSignal
    }
    assert UnixSignal.SIGUSR1 in UnixSignal


@pytest.mark.parametrize("given", ["SIGUSR1", "usr1", " Usr1 ", str(int(UnixSignal.SIGUSR1)), 10])
def test_a_signal_is_parsed_from_its_name_or_number(given: str | int) -> None:
    """`UnixSignal.parse` takes the name with or without SIG, in any case, or the number."""
    assert UnixSignal.parse(given) is UnixSignal(10 if given == 10 else UnixSignal.SIGUSR1)


@pytest.mark.parametrize("given", ["SIGNOPE", "", "999", True, 0])
def test_an_unknown_signal_is_refused_with_the_ones_there_are(given: str | int) -> None:
    """A name or number that is no signal here says which are."""
    with pytest.raises(InvalidArgument, match="SIGUSR1"):
        UnixSignal.parse(given)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Text(b"ls"), TypeError),
        (lambda: Text("\ud800"), InvalidArgument),
        (lambda: Bytes("ls"), TypeError),
        (lambda: Signal(99), InvalidArgument),
        (lambda: Signal("SIGINT"), InvalidArgument),
        (lambda: Resize(0, 24), InvalidArgument),
        (lambda: Resize(80, 70000), InvalidArgument),
        (lambda: Resize(True, 24), InvalidArgument),
    ],
)
def test_stdin_events_refuse_bad_values(make: Callable[[], object], error: type[Exception]) -> None:
    """A stdin event that could not be delivered as asked is refused when it is made."""
    with pytest.raises(error):
        make()


# --- policies -------------------------------------------------------------------------


async def yes(request: OutputApprovalRequest) -> bool:
    """An approver that approves everything."""
    return True


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Window(max_chunks=0), ValueError),
        (lambda: Summarise(chunk_threshold=0, max_summary_length=10), ValueError),
        (lambda: Summarise(chunk_threshold=1, max_summary_length=0), ValueError),
        (lambda: Summarise(chunk_threshold=1, max_summary_length=10, timeout=0), ValueError),
        (lambda: Manual(approvers=[]), ValueError),
        (lambda: Manual(approvers=[42]), TypeError),  # type: ignore[list-item]
        (lambda: Manual(approvers=[yes], preview_length=-1), ValueError),
        (lambda: Manual(approvers=[yes], timeout=-5), ValueError),
        (lambda: Manual(approvers=[yes], timeout_action="maybe"), ValueError),
        (lambda: Window(5), TypeError),  # type: ignore[call-arg]
    ],
)
def test_policies_refuse_bad_settings(make: Callable[[], object], error: type[Exception]) -> None:
    """A policy is checked when it is made, and takes keyword arguments only."""
    with pytest.raises(error):
        make()


def test_policies_are_values() -> None:
    """Policies compare by value, and Manual's defaults are the safe ones."""
    assert Window(max_chunks=3) == Window(max_chunks=3)
    assert Buffer() == Buffer()
    manual = Manual(approvers=[yes])
    assert (manual.preview_length, manual.timeout) == (500, 300.0)
    assert manual.timeout_action is TimeoutAction.DENY
    assert Manual(approvers=[yes], timeout_action="allow").timeout_action is TimeoutAction.ALLOW


# --- the tool declaration -------------------------------------------------------------


def test_tool_types_come_from_the_subscript_and_give_schemas() -> None:
    """The three types come from StreamingTool[...] and each has its JSON schema in the spec."""
    tool = Counter()
    assert (tool.input_type, tool.chunk_type, tool.final_type) == (Lines, str, Summary)
    spec = tool.spec
    assert spec["name"] == "counter"
    assert spec["description"] == "Streams numbered lines, then says how many."
    assert spec["parameters"]["properties"]["count"]["type"] == "integer"
    assert spec["chunk_schema"] == {"type": "string"}
    assert spec["final_schema"]["properties"]["lines"]["type"] == "integer"
    assert tool.policy == Buffer()
    assert tool.idempotent is False
    assert tool.required_capability is None


def test_tool_attributes_can_be_set_explicitly() -> None:
    """Types, description, policy, idempotency and capability set on the class win."""

    class Tail(StreamingTool[Any, Any, Any]):
        """Not the description."""

        name = "tail"
        description = "Follows a log."
        input_type = dict[str, int]
        chunk_type = list[str]
        final_type = int
        policy = Window(max_chunks=200)
        idempotent = True
        required_capability = "filesystem"

        async def start(self, input: Any) -> StreamingToolHandle[Any, Any]:
            raise NotImplementedError

    tool = Tail()
    assert tool.spec["description"] == "Follows a log."
    assert tool.input_schema == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert tool.chunk_schema == {"type": "array", "items": {"type": "string"}}
    assert tool.policy == Window(max_chunks=200)
    assert StreamingToolSession(tool, {}).idempotent is True
    assert tool.required_capability == "filesystem"


def test_a_subclass_docstring_describes_the_subclass() -> None:
    """A subclass's own docstring replaces an inherited docstring, never an explicit description."""

    class Loud(Counter):
        """Streams numbered lines, loudly."""

    class Explicit(Counter):
        description = "Set by hand."

    class Quiet(Explicit):
        """Not used: the description was set by hand."""

    assert Loud().spec["description"] == "Streams numbered lines, loudly."
    assert Counter().spec["description"] == "Streams numbered lines, then says how many."
    assert Quiet().spec["description"] == "Set by hand."


async def test_start_must_return_a_handle() -> None:
    """A start() that returns something else is a TypeError when the session opens."""

    class Confused(StreamingTool[int, int, int]):
        name = "confused"

        async def start(self, input: int) -> StreamingToolHandle[int, int]:
            return 42  # type: ignore[return-value]

    with pytest.raises(TypeError, match="must return a StreamingToolHandle, got int"):
        async with StreamingToolSession(Confused(), 1):
            pass


def test_reprs_stay_short() -> None:
    """Reprs show the configuration, not the internal state."""
    bus = MemoryBus()
    assert repr(bus) == "MemoryBus(keep=1000)"
    session = StreamingToolSession(Counter(), Lines(count=1), call_id="c")
    assert "_held" not in repr(session)
    assert "call_id='c'" in repr(session)


def test_tool_without_types_or_name_is_refused() -> None:
    """A tool that declares no types cannot give a spec, and one without a name cannot run."""

    class Untyped(StreamingTool):  # type: ignore[type-arg]
        name = "untyped"

        async def start(self, input: Any) -> StreamingToolHandle[Any, Any]:
            raise NotImplementedError

    class Nameless(StreamingTool[int, int, int]):
        async def start(self, input: int) -> StreamingToolHandle[int, int]:
            raise NotImplementedError

    with pytest.raises(TypeError, match="input_type, chunk_type, final_type"):
        _ = Untyped().spec
    with pytest.raises(TypeError, match="needs a name"):
        StreamingToolSession(Nameless(), 1)
    with pytest.raises(TypeError, match="StreamingTool"):
        StreamingToolSession("counter", 1)  # type: ignore[arg-type]


def test_tool_policy_must_be_a_policy() -> None:
    """A class-level policy that is not one of the four is refused when the class is made."""
    with pytest.raises(TypeError, match="policy"):

        class Wrong(StreamingTool[int, int, int]):
            name = "wrong"
            policy = "window"  # type: ignore[assignment]

            async def start(self, input: int) -> StreamingToolHandle[int, int]:
                raise NotImplementedError


def test_session_policy_must_be_a_policy() -> None:
    """A session refuses a policy that is not one of the four."""
    with pytest.raises(TypeError, match="policy"):
        StreamingToolSession(Counter(), Lines(count=1), policy="buffer")  # type: ignore[arg-type]


def test_parse_input_turns_model_json_into_the_input_type() -> None:
    """A model's JSON becomes the input type; bad input is an InvalidArgument for the model."""
    tool = Counter()
    assert tool.parse_input('{"count": 3}') == Lines(count=3)
    assert tool.parse_input({"count": 2, "prefix": "x"}) == Lines(count=2, prefix="x")
    with pytest.raises(InvalidArgument, match="count"):
        tool.parse_input('{"prefix": "x"}')
    with pytest.raises(InvalidArgument, match="JSON"):
        tool.parse_input("{not json")
    assert generated([]).parse_input("7") == 7


class Color(enum.Enum):
    RED = "red"


@attrs.frozen
class Point:
    x: int


@dataclasses.dataclass
class Pair:
    a: int
    b: str


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (b"caf\xc3\xa9 \xff", "café \ufffd"),
        (Stdout(b"out"), "out"),
        (Stderr(b"err"), "err"),
        (CommandOutput(chunks=(Stdout(b"a"), Stderr(b"b"))), "ab"),
        (None, ""),
        (Summary(lines=2), '{"lines":2}'),
        ({"k": [1, "é"]}, '{"k": [1, "é"]}'),
        (Point(x=1), '{"x": 1}'),
        (Pair(a=1, b="z"), '{"a": 1, "b": "z"}'),
        (Color.RED, '"red"'),
        (3.5, "3.5"),
    ],
)
def test_render_gives_the_text_the_context_holds(value: object, text: str) -> None:
    """Chunks and finals become text: strings as they are, bytes decoded, the rest as JSON."""
    assert Counter().render(value) == text


# --- handles --------------------------------------------------------------------------


def test_task_handle_is_a_streaming_tool_handle() -> None:
    """TaskHandle has everything the handle protocol asks for."""

    async def run(channel: ToolChannel[int]) -> int:
        return 0

    assert isinstance(TaskHandle(run), StreamingToolHandle)
    with pytest.raises(TypeError, match="async function"):
        TaskHandle(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_buffer"):
        TaskHandle(run, chunk_buffer=-1)


async def test_task_handle_must_be_entered_and_runs_once() -> None:
    """A TaskHandle is used inside its async with block, once."""

    async def run(channel: ToolChannel[int]) -> int:
        await channel.send(1)
        return 5

    handle = TaskHandle(run)
    with pytest.raises(RuntimeError, match="enter"):
        await handle.next_chunk()
    async with handle:
        assert await handle.next_chunk() == 1
        assert await handle.next_chunk() is None
        assert await handle.finalize() == 5
    with pytest.raises(RuntimeError, match="once"):
        await handle.__aenter__()


async def test_task_handle_cancelled_before_it_starts_never_runs() -> None:
    """cancel() before entering cancels the function before it does anything."""
    ran = False

    async def run(channel: ToolChannel[int]) -> int:
        nonlocal ran
        await anyio.lowlevel.checkpoint()
        ran = True
        return 1

    handle = TaskHandle(run)
    handle.cancel()
    async with handle:
        assert await handle.next_chunk() is None
        with pytest.raises(ToolCancelled):
            await handle.finalize()
    assert not ran


class ScriptedProcess:
    """A hand-written handle shaped like a process session: Stdout/Stderr chunks, CommandOutput."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = list(chunks)
        self.stdin: list[StdinEvent] = []
        self.entered = self.exited = self.cancelled = self.stdin_closed = False

    async def __aenter__(self) -> ScriptedProcess:
        self.entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None:
        self.exited = True

    async def next_chunk(self) -> Chunk | None:
        await anyio.lowlevel.checkpoint()
        return self.chunks.pop(0) if self.chunks and not self.cancelled else None

    async def send_stdin(self, event: StdinEvent, /) -> None:
        self.stdin.append(event)

    async def close_stdin(self) -> None:
        self.stdin_closed = True

    def cancel(self) -> None:
        self.cancelled = True

    async def finalize(self) -> CommandOutput:
        if self.cancelled:
            raise NonZeroExit("killed by signal 15")
        return CommandOutput(exit_code=0)


class Shell(StreamingTool[str, Chunk, CommandOutput]):
    """Runs a command (here: a scripted stand-in for a process session)."""

    name = "shell"

    def __init__(self, process: ScriptedProcess) -> None:
        self.process = process

    async def start(self, input: str) -> StreamingToolHandle[Chunk, CommandOutput]:
        return self.process


async def test_any_object_with_the_handle_methods_plugs_in() -> None:
    """A process-session-shaped handle works in a session as it is: chunks, stdin, finalize."""
    process = ScriptedProcess([Stdout(b"hello\n"), Stderr(b"warn\n")])
    async with StreamingToolSession(Shell(process), "echo hello") as session:
        assert process.entered
        await session.send_stdin(Text("y\n"))
        assert [chunk async for chunk in session] == [Stdout(b"hello\n"), Stderr(b"warn\n")]
        result = await session.finalize()
    assert process.exited
    assert not process.cancelled
    assert process.stdin == [Text("y\n")]
    assert process.stdin_closed
    assert result.final.exit_code == 0
    assert result.context.characters == len("hello\nwarn\n")


async def test_a_handle_error_of_our_own_tree_passes_as_it_is() -> None:
    """A NonZeroExit from a cancelled process session reaches the caller unchanged."""
    process = ScriptedProcess([Stdout(b"x")] * 5)
    async with StreamingToolSession(Shell(process), "yes") as session:
        await session.next_chunk()
        session.cancel()
        assert await session.next_chunk() is None
        with pytest.raises(NonZeroExit, match="signal 15"):
            await session.finalize()


# --- the session: reading and Buffer --------------------------------------------------


async def test_buffer_returns_every_chunk_and_holds_them_all() -> None:
    """With Buffer (the default), next_chunk gives each chunk and finalize holds them all."""
    chunks, result = await run_all(Counter(), Lines(count=4))
    assert chunks == ["line 0\n", "line 1\n", "line 2\n", "line 3\n"]
    assert result.final == Summary(lines=4)
    assert result.chunks == tuple(chunks)
    assert result.summary is None
    assert result.context.received == 4
    assert result.context.dropped == 0


async def test_next_chunk_keeps_returning_none_at_the_end() -> None:
    """After the last chunk next_chunk returns None, every time."""
    async with StreamingToolSession(Counter(), Lines(count=1)) as session:
        assert await session.next_chunk() == "line 0\n"
        assert await session.next_chunk() is None
        assert await session.next_chunk() is None


async def test_finalize_reads_what_was_not_read_and_returns_the_same_result_twice() -> None:
    """finalize() takes the unread chunks through the policy, and a second call returns the same."""
    async with StreamingToolSession(Counter(), Lines(count=3)) as session:
        assert await session.next_chunk() == "line 0\n"
        result = await session.finalize()
        assert result.chunks == ("line 0\n", "line 1\n", "line 2\n")
        assert await session.finalize() is result
        assert await session.next_chunk() is None


async def test_an_async_generator_tool_streams_its_items() -> None:
    """A tool built on an async generator streams its items and counts them as its final."""
    chunks, result = await run_all(generated(["a", "b", "c"]), 0)
    assert chunks == ["a", "b", "c"]
    assert result.final == 3


async def test_session_is_used_inside_its_block_once() -> None:
    """A session must be entered before use, cannot be used after, and runs once."""
    session = StreamingToolSession(Counter(), Lines(count=1))
    with pytest.raises(RuntimeError, match="enter the session"):
        await session.next_chunk()
    async with session:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        await session.finalize()
    with pytest.raises(RuntimeError, match="once"):
        await session.__aenter__()


async def test_session_policy_overrides_the_tool_policy() -> None:
    """The session's policy wins over the tool's, and the tool's is the default."""
    assert StreamingToolSession(Counter(), Lines(count=1)).policy == Buffer()
    session = StreamingToolSession(Counter(), Lines(count=1), policy=Window(max_chunks=1))
    assert session.policy == Window(max_chunks=1)
    assert session.name == "counter"


# --- Window -----------------------------------------------------------------------------


async def test_window_holds_the_last_chunks() -> None:
    """Window gives every chunk to the reader but holds only the last max_chunks."""
    chunks, result = await run_all(Counter(), Lines(count=10), Window(max_chunks=3))
    assert len(chunks) == 10
    assert result.chunks == ("line 7\n", "line 8\n", "line 9\n")
    assert result.context.chunks == 3
    assert result.context.received == 10
    assert result.context.dropped == 7


class Tracked:
    """A chunk whose live instances are counted through weak references."""

    __slots__ = ("__weakref__", "number")

    def __init__(self, number: int) -> None:
        self.number = number

    def __str__(self) -> str:
        return f"chunk {self.number:06d}"


@pytest.mark.slow
async def test_window_memory_is_bounded_over_100k_chunks() -> None:
    """Over 100,000 chunks the session holds at most the window, and what it let go is freed."""
    window, buffer, total = 50, 8, 100_000
    live: weakref.WeakSet[Tracked] = weakref.WeakSet()
    most_alive = 0

    async def produce(count: int) -> AsyncGenerator[Tracked, None]:
        nonlocal most_alive
        for number in range(count):
            chunk = Tracked(number)
            live.add(chunk)
            most_alive = max(most_alive, len(live))
            yield chunk

    tool = Generated(produce, chunk_buffer=buffer)
    async with StreamingToolSession(tool, total, policy=Window(max_chunks=window)) as session:
        read = 0
        while (chunk := await session.next_chunk()) is not None:
            assert chunk.number == read
            read += 1
            del chunk
            if read % 10_000 == 0:
                usage = session.context_window()
                assert usage.chunks == window
                assert usage.utf8_bytes == window * len("chunk 000000")
        result = await session.finalize()
    assert read == total
    assert [chunk.number for chunk in result.chunks] == list(range(total - window, total))
    assert result.context.received == total
    assert result.context.dropped == total - window
    # The window, the buffer between tool and reader, and a few in flight: never the stream.
    assert most_alive <= window + buffer + 4


@pytest.mark.parametrize(
    "policy",
    [
        Buffer(),
        Window(max_chunks=2),
        Summarise(chunk_threshold=3, max_summary_length=20),
        Manual(approvers=[yes]),
    ],
    ids=["buffer", "window", "summarise", "manual"],
)
async def test_a_fast_tool_is_held_back_by_a_slow_reader(policy: StreamingPolicy) -> None:
    """A tool that produces faster than its reader waits on a full buffer instead of piling up."""
    tool = Counter(chunk_buffer=4)
    async with StreamingToolSession(tool, Lines(count=10_000), policy=policy) as session:
        await anyio.wait_all_tasks_blocked()
        assert tool.sent <= 4 + 1
        for read in range(1, 4):
            await session.next_chunk()
            await anyio.wait_all_tasks_blocked()
            assert read <= tool.sent <= read + 4 + 1
        await anyio.sleep(0.05)
        assert tool.sent <= 3 + 4 + 1


# --- Summarise --------------------------------------------------------------------------


class Recorder:
    """A deterministic summarizer: "summary of N chars", recording what it was given."""

    def __init__(self) -> None:
        self.inputs: list[str] = []

    async def __call__(self, text: str) -> str:
        self.inputs.append(text)
        await anyio.lowlevel.checkpoint()
        return f"summary of {len(text)} chars"


async def test_summarise_replaces_the_held_chunks_every_threshold() -> None:
    """Every chunk_threshold chunks, the summary so far and the new chunks become one summary."""
    summarizer = Recorder()
    policy = Summarise(chunk_threshold=3, max_summary_length=100, summarizer=summarizer)
    tool = generated(["a1", "a2", "a3", "b1", "b2", "b3", "c1"])
    async with StreamingToolSession(tool, 0, policy=policy) as session:
        for _ in range(2):
            await session.next_chunk()
        assert session.context_window().chunks == 2
        assert summarizer.inputs == []
        await session.next_chunk()
        usage = session.context_window()
        assert (usage.chunks, usage.summaries, usage.summarised) == (0, 1, 3)
        assert usage.characters == len("summary of 8 chars")
        result = await session.finalize()
    assert summarizer.inputs == ["a1\na2\na3", "summary of 8 chars\nb1\nb2\nb3"]
    assert result.summary == "summary of 27 chars"
    assert result.chunks == ("c1",)
    assert result.context.summarised == 6
    assert result.context.truncations == 0


async def test_a_summary_longer_than_allowed_is_cut() -> None:
    """A summarizer that answers at length is cut to max_summary_length."""

    async def verbose(text: str) -> str:
        return "word " * 100

    policy = Summarise(chunk_threshold=2, max_summary_length=60, summarizer=verbose)
    _, result = await run_all(generated(["x", "y"]), 0, policy)
    assert result.summary is not None
    assert len(result.summary) <= 60
    assert result.summary.startswith("word word")


async def test_a_failing_summarizer_falls_back_to_truncation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the summarizer raises, the text is truncated (head and tail kept) and it is logged."""

    async def broken(text: str) -> str:
        raise ConnectionError("model unavailable")

    text = [f"{index:03d}" + "." * 46 for index in range(10)]
    policy = Summarise(chunk_threshold=10, max_summary_length=120, summarizer=broken)
    with caplog.at_level(logging.WARNING, logger="executor"):
        _, result = await run_all(generated(text), 0, policy)
    assert result.summary is not None
    assert len(result.summary) <= 120
    assert result.summary.startswith("000....")
    assert result.summary.endswith("." * 10)
    assert "characters left out" in result.summary
    assert result.context.truncations == 1
    assert "summarizer of generated failed" in caplog.text


async def test_a_slow_summarizer_times_out_into_truncation() -> None:
    """A summarizer that takes longer than the timeout is abandoned for truncation."""

    async def slow(text: str) -> str:
        await anyio.sleep(30)
        return "never"

    policy = Summarise(chunk_threshold=2, max_summary_length=5, summarizer=slow, timeout=0.05)
    with anyio.fail_after(5):
        _, result = await run_all(generated(["abcdef", "ghijkl"]), 0, policy)
    assert result.summary == "abcde"
    assert result.context.truncations == 1


async def test_summarise_without_a_summarizer_truncates() -> None:
    """With no summarizer, each pass truncates the held text to the limit."""
    policy = Summarise(chunk_threshold=2, max_summary_length=100)
    _, result = await run_all(generated(["one", "two", "three"]), 0, policy)
    assert result.summary == "one\ntwo"
    assert result.chunks == ("three",)
    assert result.context.truncations == 1


async def test_a_summarizer_answering_with_no_text_is_a_failure() -> None:
    """A summarizer that returns something other than a string counts as failed."""

    async def odd(text: str) -> Any:
        return 42

    policy = Summarise(chunk_threshold=1, max_summary_length=100, summarizer=odd)
    _, result = await run_all(generated(["kept as is"]), 0, policy)
    assert result.summary == "kept as is"
    assert result.context.truncations == 1


async def test_finalize_summarises_once_more_only_when_too_long() -> None:
    """A last pass comes in finalize when what is held is longer than the limit, and only then."""
    short = Summarise(chunk_threshold=10, max_summary_length=100, summarizer=Recorder())
    _, result = await run_all(generated(["a", "b"]), 0, short)
    assert (result.summary, result.chunks, result.context.summaries) == (None, ("a", "b"), 0)

    summarizer = Recorder()
    long = Summarise(chunk_threshold=10, max_summary_length=5, summarizer=summarizer)
    _, result = await run_all(generated(["abc", "def"]), 0, long)
    assert summarizer.inputs == ["abc\ndef"]
    assert result.summary == "summa"
    assert result.chunks == ()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.integers(1, 200))
def test_truncation_keeps_head_and_tail_within_the_limit(text: str, limit: int) -> None:
    """Truncated text fits the limit, starts with the text's head and ends with its tail."""
    cut = _truncate(text, limit)
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text
        return
    if "characters left out" in cut:
        head, _, rest = cut.partition("\n[... ")
        tail = rest.partition(" ...]\n")[2]
        assert text.startswith(head)
        assert text.endswith(tail)
        assert len(head) >= len(tail)
        count = int(rest.split(" ", 1)[0])
        assert count == len(text) - len(head) - len(tail)
    else:
        assert cut == text[:limit]


# --- Manual -----------------------------------------------------------------------------


class Approvals:
    """An approver that records requests and answers from a script (default: yes)."""

    def __init__(self, answers: dict[int | None, bool | Verdict] | None = None) -> None:
        self.answers = answers or {}
        self.requests: list[OutputApprovalRequest] = []

    async def __call__(self, request: OutputApprovalRequest) -> bool | Verdict:
        self.requests.append(request)
        await anyio.lowlevel.checkpoint()
        return self.answers.get(request.number, True)


async def never(request: OutputApprovalRequest) -> bool:
    """An approver that never answers."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def test_manual_shows_a_preview_and_releases_approved_output() -> None:
    """Each chunk and the final are previewed to the approver, then released."""
    approver = Approvals()
    policy = Manual(approvers=[approver], preview_length=6)
    tool = Counter()
    async with StreamingToolSession(tool, Lines(count=2), policy=policy, call_id="c1") as session:
        assert await session.next_chunk() == "line 0\n"
        first = approver.requests[0]
        assert (first.tool, first.call_id, first.kind) == ("counter", "c1", "chunk")
        assert first.number == 1
        assert (first.preview, first.length, first.truncated) == ("line 0", 7, True)
        assert await session.next_chunk() == "line 1\n"
        result = await session.finalize()
    final = approver.requests[-1]
    assert (final.kind, final.number, final.preview) == ("final", None, '{"line')
    assert result.chunks == ("line 0\n", "line 1\n")
    assert len(approver.requests) == 3


async def test_manual_denial_raises_and_drops_the_chunk() -> None:
    """A denied chunk raises PolicyDenied with the reason; the session reads on past it."""
    approver = Approvals({2: Verdict(False, "contains a secret")})
    policy = Manual(approvers=[approver])
    async with StreamingToolSession(Counter(), Lines(count=3), policy=policy) as session:
        assert await session.next_chunk() == "line 0\n"
        with pytest.raises(PolicyDenied, match=r"chunk 2 of counter was not approved.*secret"):
            await session.next_chunk()
        assert await session.next_chunk() == "line 2\n"
        result = await session.finalize()
    assert result.chunks == ("line 0\n", "line 2\n")
    assert result.context.dropped == 1
    assert result.context.received == 3


async def test_manual_timeout_denies_by_default() -> None:
    """No answer within the timeout withholds the chunk with PolicyDenied."""
    policy = Manual(approvers=[never], timeout=0.05)
    async with StreamingToolSession(Counter(), Lines(count=2), policy=policy) as session:
        with anyio.fail_after(5), pytest.raises(PolicyDenied, match="no approval came within"):
            await session.next_chunk()
        assert session.context_window().chunks == 0


async def test_manual_timeout_can_allow() -> None:
    """With timeout_action ALLOW, output with no answer in time is released."""
    policy = Manual(approvers=[never], timeout=0.02, timeout_action=TimeoutAction.ALLOW)
    with anyio.fail_after(5):
        chunks, result = await run_all(Counter(), Lines(count=2), policy)
    assert chunks == ["line 0\n", "line 1\n"]
    assert result.final == Summary(lines=2)


async def test_manual_needs_every_approver_and_stops_asking_at_a_no() -> None:
    """All approvers must agree; the first no cancels the ones still thinking."""
    still_thinking_cancelled = False

    async def slow_yes(request: OutputApprovalRequest) -> bool:
        nonlocal still_thinking_cancelled
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            still_thinking_cancelled = True
            raise
        return True

    async def no(request: OutputApprovalRequest) -> bool:
        return False

    policy = Manual(approvers=[slow_yes, no])
    async with StreamingToolSession(Counter(), Lines(count=1), policy=policy) as session:
        with anyio.fail_after(5), pytest.raises(PolicyDenied):
            await session.next_chunk()
    assert still_thinking_cancelled

    both = Manual(approvers=[Approvals(), Approvals()])
    chunks, _ = await run_all(Counter(), Lines(count=2), both)
    assert chunks == ["line 0\n", "line 1\n"]


async def test_manual_approver_errors_propagate() -> None:
    """An approver that raises is not taken as a yes or a no: its error reaches the caller."""

    async def broken(request: OutputApprovalRequest) -> bool:
        raise LookupError("no such approver")

    policy = Manual(approvers=[broken, Approvals()])
    async with StreamingToolSession(Counter(), Lines(count=1), policy=policy) as session:
        with pytest.raises(LookupError, match="no such approver"):
            await session.next_chunk()


async def test_manual_can_withhold_the_final_value() -> None:
    """A denied final value makes finalize raise PolicyDenied, every time it is called."""
    approver = Approvals({None: False})
    policy = Manual(approvers=[approver])
    async with StreamingToolSession(Counter(), Lines(count=1), policy=policy) as session:
        assert await session.next_chunk() == "line 0\n"
        with pytest.raises(PolicyDenied, match="the result of counter was not approved"):
            await session.finalize()
        with pytest.raises(PolicyDenied):
            await session.finalize()


async def test_manual_finalize_does_not_release_unread_chunks() -> None:
    """Chunks finalize reads under Manual are dropped without asking: only the final is asked."""
    approver = Approvals()
    _, result = await run_all_after_reading(Counter(), Lines(count=4), Manual(approvers=[approver]))
    assert [request.kind for request in approver.requests] == ["chunk", "final"]
    assert result.chunks == ("line 0\n",)
    assert result.context.dropped == 3


async def run_all_after_reading(
    tool: StreamingTool[Any, Any, Any], input: Any, policy: StreamingPolicy
) -> tuple[Any, StreamingToolResult[Any, Any]]:
    """Read one chunk, then finalize."""
    async with StreamingToolSession(tool, input, policy=policy) as session:
        first = await session.next_chunk()
        return first, await session.finalize()


# --- context window ---------------------------------------------------------------------


async def test_context_window_counts_characters_bytes_and_tokens() -> None:
    """context_window() reports the characters, UTF-8 bytes and ~bytes/4 tokens held."""
    tool = generated(["héllo", "🙂🙂", "plain"])
    async with StreamingToolSession(tool, 0, policy=Window(max_chunks=2)) as session:
        assert session.context_window() == ContextWindow()
        await session.next_chunk()
        usage = session.context_window()
        assert (usage.chunks, usage.characters, usage.utf8_bytes) == (1, 5, 6)
        assert usage.estimated_tokens == 2
        await session.next_chunk()
        usage = session.context_window()
        assert (usage.characters, usage.utf8_bytes, usage.estimated_tokens) == (7, 14, 4)
        await session.next_chunk()
        usage = session.context_window()
        assert (usage.chunks, usage.characters, usage.utf8_bytes) == (2, 7, 13)
        assert (usage.received, usage.dropped) == (3, 1)
        result = await session.finalize()
    # The final value (3, rendered "3") is in the context too once finalize returns it.
    assert result.context.characters == 8
    assert result.context.utf8_bytes == 14
    assert result.context.estimated_tokens == math.ceil(14 / 4)
    assert session.context_window() == result.context


# --- stdin ------------------------------------------------------------------------------


async def test_stdin_events_reach_the_tool_and_its_answers_come_back() -> None:
    """Text, Bytes and Resize reach the tool in order, and SIGINT ends it."""
    async with StreamingToolSession(Echo(), "> ") as session:
        await session.send_stdin(Text("ls"))
        assert await session.next_chunk() == "> ls"
        await session.send_stdin(Bytes(b"\x00\xff"))
        await session.send_stdin(Resize(120, 40))
        assert await session.next_chunk() == "> 00ff"
        assert await session.next_chunk() == "> resize 120x40"
        await session.send_stdin(Signal(UnixSignal.SIGINT))
        assert await session.next_chunk() == "> SIGINT"
        assert await session.next_chunk() is None
        result = await session.finalize()
    assert result.final == 3


async def test_finalize_closes_stdin_so_a_reading_tool_can_finish() -> None:
    """A tool that reads stdin to its end finishes when finalize closes it."""
    async with StreamingToolSession(Echo(), "") as session:
        await session.send_stdin(Text("one"))
        with anyio.fail_after(5):
            result = await session.finalize()
    assert result.final == 1
    assert result.chunks == ("one",)


async def test_close_stdin_ends_the_input_while_output_is_still_read() -> None:
    """close_stdin() is an end of input: the tool finishes, its output is read, more is refused."""
    async with StreamingToolSession(Echo(), "") as session:
        await session.send_stdin(Text("last"))
        await session.close_stdin()
        await session.close_stdin()
        assert await session.next_chunk() == "last"
        assert await session.next_chunk() is None
        with pytest.raises(ToolStreamError, match="no longer reads stdin"):
            await session.send_stdin(Text("more"))
        assert (await session.finalize()).final == 1


async def test_stdin_to_a_tool_without_stdin_is_refused() -> None:
    """Sending stdin to a read-only tool raises ToolStreamError."""
    async with StreamingToolSession(Counter(), Lines(count=1)) as session:
        with pytest.raises(ToolStreamError, match="takes no stdin"):
            await session.send_stdin(Text("hi"))


async def test_stdin_after_the_tool_ended_is_refused() -> None:
    """A stdin event for a tool that has stopped reading raises ToolStreamError."""
    async with StreamingToolSession(Echo(), "") as session:
        await session.send_stdin(Signal(UnixSignal.SIGTERM))
        assert await session.next_chunk() == "SIGTERM"
        assert await session.next_chunk() is None
        with pytest.raises(ToolStreamError, match="no longer reads stdin"):
            await session.send_stdin(Text("late"))


async def test_send_stdin_takes_only_stdin_events() -> None:
    """Anything but Text, Bytes, Signal or Resize is a TypeError."""
    async with StreamingToolSession(Echo(), "") as session:
        with pytest.raises(TypeError, match="Text, Bytes, Signal or Resize"):
            await session.send_stdin("ls\n")  # type: ignore[arg-type]


# --- failures -----------------------------------------------------------------------------


async def test_a_tool_failing_midway_delivers_its_chunks_then_its_error() -> None:
    """The chunks sent before the failure are read, then ToolStreamError with the cause."""
    async with StreamingToolSession(Failing(ValueError("disk full")), 2) as session:
        assert await session.next_chunk() == "ok 0"
        assert await session.next_chunk() == "ok 1"
        with pytest.raises(ToolStreamError, match="failing failed: ValueError: disk full") as info:
            await session.next_chunk()
        assert isinstance(info.value.__cause__, ValueError)
        assert await session.next_chunk() is None
        with pytest.raises(ToolStreamError, match="disk full"):
            await session.finalize()


async def test_a_tool_failing_with_an_executor_error_passes_it_unchanged() -> None:
    """A CommandError from the tool is already ours, so it is raised as it is."""
    async with StreamingToolSession(Failing(NonZeroExit("exit 2")), 0) as session:
        with pytest.raises(NonZeroExit, match="exit 2"):
            await session.next_chunk()


async def test_a_tool_that_cannot_start_raises_when_the_session_opens() -> None:
    """An exception from start() becomes a ToolStreamError at async with."""

    class Broken(StreamingTool[int, int, int]):
        name = "broken"

        async def start(self, input: int) -> StreamingToolHandle[int, int]:
            raise RuntimeError("no such device")

    with pytest.raises(ToolStreamError, match="broken failed: RuntimeError: no such device"):
        async with StreamingToolSession(Broken(), 1):
            pass


async def test_a_none_chunk_fails_the_tool() -> None:
    """None marks the end of a stream, so a tool sending it fails with a TypeError cause."""
    async with StreamingToolSession(generated(["a", None]), 0) as session:
        assert await session.next_chunk() == "a"
        with pytest.raises(ToolStreamError, match="cannot be None") as info:
            await session.next_chunk()
        assert isinstance(info.value.__cause__, TypeError)


# --- cancellation -------------------------------------------------------------------------


async def test_cancel_ends_the_stream_and_finalize_raises() -> None:
    """After cancel(), next_chunk returns None, finalize raises ToolCancelled, cleanup has run."""
    tool = Forever()
    async with StreamingToolSession(tool, 0.0) as session:
        assert await session.next_chunk() == 0
        assert await session.next_chunk() == 1
        session.cancel()
        assert await session.next_chunk() is None
        with pytest.raises(ToolCancelled):
            await session.finalize()
        assert tool.saw_cancel
        assert tool.cleaned_up


async def test_cancel_wakes_a_reader_waiting_for_a_chunk() -> None:
    """A reader blocked in next_chunk gets None when another task cancels the tool."""
    async with StreamingToolSession(Forever(), 3600.0) as session:
        assert await session.next_chunk() == 0
        got: list[int | None] = []

        async def read() -> None:
            got.append(await session.next_chunk())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(read)
                await anyio.wait_all_tasks_blocked()
                session.cancel()
    assert got == [None]


async def test_outer_cancellation_mid_stream_stops_the_tool_and_waits_for_its_cleanup() -> None:
    """Cancelling the code reading a session stops the tool, and its cleanup has run on exit."""
    tool = Forever()
    with anyio.CancelScope() as scope:
        async with StreamingToolSession(tool, 0.001) as session:
            async for tick in session:
                if tick == 5:
                    # As a deadline would, from outside the session's own API.
                    scope.cancel()
    assert scope.cancelled_caught
    assert tool.sent >= 6
    assert tool.saw_cancel
    assert tool.cleaned_up


async def test_leaving_the_block_early_cancels_the_tool() -> None:
    """Breaking out of a session without finalize cancels the tool before the block ends."""
    tool = Forever()
    async with StreamingToolSession(tool, 0.0) as session:
        async for tick in session:
            if tick == 3:
                break
    assert tool.saw_cancel
    assert tool.cleaned_up


async def test_cancelling_a_tool_stuck_on_a_full_buffer() -> None:
    """A tool blocked on a reader who stopped reading is cancelled cleanly."""
    tool = Counter(chunk_buffer=1)
    with anyio.fail_after(5):
        async with StreamingToolSession(tool, Lines(count=1_000_000)) as session:
            await anyio.wait_all_tasks_blocked()
            session.cancel()
            with pytest.raises(ToolCancelled):
                await session.finalize()
    assert tool.sent <= 2


async def test_an_error_in_the_block_cancels_the_tool_and_propagates() -> None:
    """An exception in the session's block cancels the tool and reaches the caller unchanged."""
    tool = Forever()

    async def buggy_agent() -> None:
        async with StreamingToolSession(tool, 0.0) as session:
            await session.next_chunk()
            raise KeyError("agent bug")

    with pytest.raises(KeyError):
        await buggy_agent()
    assert tool.cleaned_up


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_native_asyncio_cancellation_stops_the_tool(anyio_backend: str) -> None:
    """asyncio.wait_for cancelling the reading task stops the tool and runs its cleanup."""
    import asyncio

    tool = Forever()

    async def read_forever() -> None:
        async with StreamingToolSession(tool, 0.001) as session:
            async for _ in session:
                pass

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(read_forever(), 0.05)
    assert tool.saw_cancel
    assert tool.cleaned_up


# --- events and bridge ----------------------------------------------------------------------


async def test_session_events_are_progress_partials_and_one_complete() -> None:
    """events() turns progress into PROGRESS, chunks into PARTIAL, and ends with COMPLETE."""
    tool = generated([Progress(fraction=0.0, payload="start"), "a", Progress(fraction=0.5), "b"])
    async with StreamingToolSession(tool, 0) as session:
        events = [event async for event in session.events()]
    kinds = [event.kind.name for event in events]
    assert kinds == ["PROGRESS", "PARTIAL", "PROGRESS", "PARTIAL", "COMPLETE"]
    assert [event.sequence for event in events] == [1, 2, 3, 4, 5]
    assert [event.progress for event in events] == [0.0, 0.0, 0.5, 0.5, 1.0]
    assert events[0].payload == "start"
    result = events[-1].payload
    assert isinstance(result, StreamingToolResult)
    assert (result.final, result.chunks) == (2, ("a", "b"))


async def test_session_events_end_with_the_error() -> None:
    """A failing tool's events end with one ERROR carrying the translated error."""
    async with StreamingToolSession(Failing(ValueError("bad")), 1) as session:
        events = [event async for event in session.events()]
    assert [event.kind.name for event in events] == ["PARTIAL", "ERROR"]
    assert isinstance(events[-1].error, ToolStreamError)


async def test_bridge_projects_a_session_onto_the_bus() -> None:
    """A bridged session's partials and result reach the bus and subscribers, linked to the call."""
    with MemoryBus() as bus:
        results = bus.subscribe("tool.result")
        async with StreamingToolSession(Counter(), Lines(count=2)) as session:
            result = await bridge(session.events(), bus, call_id="call-1", tool_name="counter")
        assert result.final == Summary(lines=2)
        assert bus.topics() == ["tool.stream.partial", "tool.stream.partial", "tool.result"]
        assert {envelope.parent_id for envelope in bus.envelopes} == {"call-1"}
        async with results:
            delivered = await results.receive()
        assert delivered.event.payload is result


async def test_bridge_raises_a_session_error_after_publishing_it() -> None:
    """A failing tool's error is published as the tool.result and raised by bridge."""
    bus = MemoryBus()
    async with StreamingToolSession(Failing(ValueError("bad")), 0) as session:
        with pytest.raises(ToolStreamError, match="bad"):
            await bridge(session.events(), bus, call_id="call-2")
    assert bus.topics() == ["tool.result"]
    assert bus.envelopes[0].event.kind is ToolEventKind.ERROR


async def test_bridge_cancelled_mid_session_publishes_cancellation_and_stops_the_tool() -> None:
    """Cancelling a bridge over a running session ends the tool and the call with ToolCancelled."""
    tool = Forever()
    bus = MemoryBus()
    with anyio.move_on_after(0.05):
        async with StreamingToolSession(tool, 0.001) as session:
            await bridge(session.events(), bus, call_id="call-3")
    assert tool.cleaned_up
    assert bus.topics().count("tool.result") == 1
    assert isinstance(bus.envelopes[-1].event.error, ToolCancelled)


SCRIPTS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.text(max_size=5)),
        st.tuples(st.just("progress"), st.one_of(st.none(), st.floats(0, 1))),
        st.tuples(st.just("fail"), st.none()),
    ),
    max_size=15,
)


@settings(max_examples=40, deadline=None)
@given(script=SCRIPTS, cancel_after=st.one_of(st.none(), st.integers(0, 10)))
async def test_any_tool_run_gives_numbered_events_with_one_end(
    script: list[tuple[str, Any]], cancel_after: int | None
) -> None:
    """Whatever a tool does and whenever it is cancelled, its events are 1..n with one end, last."""

    async def play(_: int) -> AsyncGenerator[Any, None]:
        for action, argument in script:
            if action == "send":
                yield argument
            elif action == "progress":
                yield Progress(fraction=argument)
            else:
                raise ValueError("scripted failure")

    events: list[ToolEvent] = []
    async with StreamingToolSession(Generated(play, chunk_buffer=2), 0) as session:
        async for event in session.events():
            events.append(event)
            if cancel_after is not None and len(events) == cancel_after:
                session.cancel()
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    assert [event.terminal for event in events].count(True) == 1
    assert events[-1].terminal
    sends = [argument for action, argument in script if action == "send"]
    fails = any(action == "fail" for action, _ in script)
    partials = [event.payload for event in events if event.kind is ToolEventKind.PARTIAL]
    assert partials == sends[: len(partials)]
    if cancel_after is None:
        if fails:
            assert events[-1].kind is ToolEventKind.ERROR
        else:
            assert events[-1].kind is ToolEventKind.COMPLETE
            assert partials == sends
            assert events[-1].payload.final == len(sends)
