"""One MCP server process and its standard input and output (SPEC §18.2, §18.6): started in a
session of its own, read line by line within `mcp_wire.MAX_LINE`, stopped gracefully (its
input closed, then TERM, then KILL to its process group, every wait bounded and shielded).

While the server starts, the `mcp` SDK's ClientSession speaks through `for_sdk()` (the
handshake and `tools/list`, once a process); after that brokerd speaks `tools/call` itself
(`call`): its line is written at once, and the answer is taken by a callback on the pipe
(`bxcore.aio`), with no task, stream or model between (docs/performance.md says what that
saved). Every line the server writes then is parsed strictly (`wire`): one that is not a
message brokerd takes ends the server and fails the calls in flight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from bxcore import aio
from services.brokerd.mcp import wire as mcp_wire

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

CHUNK = 65536
STOP_S = 2.0  # each wait of the stop: for the server to end, then for TERM to end it
POLL_S = 0.01
MAX_UNWRITTEN = mcp_wire.MAX_LINE  # what brokerd holds for a server that does not read
SDK_QUEUE = 256  # messages a starting server may write ahead of the SDK's reading


class PipeError(Exception):
    """The server cannot answer a call: it ended, or wrote what is not an answer."""


def _time_out(waiting: aio.Future[mcp_wire.Reply | str]) -> None:
    if not waiting.done():
        waiting.set_exception(TimeoutError())


class ServerPipe:
    """The JSON-RPC of one running server; `on_end` is called once its output has ended (or
    was refused), after every call in flight was failed."""

    def __init__(self, process: subprocess.Popen[bytes], on_end: Callable[[], None]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._loop = aio.loop()
        self._in = process.stdin.fileno()
        self._out = process.stdout.fileno()
        self._on_end = on_end
        self._last_id = 0
        self._waiting: dict[int, aio.Future[mcp_wire.Reply | str]] = {}
        self._to_sdk: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._read = bytearray()  # the start of a line not ended yet
        self._unwritten = bytearray()
        self._writing = False  # a writer waits for room in the pipe
        self._input_open = True
        self._reading = False
        self.ended: str | None = None  # why it can answer no more
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._loop.add_reader(self._out, self._readable)
        self._reading = True

    def __repr__(self) -> str:
        state = f"ended: {self.ended}" if self.ended else f"{len(self._waiting)} calls waiting"
        return f"ServerPipe(pid {self.process.pid}, {state})"

    async def call(self, tool: str, arguments: str, timeout_s: float) -> dict[str, Any]:
        """The `result` object the server answers `tools/call` with; `PipeError` else, and
        TimeoutError when there is none within `timeout_s` (a timer on the loop: a cancel
        scope would cost the call more than the rest of its wait, docs/performance.md)."""
        if self.ended is not None:
            raise PipeError(self.ended)
        self._last_id += 1
        request_id = self._last_id
        waiting = self._waiting[request_id] = self._loop.create_future()
        late = self._loop.call_later(timeout_s, _time_out, waiting)
        try:
            self._send(mcp_wire.call_line(request_id, tool, arguments))
            reply = await waiting
        finally:
            late.cancel()
            self._waiting.pop(request_id, None)
        if not isinstance(reply, mcp_wire.Reply):
            raise PipeError(reply)
        if reply.result is None:
            raise PipeError(f"the server answered {reply.error}")
        return reply.result

    # --- writing -------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if self.ended is None and self._input_open:
            if len(self._unwritten) + len(data) > MAX_UNWRITTEN:
                # Answers to its own requests pile up while it never reads them: a server
                # cannot make brokerd hold what it refuses to take.
                self._end(f"the server left over {MAX_UNWRITTEN} bytes of its input unread")
                return
            self._unwritten += data
            self._flush()

    def _flush(self) -> None:
        try:
            while self._unwritten:
                del self._unwritten[: os.write(self._in, self._unwritten)]
        except BlockingIOError:
            if not self._writing:
                self._loop.add_writer(self._in, self._flush)
                self._writing = True
            return
        except OSError as error:
            self._end(f"its input is closed ({error.strerror or error})")
            return
        self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing:
            self._loop.remove_writer(self._in)
            self._writing = False

    def close_input(self) -> None:
        """The server's standard input closed: a server ends when it reads its end."""
        if self._input_open:
            self._stop_writing()
            self._input_open = False
            assert self.process.stdin is not None
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    # --- reading -------------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            chunk = os.read(self._out, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end("the server closed its output")
            return
        start = len(self._read)
        self._read += chunk
        try:
            while (end := self._read.find(b"\n", start)) >= 0:
                line = bytes(self._read[:end])
                del self._read[: end + 1]
                start = 0
                self._take(line)
        except mcp_wire.WireError as error:
            self._end(f"the server wrote what is not JSON-RPC ({error})")
            return
        if len(self._read) > mcp_wire.MAX_LINE:
            self._end(f"the server wrote a line longer than {mcp_wire.MAX_LINE} bytes")

    def _take(self, line: bytes) -> None:
        if self.ended is not None or not line.strip():
            return
        if self._to_sdk is not None:
            self._give_sdk(self._to_sdk, line)
            return
        message = mcp_wire.parse_line(line)
        if isinstance(message, mcp_wire.Reply):
            waiting = self._waiting.pop(message.id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(message)
        elif isinstance(message, mcp_wire.Asked):
            self._send(mcp_wire.answer_line(message))

    def _end(self, why: str) -> None:
        if self.ended is not None:
            return
        self.ended = why
        self._stop_reading()
        self._stop_writing()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_result(why)
        self._waiting.clear()
        if self._to_sdk is not None:
            self._to_sdk.close()  # the SDK's session sees the end, as its own transport shows it
        self._on_end()

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._out)
            self._reading = False

    def release(self) -> None:
        """Nothing watched any more, the output closed (once the process has ended)."""
        self._stop_reading()
        self.close_input()
        assert self.process.stdout is not None
        with contextlib.suppress(OSError):
            self.process.stdout.close()

    # --- the start, through the SDK ------------------------------------------------------

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

        to_sdk, sdk_reads = anyio.create_memory_object_stream[SessionMessage | Exception](SDK_QUEUE)
        sdk_writes, from_sdk = anyio.create_memory_object_stream[SessionMessage](0)

        async def forward() -> None:
            async with from_sdk:
                async for sent in from_sdk:
                    data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    self._send(data.encode() + b"\n")

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

    def _give_sdk(
        self, to_sdk: MemoryObjectSendStream[SessionMessage | Exception], line: bytes
    ) -> None:
        import mcp_types
        from mcp.shared.message import SessionMessage

        given: SessionMessage | Exception
        try:
            given = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
        except ValueError as error:  # pydantic's ValidationError: the session says so
            given = error
        try:
            to_sdk.send_nowait(given)
        except anyio.WouldBlock:
            self._end(f"the server wrote over {SDK_QUEUE} messages while it started")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


@contextlib.asynccontextmanager
async def running(
    argv: list[str], env: Mapping[str, str], errlog: TextIO, on_end: Callable[[], None]
) -> AsyncIterator[ServerPipe]:
    """The server started with `argv` (its standard error to `errlog`), read until it ends or
    the block is left; then stopped, whatever happened (OSError: it did not start)."""
    process = subprocess.Popen(
        argv,
        bufsize=0,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        start_new_session=True,
        env=dict(env),
    )
    try:
        pipe = ServerPipe(process, on_end)
    except BaseException:
        from bxcore import process_tree  # psutil: kept off brokerd's start, as child.py does

        process_tree.signal_group(process.pid, signal.SIGKILL)
        with process:  # closes its pipes and reaps it
            raise
    try:
        yield pipe
    finally:
        with anyio.CancelScope(shield=True):
            await stop(pipe)


async def stop(pipe: ServerPipe) -> None:
    """Its input closed, STOP_S to end; then TERM to its group, STOP_S; then KILL (the MCP
    lifecycle's order, as the SDK's stdio client stops a server)."""
    from bxcore.process_tree import signal_group  # psutil: kept off brokerd's start

    process = pipe.process
    pipe.close_input()
    if not await _ended(lambda: process.poll() is not None):
        signal_group(process.pid, signal.SIGTERM)
        # Reaped first: the group's leader left a zombie would count as alive.
        if not await _ended(lambda: process.poll() is not None and not _group_alive(process.pid)):
            signal_group(process.pid, signal.SIGKILL)
        await _ended(lambda: process.poll() is not None)
    pipe.release()


async def _ended(done: Callable[[], bool]) -> bool:
    with anyio.move_on_after(STOP_S):
        while not done():
            await anyio.sleep(POLL_S)
        return True
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a survivor we may not signal, or a zombie: not proven gone
    return True
