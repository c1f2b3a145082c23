"""One MCP server process and its standard input and output (SPEC §18.2, §18.6): started in a
session of its own, read line by line within `mcp_wire.MAX_LINE`, stopped gracefully (its
input closed, then TERM, then KILL to its process group, every wait bounded and shielded).

While the server starts, the `mcp` SDK's ClientSession speaks through `for_sdk()` (the
handshake and `tools/list`, once a process); after that brokerd speaks `tools/call` itself
(`call`), one line out and one in, with no task or model between (docs/performance.md says
what that saved). Every line the server writes then is parsed strictly (`mcp_wire`): one
that is not a message brokerd takes ends the server and fails the calls in flight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from services.brokerd import mcp_wire

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

CHUNK = 65536
STOP_S = 2.0  # each wait of the stop: for the server to end, then for TERM to end it
POLL_S = 0.01


class PipeError(Exception):
    """The server cannot answer a call: it ended, or wrote what is not an answer."""


class _Waiter:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.reply: mcp_wire.Reply | str | None = None  # a str: why there is no reply


class ServerPipe:
    """The JSON-RPC of one running server; `on_end` is called once its output has ended (or
    was refused), after every call in flight was failed."""

    def __init__(self, process: anyio.abc.Process, on_end: Callable[[], None]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._on_end = on_end
        self._last_id = 0
        self._waiting: dict[int, _Waiter] = {}
        self._to_sdk: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self.ended: str | None = None  # why it can answer no more

    def __repr__(self) -> str:
        state = f"ended: {self.ended}" if self.ended else f"{len(self._waiting)} calls waiting"
        return f"ServerPipe(pid {self.process.pid}, {state})"

    async def call(self, tool: str, arguments: str) -> dict[str, Any]:
        """The `result` object the server answers `tools/call` with; `PipeError` else."""
        if self.ended is not None:
            raise PipeError(self.ended)
        self._last_id += 1
        request_id = self._last_id
        waiter = self._waiting[request_id] = _Waiter()
        try:
            await self._write(mcp_wire.call_line(request_id, tool, arguments))
            await waiter.done.wait()
        finally:
            self._waiting.pop(request_id, None)
        reply = waiter.reply
        if not isinstance(reply, mcp_wire.Reply):
            raise PipeError(reply or "no answer")
        if reply.result is None:
            raise PipeError(f"the server answered {reply.error}")
        return reply.result

    async def _write(self, data: bytes) -> None:
        try:
            await self._stdin.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
            raise PipeError(f"its input is closed ({type(error).__name__})") from None

    @contextlib.asynccontextmanager
    async def for_sdk(
        self,
    ) -> AsyncIterator[
        tuple[
            MemoryObjectReceiveStream[SessionMessage | Exception],
            MemoryObjectSendStream[SessionMessage],
        ]
    ]:
        """The streams the SDK's ClientSession speaks through while the server starts: what
        it writes goes to the server, what the server writes goes to it (parsed by the SDK,
        as its own stdio transport does). After it, brokerd reads the server itself."""
        from mcp.shared.message import SessionMessage

        to_sdk, sdk_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        sdk_writes, from_sdk = anyio.create_memory_object_stream[SessionMessage](0)

        async def forward() -> None:
            async with from_sdk:
                async for sent in from_sdk:
                    data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    with contextlib.suppress(PipeError):  # the SDK sees the end when reading
                        await self._write(data.encode() + b"\n")

        self._to_sdk = to_sdk
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(forward)
                try:
                    yield sdk_reads, sdk_writes
                finally:
                    sdk_writes.close()  # `forward` ends
        finally:
            self._to_sdk = None
            to_sdk.close()
            sdk_reads.close()

    async def read(self) -> None:
        """Read the server's lines until its output ends; then fail what waits."""
        why = "the server closed its output"
        buffer = bytearray()
        try:
            while True:
                try:
                    chunk = await self._stdout.receive(CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                start = len(buffer)
                buffer += chunk
                while (end := buffer.find(b"\n", start)) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    start = 0
                    await self._take(line)
                if len(buffer) > mcp_wire.MAX_LINE:
                    why = f"the server wrote a line longer than {mcp_wire.MAX_LINE} bytes"
                    break
        except mcp_wire.WireError as error:
            why = f"the server wrote what is not JSON-RPC ({error})"
        finally:
            self._end(why)

    async def _take(self, line: bytes) -> None:
        if not line.strip():
            return
        if self._to_sdk is not None:
            await self._give_sdk(self._to_sdk, line)
            return
        message = mcp_wire.parse_line(line)
        if isinstance(message, mcp_wire.Reply):
            waiter = self._waiting.pop(message.id, None)
            if waiter is not None:
                waiter.reply = message
                waiter.done.set()
        elif isinstance(message, mcp_wire.Asked):
            with contextlib.suppress(PipeError):  # its end is seen by this reader
                await self._write(mcp_wire.answer_line(message))

    async def _give_sdk(
        self, to_sdk: MemoryObjectSendStream[SessionMessage | Exception], line: bytes
    ) -> None:
        import mcp_types
        from mcp.shared.message import SessionMessage

        given: SessionMessage | Exception
        try:
            given = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
        except ValueError as error:  # pydantic's ValidationError: the session says so
            given = error
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await to_sdk.send(given)

    def _end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
        for waiter in self._waiting.values():
            waiter.reply = self.ended
            waiter.done.set()
        self._waiting.clear()
        if self._to_sdk is not None:
            self._to_sdk.close()  # the SDK's session sees the end, as its own transport shows it
        self._on_end()


@contextlib.asynccontextmanager
async def running(
    argv: list[str], env: Mapping[str, str], errlog: TextIO, on_end: Callable[[], None]
) -> AsyncIterator[ServerPipe]:
    """The server started with `argv` (its standard error to `errlog`), read until it ends or
    the block is left; then stopped, whatever happened (OSError: it did not start)."""
    process = await anyio.open_process(argv, env=dict(env), stderr=errlog, start_new_session=True)
    pipe = ServerPipe(process, on_end)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pipe.read)
        try:
            yield pipe
        finally:
            with anyio.CancelScope(shield=True):
                await stop(process)
            tasks.cancel_scope.cancel()


async def stop(process: anyio.abc.Process) -> None:
    """Its input closed, STOP_S to end; then TERM to its group, STOP_S; then KILL (the MCP
    lifecycle's order, as the SDK's stdio client stops a server)."""
    assert process.stdin is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _ended(lambda: process.returncode is not None):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _ended(lambda: not _group_alive(process.pid)):
            _signal_group(process.pid, signal.SIGKILL)
        await _ended(lambda: process.returncode is not None)
    with anyio.move_on_after(STOP_S):  # its pipes closed and the end seen; bounded all the same
        await process.aclose()


async def _ended(done: Callable[[], bool]) -> bool:
    with anyio.move_on_after(STOP_S):
        while not done():
            await anyio.sleep(POLL_S)
        return True
    return False


def _signal_group(pgid: int, number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, number)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a survivor we may not signal, or a zombie: not proven gone
    return True
