"""The streaming tool session: a tool run, its output read through a policy for the context.

The README's "Streaming tools and events" section has this example whole
(`TailInput`, `TailSummary` and `follow` defined, as `snippets/streaming_tools.py`):

```python
class Tail(StreamingTool[TailInput, str, TailSummary]):
    '''Follows a log and streams its new lines.'''

    name = "tail"
    policy = Window(max_chunks=200)

    async def start(self, input: TailInput) -> StreamingToolHandle[str, TailSummary]:
        async def run(channel: ToolChannel[str]) -> TailSummary:
            count = 0
            async for line in follow(input.path):
                await channel.send(line)
                count += 1
            return TailSummary(lines=count)

        return TaskHandle(run)


async with StreamingToolSession(Tail(), TailInput(path="app.log")) as session:
    while (line := await session.next_chunk()) is not None:
        if "ERROR" in line:
            session.cancel()
    print(session.context_window().estimated_tokens)
```

How the parts fit:

- A `StreamingTool` (`executor._tools.tool`) declares its types and default
  policy; `start(input)` returns a `StreamingToolHandle`
  (`executor._tools.handle`), such as a `TaskHandle` or a process session.
- A `StreamingToolSession` starts the tool when its `async with` block is
  entered and ends whatever still runs when the block is left.
  `next_chunk()` gives your code every chunk, in order. The policy
  (`executor._tools.policies`) decides what the model's context holds of the
  stream: `context_window()` measures it and `finalize()` returns it with the
  tool's final value (`executor._tools.context`).

Idempotent tools (`idempotent = True`) can be run under a journal:
`StreamingToolSession(tool, input, journal=journal, key=key)` records the
key before the tool starts and its final value when it finishes; a session
with a key that has a final returns it without starting the tool, and one
whose run was interrupted raises `RunInterrupted` (or runs it again, with
`on_interrupted="rerun"`).

Backpressure: nothing reads ahead. A chunk moves from the tool only when
`next_chunk()` or `finalize()` asks for one, so a tool that produces faster
than its reader is suspended rather than buffered without bound.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Generic, Literal, NoReturn, Self, TypeVar

import anyio
import attrs

from executor._core.errors import CommandError, InvalidArgument, PolicyDenied, ToolStreamError
from executor._core.resource import AsyncChunks
from executor._core.stdin import StdinEvent
from executor._journal.keys import IdempotencyKey, optional_key
from executor._journal.protocol import Journal, OnInterrupted
from executor._policies.verdict import Verdict
from executor._tools.context import (
    ContextWindow,
    HeldOutput,
    StreamingToolResult,
    join_texts,
    truncate,
)
from executor._tools.events import EventSequencer, ToolEvent
from executor._tools.handle import Progress, StreamingToolHandle
from executor._tools.policies import (
    Manual,
    OutputApprovalRequest,
    OutputApprover,
    StreamingPolicy,
    Summarise,
    TimeoutAction,
    Window,
    check_policy,
)
from executor._tools.replay import ReplayHandle, ToolRecorder, bind_tool_run
from executor._tools.tool import StreamingTool, check_tool, declared_types

_logger = logging.getLogger("executor")

InputT = TypeVar("InputT")
ChunkT = TypeVar("ChunkT")
FinalT = TypeVar("FinalT")


_SessionState = Literal["new", "open", "ended", "failed", "cancelled", "closed"]


def _translate(exc: Exception, tool: str) -> Exception:
    """Our errors as they are; a tool's own exception as a `ToolStreamError` (one boundary)."""
    if isinstance(exc, CommandError | InvalidArgument):
        return exc
    error = ToolStreamError(f"the tool {tool} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


@attrs.define(eq=False)
class StreamingToolSession(AsyncChunks[ChunkT], Generic[InputT, ChunkT, FinalT]):
    """A running streaming tool, read through a policy that decides what the context holds.

    ```python
    async with StreamingToolSession(tool, input, policy=Window(max_chunks=50)) as session:
        async for chunk in session:
            ...
        result = await session.finalize()
    ```

    Entering the block starts the tool; leaving it cancels whatever still
    runs and waits for it to stop, also when the block is left by an error
    or a cancellation. `next_chunk()` gives every chunk (under `Manual`,
    every approved chunk) in order; `context_window()` and `finalize()`
    report what the policy holds for the model's context.

    Args:
        tool: The tool to run.
        input: Its input, already of its input type (`tool.parse_input`
            turns a model's JSON into one).
        policy: Overrides the tool's own `policy`.
        call_id: The id of the tool call, passed to approvers.
        journal: Records the run of an idempotent tool (`SqliteJournal`):
            the key before it starts, the final value when it ends. A key
            with a final is answered from it, without starting the tool.
        key: The run's `IdempotencyKey` (or its text); a new one when
            omitted. Keep it to recover the run after a crash.
        on_interrupted: For a key whose run started and never finished:
            `"fail"` raises `RunInterrupted`, `"rerun"` runs it again. The
            default is `"fail"`, or `"rerun"` for a tool that declares itself
            `resumable` (it continues from progress it recorded under the key,
            as the log tailer does).
    """

    tool: StreamingTool[InputT, ChunkT, FinalT]
    input: InputT
    policy: StreamingPolicy = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda self: check_tool(self.tool).policy, takes_self=True),
    )
    call_id: str | None = attrs.field(default=None, kw_only=True)
    journal: Journal | None = attrs.field(default=None, kw_only=True)
    key: IdempotencyKey | None = attrs.field(
        default=None,
        kw_only=True,
        converter=optional_key,
    )
    on_interrupted: OnInterrupted = attrs.field(
        kw_only=True,
        # A tool that resumes from its own recorded progress reruns an interrupted key safely.
        default=attrs.Factory(
            lambda self: "rerun" if getattr(self.tool, "resumable", False) else "fail",
            takes_self=True,
        ),
    )
    _recorder: ToolRecorder | None = attrs.field(default=None, init=False, repr=False)
    _handle: StreamingToolHandle[ChunkT, FinalT] | None = attrs.field(
        default=None, init=False, repr=False
    )
    _state: _SessionState = attrs.field(default="new", init=False, repr=False)
    _lock: anyio.Lock | None = attrs.field(default=None, init=False, repr=False)
    _held: HeldOutput[ChunkT] = attrs.field(factory=HeldOutput, init=False, repr=False)
    _outcome: StreamingToolResult[ChunkT, FinalT] | Exception | None = attrs.field(
        default=None, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        check_tool(self.tool)
        check_policy(self.policy)
        if self.on_interrupted not in ("fail", "rerun"):
            raise ValueError(
                f"on_interrupted must be 'fail' or 'rerun', got {self.on_interrupted!r}"
            )
        if self.journal is not None:
            if not self.tool.idempotent:
                raise ValueError(
                    f"{type(self.tool).__name__} is not idempotent, so a journal cannot "
                    "answer for it: set idempotent = True on the tool if a repeat may be "
                    "answered with its recorded final value"
                )
            if self.key is None:
                self.key = IdempotencyKey.new()
            self._recorder = ToolRecorder(
                journal=self.journal,
                key=self.key,
                name=self.tool.name,
                input=self.input,
                final_type=declared_types(self.tool)[2],
                on_interrupted=self.on_interrupted,
            )

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.tool.name

    @property
    def idempotent(self) -> bool:
        """Whether the tool declared itself idempotent (recoverable from a journal)."""
        return bool(self.tool.idempotent)

    @property
    def recovered(self) -> bool:
        """Whether the result comes from the journal: the tool did not run in this session."""
        recorder = self._recorder
        return recorder is not None and recorder.claim is None and recorder.settled

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a StreamingToolSession runs once")
        recorder = self._recorder
        stored = None
        if recorder is not None:
            try:
                stored = await recorder.begin()
            except BaseException:
                self._state = "closed"
                raise
        try:
            if stored is not None and recorder is not None:
                handle = typing.cast(Any, ReplayHandle(recorder, stored))
            else:
                with bind_tool_run(recorder):
                    handle = await self.tool.start(self.input)
        except BaseException as exc:
            self._state = "closed"
            if recorder is not None:
                # A start() that failed started nothing; one cancelled part-way
                # may have (a process session spawns in start()): interrupted.
                await recorder.abandon(ran=not isinstance(exc, Exception))
            if not isinstance(exc, Exception):
                raise
            await self._raise_translated(exc, outcome=False)
        if not isinstance(handle, StreamingToolHandle):
            self._state = "closed"
            if recorder is not None:
                await recorder.abandon(ran=False)
            raise TypeError(
                f"{type(self.tool).__name__}.start() must return a StreamingToolHandle, "
                f"got {type(handle).__name__}"
            )
        try:
            await handle.__aenter__()
        except BaseException:
            self._state = "closed"
            if recorder is not None:
                await recorder.abandon()
            raise
        self._handle = handle
        # The reader's receive already yields to the event loop once per chunk;
        # an uncontended lock need not make it twice.
        self._lock = anyio.Lock(fast_acquire=True)
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        if self._state == "open" or not isinstance(self._outcome, StreamingToolResult):
            # Not finished: what is left must not outlive the block.
            handle.cancel()
        self._state = "closed"
        # Not wrapped in a shield: a handle may hold a task group, which must be
        # left from its own scope. Each handle shields its own cleanup (a process
        # is reaped under a shield); a task group waits for its tasks regardless.
        try:
            await handle.__aexit__(exc_type, exc, tb)
        finally:
            if self._recorder is not None:
                # Ended without a final (cancelled, or left early): interrupted.
                await self._recorder.abandon()

    def _running(self) -> StreamingToolHandle[ChunkT, FinalT]:
        if self._handle is None:
            if self._state == "new":
                raise RuntimeError("enter the session first: async with StreamingToolSession(...)")
            raise RuntimeError("the session is closed")
        return self._handle

    def _guard(self) -> anyio.Lock:
        # One reader at a time: the policy's state changes with every chunk.
        self._running()
        assert self._lock is not None
        return self._lock

    # --- reading --------------------------------------------------------------------

    async def _read(self) -> ChunkT | Progress | None:
        """The next item from the tool, before any policy; `None` at the end."""
        handle = self._running()
        if self._state != "open":
            return None
        try:
            item = await handle.next_chunk()
        except Exception as exc:
            self._state = "failed"
            # The tool ended with this error: it is its outcome.
            await self._raise_translated(exc, outcome=True)
        if self._cancel_called():
            # cancel() came while we waited: what the tool sent after it is not read.
            return None
        if item is None:
            self._state = "ended"
            return None
        return item

    async def _raise_translated(self, exc: Exception, *, outcome: bool) -> NoReturn:
        """Raise `exc` as the session's error (`_translate`); with `outcome`, journal it too."""
        translated = _translate(exc, self.name)
        if outcome and self._recorder is not None:
            await self._recorder.failed(translated)
        if translated is exc:
            raise exc
        raise translated from exc

    def _cancel_called(self) -> bool:
        return self._state == "cancelled"

    async def _next_item(self) -> ChunkT | Progress | None:
        async with self._guard():
            item = await self._read()
            if item is None or isinstance(item, Progress):
                return item
            await self._release(item)
            return item

    async def _release(self, chunk: ChunkT) -> None:
        """Approve (`Manual`) and hold a chunk the caller is about to get."""
        held = self._held
        held.received += 1
        text = self.tool.render(chunk)
        if isinstance(self.policy, Manual):
            try:
                await self._approve(self.policy, "chunk", held.received, text)
            except PolicyDenied:
                held.dropped += 1
                raise
        await self._hold(chunk, text)

    async def _hold(self, chunk: ChunkT, text: str) -> None:
        held = self._held
        policy = self.policy
        if isinstance(policy, Window) and len(held.chunks) >= policy.max_chunks:
            held.drop_oldest()
        held.hold(chunk, text)
        if isinstance(policy, Summarise) and len(held.chunks) >= policy.chunk_threshold:
            await self._summarise(policy)

    async def next_chunk(self) -> ChunkT | None:
        """The next chunk, after the policy has taken it in; `None` at the end of the stream.

        Under `Summarise` this may wait for the summarizer; under `Manual`
        it waits for the approvers. After `cancel()` it returns `None`.

        Raises:
            PolicyDenied: `Manual` withheld this chunk (the next call reads on).
            ToolStreamError: The tool failed (its error is the cause).
            CommandError: The tool failed with one of the executor's errors.
        """
        while True:
            item = await self._next_item()
            if not isinstance(item, Progress):
                return item

    async def send_stdin(self, event: StdinEvent) -> None:
        """Send a stdin event to the tool, waiting while its input buffer is full.

        Raises:
            TypeError: `event` is not a `Text`, `Bytes`, `Signal` or `Resize`.
            ToolStreamError: The tool takes no stdin, or has ended.
        """
        if not isinstance(event, StdinEvent):
            raise TypeError(f"expected Text, Bytes, Signal or Resize, got {type(event).__name__}")
        handle = self._running()
        try:
            await handle.send_stdin(event)
        except Exception as exc:
            await self._raise_translated(exc, outcome=False)

    async def close_stdin(self) -> None:
        """End the tool's input (EOF, as Ctrl+D); its output can still be read.

        `finalize()` does this first, so a tool that reads its input to the
        end can finish.
        """
        await self._running().close_stdin()

    def cancel(self) -> None:
        """Cancel the tool: the stream ends (`next_chunk()` returns `None`), `finalize()` raises."""
        handle = self._running()
        if self._state == "open":
            self._state = "cancelled"
        handle.cancel()

    # --- the end ----------------------------------------------------------------------

    async def finalize(self) -> StreamingToolResult[ChunkT, FinalT]:
        """Close stdin, read the rest through the policy, wait for the tool, return its result.

        Chunks not read yet pass through the policy as they would have through
        `next_chunk()` (under `Manual` they are dropped, never shown). Then
        `Summarise` makes its last pass and `Manual` asks about the final
        value. Waits as long as the tool runs; `cancel()` it, or put the call
        under a timeout, to stop sooner. A second call returns the same
        result (or raises the same error).

        Raises:
            ToolCancelled: The tool was cancelled.
            PolicyDenied: `Manual` withheld the final value.
            ToolStreamError: The tool failed (its error is the cause).
            CommandError: The tool failed with one of the executor's errors.
        """
        handle = self._running()
        async with self._guard():
            if isinstance(self._outcome, Exception):
                raise self._outcome
            if self._outcome is not None:
                return self._outcome
            try:
                result = await self._finish(handle)
            except Exception as exc:
                self._outcome = exc
                raise
            self._outcome = result
            return result

    async def _finish(
        self, handle: StreamingToolHandle[ChunkT, FinalT]
    ) -> StreamingToolResult[ChunkT, FinalT]:
        held = self._held
        policy = self.policy
        # No more input can come once the caller waits for the end, and a tool
        # that reads its input to the end could not finish without knowing.
        await handle.close_stdin()
        while (item := await self._read()) is not None:
            if isinstance(item, Progress):
                continue
            held.received += 1
            if isinstance(policy, Manual):
                held.dropped += 1
            else:
                await self._hold(item, self.tool.render(item))
        try:
            final = await handle.finalize()
        except Exception as exc:
            await self._raise_translated(exc, outcome=True)
        if self._recorder is not None:
            # Recorded before any approval below: the tool's work is done either way.
            await self._recorder.finished(final)
        if self._state == "open":
            self._state = "ended"
        if isinstance(policy, Summarise) and len(self._held_text()) > policy.max_summary_length:
            await self._summarise(policy)
        final_text = self.tool.render(final)
        if isinstance(policy, Manual):
            await self._approve(policy, "final", None, final_text)
        held.final_text = final_text
        return StreamingToolResult(
            final=final,
            chunks=tuple(chunk for chunk, _, _ in held.chunks),
            summary=held.summary,
            context=held.window(),
        )

    def context_window(self) -> ContextWindow:
        """What the session holds for the model's context now, with counts of what it read."""
        return self._held.window()

    async def events(self) -> AsyncIterator[ToolEvent]:
        """The rest of the stream as `ToolEvent`s, for `bridge`: numbered from 1, one end.

        A progress report is a `PROGRESS` event, a chunk a `PARTIAL`, and the
        end either a `COMPLETE` carrying the `StreamingToolResult` or an
        `ERROR` carrying what `next_chunk()` or `finalize()` raised (a
        denial included). Nothing follows the end.
        """
        sequencer = EventSequencer()
        while True:
            try:
                item = await self._next_item()
            except Exception as exc:
                yield sequencer.error(exc)
                return
            if item is None:
                break
            if isinstance(item, Progress):
                yield sequencer.progress(item.fraction, item.payload)
            else:
                yield sequencer.partial(item)
        try:
            result = await self.finalize()
        except Exception as exc:
            yield sequencer.error(exc)
            return
        yield sequencer.complete(result)

    # --- policies at work ---------------------------------------------------------------

    def _held_text(self) -> str:
        held = self._held
        texts = [self.tool.render(chunk) for chunk, _, _ in held.chunks]
        return join_texts(([held.summary] if held.summary is not None else []) + texts)

    async def _summarise(self, policy: Summarise) -> None:
        text = self._held_text()
        limit = policy.max_summary_length
        held = self._held
        held.summaries += 1
        summary: object = None
        if policy.summarizer is not None:
            try:
                with anyio.move_on_after(
                    policy.timeout if policy.timeout is not None else float("inf")
                ) as scope:
                    summary = await policy.summarizer(text)
                if scope.cancelled_caught:
                    _logger.warning(
                        "the summarizer of %s gave no answer within %g s; truncating instead",
                        self.name,
                        policy.timeout,
                    )
                elif not isinstance(summary, str):
                    _logger.warning(
                        "the summarizer of %s returned %s, not a str; truncating instead",
                        self.name,
                        type(summary).__name__,
                    )
            except Exception:
                # A summary is a convenience; losing it must not lose the stream.
                _logger.warning(
                    "the summarizer of %s failed; truncating instead", self.name, exc_info=True
                )
        if isinstance(summary, str):
            held.replace_with_summary(truncate(summary, limit))
        else:
            held.truncations += 1
            held.replace_with_summary(truncate(text, limit))

    async def _approve(
        self, policy: Manual, kind: Literal["chunk", "final"], number: int | None, text: str
    ) -> None:
        request = OutputApprovalRequest(
            tool=self.name,
            call_id=self.call_id,
            kind=kind,
            number=number,
            preview=text[: policy.preview_length],
            length=len(text),
        )
        what = f"chunk {number} of {self.name}" if kind == "chunk" else f"the result of {self.name}"
        verdicts: list[Verdict | None] = [None] * len(policy.approvers)
        denial: Verdict | None = None
        failure: Exception | None = None

        async def ask(index: int, approver: OutputApprover, scope: anyio.CancelScope) -> None:
            nonlocal denial, failure
            try:
                answer = await approver(request)
            except Exception as exc:
                failure = exc
                scope.cancel()
                return
            verdict = answer if isinstance(answer, Verdict) else Verdict(bool(answer))
            verdicts[index] = verdict
            if not verdict.approved and denial is None:
                # One no is enough; the others need not answer.
                denial = verdict
                scope.cancel()

        with anyio.move_on_after(policy.timeout if policy.timeout is not None else float("inf")):
            async with anyio.create_task_group() as group:
                for index, approver in enumerate(policy.approvers):
                    group.start_soon(ask, index, approver, group.cancel_scope)
        if failure is not None:
            raise failure
        if denial is not None:
            reason = f": {denial.reason}" if denial.reason else ""
            raise PolicyDenied(f"{what} was not approved for the context{reason}")
        if all(verdict is not None for verdict in verdicts):
            return
        if policy.timeout_action is TimeoutAction.ALLOW:
            return
        assert policy.timeout is not None  # without a timeout every approver answered
        raise PolicyDenied(f"no approval came within {policy.timeout:g} s, so {what} was withheld")
