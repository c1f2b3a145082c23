"""A fake model server: real HTTP on 127.0.0.1, scripted per test, recording every request.

It speaks OpenAI chat completions (`POST …/chat/completions`) and Anthropic messages
(`POST …/messages`), whole or streamed (SSE) as the request asks. Each request takes the next
queued action (an answer, a failure, raw bytes, a hang-up), else asks `respond_with`'s function.
Zero latency unless told. Used by loopd's unit, service and end-to-end tests; never by production.

    with FakeModel() as model:
        model.reply(text="hi")
        model.reply(tool_calls=[("read_file", '{"path":"/a"}')])
        ... point [model] base_url at model.base_url ...
        model.requests[0]["messages"]
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

AUTO = "<auto>"  # a tool call's id when the test does not care: the server makes one up


@dataclass(frozen=True)
class Call:
    """A tool call the fake model makes. `arguments` a string is sent as written, anything else
    as a JSON value (as some local servers do); `id` None sends no id at all."""

    name: str
    arguments: object = "{}"
    id: str | None = AUTO


CallLike = Call | tuple[str, object] | tuple[str, object, str | None]


@dataclass(frozen=True)
class Answer:
    """`finish`: the finish_reason (openai) or stop_reason (anthropic) to send instead of the
    usual one (`"length"`, `"max_tokens"`: a cut-off answer). `usage`: the tokens (read,
    written) it says it cost, None (the default: a test that counts tokens says them) to say
    nothing; a stream says it as each server does (openai: only when asked by
    `stream_options`)."""

    text: str = ""
    tool_calls: tuple[Call, ...] = ()
    delay_s: float = 0.0
    finish: str | None = None
    usage: tuple[int, int] | None = None


@dataclass(frozen=True)
class Failure:
    """An HTTP error in the provider's own error shape, with `Retry-After` if given."""

    status: int
    message: str = "the fake model server failed on purpose"
    retry_after: str | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class Raw:
    """Exactly these bytes, for answers no real server would give, or a recorded one replayed.
    `chunk` > 0 sends them chunked, that many bytes a chunk, each written on its own."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    delay_s: float = 0.0
    chunk: int = 0


@dataclass(frozen=True)
class HangUp:
    """Read the request, then close the connection without a byte of answer."""

    delay_s: float = 0.0


@dataclass(frozen=True)
class Drip:
    """A chunked answer sent piece by piece, `every_s` apart, until `pieces()` ends, the
    client goes away or the server stops: a slow, endless or huge answer."""

    pieces: Callable[[], Iterable[bytes]]
    every_s: float = 0.0
    content_type: str = "text/event-stream"
    delay_s: float = 0.0


Action = Answer | Failure | Raw | HangUp | Drip


@dataclass(frozen=True)
class Request:
    """One request as received: `body` is the parsed JSON (None if it was not JSON)."""

    path: str
    headers: dict[str, str]  # names in lower case
    body: Any
    raw: bytes

    @property
    def api(self) -> str:
        return "anthropic" if self.path.split("?")[0].endswith("/messages") else "openai"

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True


class FakeModel:
    """The server, serving from construction until `close()` (a context manager closes it).

    `base_url` (`http://127.0.0.1:PORT/v1`) suits both providers: openai posts to
    `/v1/chat/completions`, anthropic to `/v1/messages`. `delay_s` delays every answer;
    `record=False` keeps no request (`received`, `wait_for` then see none)."""

    def __init__(self, *, delay_s: float = 0.0, record: bool = True) -> None:
        self.delay_s = delay_s
        self.refuse_stream_options = False  # True: a 400 for a request with `stream_options`
        self.record = record  # False: keep no request (a benchmark making a million)
        self._lock = threading.Condition()
        self._queue: deque[Action] = deque()
        self._received: list[Request] = []
        self._respond: Callable[[Request], Action | None] | None = None
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def __repr__(self) -> str:
        state = "stopped" if self._stopping.is_set() else "serving"
        with self._lock:
            queued, seen = len(self._queue), len(self._received)
        return f"<FakeModel {self.base_url} {state}, {queued} queued, {seen} requests>"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving; answers still waiting out a delay are dropped. Safe to call twice."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # wakes handlers waiting on a kept-alive connection
            _shut(connection)
        self._server.server_close()  # joins the handler threads
        self._thread.join()

    # -- scripting --------------------------------------------------------------------------

    def reply(
        self,
        text: str = "",
        tool_calls: Sequence[CallLike] = (),
        *,
        delay_s: float = 0.0,
        finish: str | None = None,
        usage: tuple[int, int] | None = None,
    ) -> None:
        """Queue an answer: text, tool calls (`("read_file", '{"path":"/a"}')`, a third item
        for the id, None for none), or both; `finish` for another finish or stop reason;
        `usage` for the tokens (read, written) it says it cost (None: it says nothing, as many
        local servers do)."""
        calls = tuple(_call(call) for call in tool_calls)
        self._push(Answer(text, calls, delay_s, finish, usage))

    def fail(
        self,
        status: int,
        message: str = "the fake model server failed on purpose",
        *,
        retry_after: float | str | None = None,
        times: int = 1,
        delay_s: float = 0.0,
    ) -> None:
        after = None if retry_after is None else _header_value(retry_after)
        for _ in range(times):
            self._push(Failure(status, message, after, delay_s))

    def raw(
        self,
        body: bytes | str,
        *,
        status: int = 200,
        content_type: str = "application/json",
        delay_s: float = 0.0,
        chunk: int = 0,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self._push(Raw(data, status, content_type, delay_s, chunk))

    def malformed(self) -> None:
        """Queue a 200 answer that is not JSON."""
        self.raw(b'{"choices": [{"message": ')

    def hang_up(self, *, times: int = 1, delay_s: float = 0.0) -> None:
        for _ in range(times):
            self._push(HangUp(delay_s))

    def stall(self, seconds: float, *, times: int = 1) -> None:
        """Queue requests that get no answer for `seconds`, then a hang-up."""
        self.hang_up(times=times, delay_s=seconds)

    def respond_with(self, function: Callable[[Request], Action | None] | None) -> None:
        """Answer each request the queue has nothing for by `function(request)`; None from it
        (or no function) gets a 400 saying nothing was queued."""
        with self._lock:
            self._respond = function

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- what it received --------------------------------------------------------------------

    @property
    def received(self) -> list[Request]:
        with self._lock:
            return list(self._received)

    @property
    def requests(self) -> list[Any]:
        """The parsed JSON body of every request, in the order they came."""
        return [request.body for request in self.received]

    @property
    def headers(self) -> list[dict[str, str]]:
        return [request.headers for request in self.received]

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Any]:
        """Block until `count` requests came (for tests where another process is the client)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while len(self._received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self!r}: waited {timeout_s:g} s for {count} requests")
                self._lock.wait(left)
            return [request.body for request in self._received]

    # -- the server's side ------------------------------------------------------------------

    def _push(self, action: Action) -> None:
        with self._lock:
            self._queue.append(action)

    def _take(self, request: Request, *, consume: bool = True) -> Action | None:
        """Record `request` and give its action: the next queued, else `respond_with`'s."""
        with self._lock:
            if self.record:
                self._received.append(request)
            self._lock.notify_all()
            if not consume:
                return None
            if self._queue:
                return self._queue.popleft()
            respond = self._respond
        return respond(request) if respond is not None else None

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)


def _shut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)


def _call(call: CallLike) -> Call:
    if isinstance(call, Call):
        return call
    if len(call) == 2:
        return Call(call[0], call[1])
    return Call(call[0], call[1], call[2])


def _header_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so that server_close joins them
    block_on_close = True
    fake: FakeModel

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up (loopd timing out on purpose, in tests) is not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the
        # body for the client's delayed ACK, 40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fake = self.server.fake
        with fake._lock:
            fake._connections.add(self.connection)
            if fake._stopping.is_set():  # accepted as close() began: it reads nothing
                _shut(self.connection)

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.path.split("?")[0].endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self._send_json(404, {"error": {"message": f"no such path: {self.path}"}})

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.path, headers, body, raw)
        path = self.path.split("?")[0]
        if not (path.endswith("/chat/completions") or path.endswith("/messages")):
            fake._take(request, consume=False)
            self._send_json(404, {"error": {"message": f"no such path: {self.path}"}})
            return
        if fake.refuse_stream_options and isinstance(body, dict) and "stream_options" in body:
            fake._take(request, consume=False)
            refusal = "Unrecognized request argument supplied: stream_options"
            self._send_json(400, {"error": {"message": refusal, "type": "invalid_request_error"}})
            return
        action = fake._take(request)
        delay_s = fake.delay_s + (action.delay_s if action is not None else 0.0)
        if delay_s > 0 and fake._stopping.wait(delay_s):
            self.close_connection = True
            return
        try:
            self._act(request, action)
        except OSError:  # the client went away
            self.close_connection = True

    def _act(self, request: Request, action: Action | None) -> None:
        fake = self.server.fake
        if action is None:
            n = len(fake.received)
            action = Failure(400, f"the fake model server has no answer queued for request {n}")
        if isinstance(action, HangUp):
            self.close_connection = True
        elif isinstance(action, Raw) and action.chunk > 0:
            body, size = action.body, action.chunk
            pieces = (body[n : n + size] for n in range(0, len(body), size))
            self._send_chunked(action.status, action.content_type, pieces)
        elif isinstance(action, Raw):
            self._send(action.status, action.body, action.content_type)
        elif isinstance(action, Drip):
            self._send_drip(action)
        elif isinstance(action, Failure):
            self._send_json(action.status, _error(request.api, action), action.retry_after)
        elif request.stream:
            events = _openai_stream if request.api == "openai" else _anthropic_stream
            self._send_events(events(request, action, fake._next_id))
        else:
            whole = _openai_answer if request.api == "openai" else _anthropic_answer
            self._send_json(200, whole(request, action, fake._next_id))

    def _send_json(self, status: int, body: object, retry_after: str | None = None) -> None:
        extra = {"retry-after": retry_after} if retry_after is not None else {}
        self._send(status, json.dumps(body).encode(), "application/json", extra)

    def _send(
        self, status: int, data: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_drip(self, drip: Drip) -> None:
        self.send_response(200)
        self.send_header("content-type", drip.content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        stopping = self.server.fake._stopping
        for piece in drip.pieces():
            if drip.every_s > 0 and stopping.wait(drip.every_s):
                return
            if stopping.is_set():
                return
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_events(self, events: Iterator[bytes]) -> None:
        self._send_chunked(200, "text/event-stream", events)

    def _send_chunked(self, status: int, content_type: str, pieces: Iterator[bytes]) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in pieces:
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# -- the answers, in each API's shape --------------------------------------------------------


def _error(api: str, failure: Failure) -> dict[str, Any]:
    if api == "anthropic":
        return {"type": "error", "error": {"type": "api_error", "message": failure.message}}
    return {"error": {"message": failure.message, "type": "fake", "code": failure.status}}


def _input(arguments: object) -> object:
    """What Anthropic sends as `input`: an object; a string is parsed (if it can be)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _openai_calls(answer: Answer, next_id: Callable[[], int]) -> list[dict[str, Any]]:
    calls = []
    for call in answer.tool_calls:
        made: dict[str, Any] = {"type": "function"}
        if call.id == AUTO:
            made["id"] = f"call_fake_{next_id()}"
        elif call.id is not None:
            made["id"] = call.id
        made["function"] = {"name": call.name, "arguments": call.arguments}
        calls.append(made)
    return calls


def _openai_answer(request: Request, answer: Answer, next_id: Callable[[], int]) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.tool_calls:
        message["content"] = answer.text or None
        message["tool_calls"] = _openai_calls(answer, next_id)
    return {
        "id": f"chatcmpl-fake-{next_id()}",
        "object": "chat.completion",
        "created": 0,
        "model": _model(request),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": answer.finish or ("tool_calls" if answer.tool_calls else "stop"),
            }
        ],
        **_openai_usage(answer),
    }


def _openai_usage(answer: Answer) -> dict[str, Any]:
    if answer.usage is None:
        return {}
    read, written = answer.usage
    return {
        "usage": {
            "prompt_tokens": read,
            "completion_tokens": written,
            "total_tokens": read + written,
        }
    }


def _openai_stream(request: Request, answer: Answer, next_id: Callable[[], int]) -> Iterator[bytes]:
    """Text in three pieces, then each call: its id and name, then its arguments in pieces."""
    base = {"id": f"chatcmpl-fake-{next_id()}", "object": "chat.completion.chunk"}
    base["model"] = _model(request)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(answer.text):
        yield chunk({"content": piece})
    for index, call in enumerate(_openai_calls(answer, next_id)):
        function: dict[str, Any] = {"name": call["function"]["name"]}
        first: dict[str, Any] = {"index": index, "type": "function", "function": function}
        if "id" in call:
            first["id"] = call["id"]
        arguments = call["function"]["arguments"]
        if not isinstance(arguments, str):
            function["arguments"] = arguments  # whole, as such a server does
            yield chunk({"tool_calls": [first]})
            continue
        function["arguments"] = ""
        yield chunk({"tool_calls": [first]})
        for piece in _pieces(arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, answer.finish or ("tool_calls" if answer.tool_calls else "stop"))
    options = request.body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and answer.usage is not None:
        yield _sse({**base, "choices": [], **_openai_usage(answer)})
    yield b"data: [DONE]\n\n"


def _anthropic_content(answer: Answer, next_id: Callable[[], int]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    for call in answer.tool_calls:
        block: dict[str, Any] = {"type": "tool_use"}
        if call.id == AUTO:
            block["id"] = f"toolu_fake_{next_id()}"
        elif call.id is not None:
            block["id"] = call.id
        block.update(name=call.name, input=_input(call.arguments))
        content.append(block)
    return content


def _anthropic_answer(request: Request, answer: Answer, next_id: Callable[[], int]) -> Any:
    return {
        "id": f"msg_fake_{next_id()}",
        "type": "message",
        "role": "assistant",
        "model": _model(request),
        "content": _anthropic_content(answer, next_id),
        "stop_reason": answer.finish or ("tool_use" if answer.tool_calls else "end_turn"),
        "stop_sequence": None,
        **_anthropic_usage(answer.usage),
    }


def _anthropic_usage(usage: tuple[int, int] | None) -> dict[str, Any]:
    return {} if usage is None else {"usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}


def _anthropic_stream(
    request: Request, answer: Answer, next_id: Callable[[], int]
) -> Iterator[bytes]:
    """message_start, each block as start / deltas in pieces / stop, then message_stop."""
    whole = _anthropic_answer(request, answer, next_id)
    start = {**whole, "content": [], "stop_reason": None}
    if answer.usage is not None:  # the prompt's figure first, what it wrote at the end
        start.update(_anthropic_usage((answer.usage[0], 1)))
    yield _sse({"type": "message_start", "message": start}, "message_start")
    yield _sse({"type": "ping"}, "ping")
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        else:
            opening = {**block, "input": {}}
            # arguments that are not JSON (cut off, say) are streamed as written
            written = (
                block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            )
            deltas = [
                {"type": "input_json_delta", "partial_json": piece} for piece in _pieces(written)
            ]
        yield _sse(
            {"type": "content_block_start", "index": index, "content_block": opening},
            "content_block_start",
        )
        for delta in deltas:
            yield _sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    stop = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    delta: dict[str, Any] = {"type": "message_delta", "delta": stop}
    if answer.usage is not None:
        delta["usage"] = {"output_tokens": answer.usage[1]}
    yield _sse(delta, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def _sse(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _pieces(text: str) -> list[str]:
    """`text` in a few pieces, so that clients must join them."""
    if not text:
        return []
    third = max(1, len(text) // 3)
    return [text[i : i + third] for i in range(0, len(text), third)]


def _model(request: Request) -> str:
    model = request.body.get("model") if isinstance(request.body, dict) else None
    return model if isinstance(model, str) else "fake"
