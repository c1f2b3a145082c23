"""The HTTP client of a model server (SPEC §10.2): one httpx client, three tries, one-line
errors, deadlines, and the reader of a body (`Body`: whole JSON, or server-sent events).

Timeouts, broken connections, 429 and 5xx are tried again after a backoff (`Retry-After`
honoured up to a cap); anything else fails at once. Each try must answer within `timeout_s`,
where a streamed answer's every complete event (not any byte) gives it `timeout_s` more; all
tries together must end within `deadline_s`. Bodies are read uncompressed and capped while
they are read. Every foreign exception (httpx's, the JSON parser's) becomes a `ModelError`
here, at the edge. What an answer means is the providers' job (`http_provider` and its
subclasses).
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx

from bxcore import strict_json
from services.loopd.model import ModelError
from services.loopd.replies import clean
from services.loopd.sse import SseDecoder, SseError, SseEvent

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

#: How long to wait before the second and the third try (SPEC §10.2: three tries in all).
BACKOFF_S: tuple[float, ...] = (0.5, 1.0)

MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a bigger answer is not a model's
MAX_ERROR_BYTES = 64 * 1024
MAX_SERVER_MESSAGE = 200  # characters of a server's own error message, in ours
RETRY_AFTER_CAP_S = 20.0
USER_AGENT = "boxmaker-loopd"


def invalid(why: str) -> ModelError:
    return ModelError(f"the model server's answer is not valid: {why}")


def read_key(env_name: str, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the key, None), (None, None) when no key is configured, or (None, what to fix)."""
    if not env_name:
        return None, None
    key = environ.get(env_name, "")
    if key.strip():
        return key.strip(), None
    return None, (
        f"the environment variable {env_name}, named by [model] api_key_env, is not set; "
        'set it in loopd\'s environment, or set api_key_env = "" if the server needs no key'
    )


def key_note(env_name: str, key: str | None) -> str:
    """How a repr shows the key: where it comes from, never what it is."""
    if not env_name:
        return "no key"
    return f"key {'from' if key is not None else 'missing from'} ${env_name}"


@dataclass(frozen=True, slots=True)
class _Failure:
    """One try that may be worth another: unreachable, timeout (`idle`: a stream that stopped
    giving events), or a 429/5xx status."""

    kind: str
    why: str = ""
    status: int = 0
    wait_s: float | None = None  # Retry-After


class _Retry(Exception):
    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.why)
        self.failure = failure


class Body:
    """One successful response as a provider reads it: `json()` whole, or `events()` one
    complete server-sent event at a time, each giving the try `idle_s` more to live."""

    def __init__(self, response: httpx.Response, idle: anyio.CancelScope, idle_s: float) -> None:
        self.response = response
        self._idle = idle
        self._idle_s = idle_s
        self.streaming = False  # events() has begun: a timeout now is a stream gone quiet

    def __repr__(self) -> str:
        mode = "events" if self.is_event_stream else "whole"
        return f"<Body {self.response.status_code} {mode}{', streaming' if self.streaming else ''}>"

    @property
    def is_event_stream(self) -> bool:
        content_type: str = self.response.headers.get("content-type", "")
        return content_type.lower().startswith("text/event-stream")

    async def json(self) -> Any:
        return parse_json(await read_at_most(self.response, MAX_ANSWER_BYTES))

    async def events(self) -> AsyncIterator[SseEvent]:
        """Each complete event, as it comes; at most `MAX_ANSWER_BYTES` in all."""
        self.streaming = True
        decoder = SseDecoder(MAX_ANSWER_BYTES)
        async for chunk in _raw_chunks(self.response):
            try:
                events = decoder.feed(chunk)
            except SseError as error:
                raise invalid(str(error)) from None
            for event in events:
                self._idle.deadline = anyio.current_time() + self._idle_s
                yield event
        for event in decoder.end():
            yield event


class HttpClient:
    """One model server's HTTP client: `post` tries a request up to `len(backoff) + 1` times."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        key_env: str,
        *,
        deadline_s: float = math.inf,
        sleep: Sleep = anyio.sleep,
        backoff: Sequence[float] = BACKOFF_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.key_env = key_env
        self.tries = len(backoff) + 1
        self._backoff = tuple(backoff)
        self._sleep = sleep
        self._client: httpx.AsyncClient | None = None  # made by the first request

    def __repr__(self) -> str:
        if self._client is None:
            state = "not used yet"
        else:
            state = "closed" if self._client.is_closed else "open"
        return (
            f"<HttpClient {self.base_url} {state}, {self.tries} tries, {self.timeout_s:g} s, "
            f"{self.deadline_s:g} s in all>"
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def _http(self) -> httpx.AsyncClient:
        """The httpx client, made on the first request: making it loads the TLS trust store,
        25-45 ms that would otherwise hold up loopd's start (bench startup)."""
        if self._client is None:
            # trust_env=False: no proxy variables or .netrc; loopd talks to base_url only.
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                trust_env=False,
                follow_redirects=False,
                headers={"user-agent": USER_AGENT},
            )
        return self._client

    async def post(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        read: Callable[[Body], Awaitable[T]],
    ) -> T:
        """POST `body` as JSON and give the response to `read`. Each try must answer within
        `timeout_s` (a streamed answer: each next event within it), all within `deadline_s`."""
        payload = clean(json.dumps(body, ensure_ascii=False)).encode("utf-8")
        failure = _Failure("unreachable", "not tried")
        with anyio.move_on_after(self.deadline_s) as overall:
            for attempt in range(self.tries):
                if attempt:
                    await self._sleep(self._wait_s(attempt, failure))
                try:
                    return await self._try(url, payload, headers, read)
                except _Retry as retry:
                    failure = retry.failure
        if overall.cancelled_caught:
            raise ModelError(
                f"the model server at {self.base_url} did not finish its answer within "
                f"{self.deadline_s:g} s ([model] deadline_s); raise it in config.toml, or use "
                "a faster model"
            )
        raise ModelError(self._exhausted(failure))

    async def _try(
        self,
        url: str,
        payload: bytes,
        headers: Mapping[str, str],
        read: Callable[[Body], Awaitable[T]],
    ) -> T:
        sent = {
            "content-type": "application/json",
            "accept": "application/json",
            "accept-encoding": "identity",  # a body is capped as it is read, not unpacked
            **headers,
        }
        client = self._http()  # before the clock starts: it may load the trust store first
        body: Body | None = None
        try:
            with anyio.fail_after(self.timeout_s) as idle:
                async with client.stream("POST", url, content=payload, headers=sent) as response:
                    if not response.is_success:
                        await self._refused(response)
                    body = Body(response, idle, self.timeout_s)
                    return await read(body)
        except (TimeoutError, httpx.TimeoutException):
            quiet = body is not None and body.streaming
            raise _Retry(_Failure("idle" if quiet else "timeout")) from None
        except httpx.TransportError as exc:
            raise _Retry(_Failure("unreachable", _why(exc))) from None
        except httpx.HTTPError as exc:  # a body that cannot be decoded, and the like
            raise invalid(str(exc) or type(exc).__name__) from None
        except httpx.InvalidURL as exc:
            raise ModelError(f"[model] base_url cannot be used: {exc}") from None

    async def _refused(self, response: httpx.Response) -> None:
        status = response.status_code
        message = server_message(await read_at_most(response, MAX_ERROR_BYTES, cut=True))
        if status == 429 or status >= 500:
            wait_s = retry_after_s(response.headers.get("retry-after"))
            raise _Retry(_Failure("status", message, status, wait_s))
        where = f"the model server at {self.base_url}"
        code = f"{status} {httpx.codes.get_reason_phrase(status)}".strip()
        if status in (401, 403):
            hint = (
                f"check the key in {self.key_env} (named by [model] api_key_env)"
                if self.key_env
                else "if it needs a key, set [model] api_key_env to the variable that holds it"
            )
            raise ModelError(f"{where} refused the key ({code}): {message}; {hint}")
        if status == 404:
            raise ModelError(
                f"{where} has no such model or path ({code}): {message}; "
                "check [model] model and [model] base_url in config.toml"
            )
        hint = "; check [model] base_url in config.toml" if status < 400 else ""
        raise ModelError(f"{where} refused the request ({code}): {message}{hint}")

    def _wait_s(self, attempt: int, failure: _Failure) -> float:
        backoff = self._backoff[min(attempt, len(self._backoff)) - 1]
        if failure.wait_s is None:
            return backoff
        return max(backoff, min(failure.wait_s, RETRY_AFTER_CAP_S))

    def _exhausted(self, failure: _Failure) -> str:
        where = f"the model server at {self.base_url}"
        tries = f"{self.tries} tries" if self.tries > 1 else "1 try"
        if failure.kind == "timeout":
            return (
                f"{where} did not answer within {self.timeout_s:g} s ({tries}); "
                "raise [model] timeout_s in config.toml, or use a smaller model"
            )
        if failure.kind == "idle":
            return (
                f"{where} sent no complete event for {self.timeout_s:g} s of a streamed answer "
                f"({tries}); raise [model] timeout_s in config.toml, or set stream = false"
            )
        if failure.kind == "unreachable":
            return (
                f"{where} did not answer ({failure.why}, {tries}); "
                "start it, or set [model] base_url in config.toml"
            )
        code = f"{failure.status} {httpx.codes.get_reason_phrase(failure.status)}".strip()
        if failure.status == 429:
            return (
                f"{where} is limiting requests ({code}, {tries}): {failure.why}; "
                "wait and try again, or check the account's limits"
            )
        return f"{where} failed ({code}, {tries}): {failure.why}; check the server's log"


# -- reading answers ------------------------------------------------------------------------


async def read_at_most(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes:
    """The body, up to `limit` bytes: past that, the first `limit` bytes when `cut`, else a
    `ModelError`."""
    parts = bytearray()
    async for chunk in _raw_chunks(response, strict=not cut):
        parts += chunk
        if len(parts) > limit:
            if cut:
                return bytes(parts[:limit])
            raise invalid(f"it is larger than {limit} bytes")
    return bytes(parts)


async def _raw_chunks(response: httpx.Response, *, strict: bool = True) -> AsyncIterator[bytes]:
    """The body's bytes as they come, never unpacked (a small compressed body can unpack to
    gigabytes at once): loopd asks for none, and a compressed answer is refused."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if strict and encoding not in ("", "identity"):
        raise invalid(f"it is compressed ({_cut(encoding, 40)}) though loopd asked for none")
    async for chunk in response.aiter_raw():
        yield chunk


def parse_json(data: bytes | str) -> Any:
    try:
        return strict_json.loads(data)
    except strict_json.StrictJsonError as exc:
        raise invalid(f"not JSON ({_cut(str(exc), 80)})") from None


def answered_error(body: dict[str, Any]) -> ModelError:
    """An error object the server sent as its answer (or in its stream), as one line."""
    return ModelError(
        f"the model server answered with an error: {server_message(json.dumps(body).encode())}"
    )


def server_message(data: bytes) -> str:
    """The server's own words about an error, on one line and short."""
    text = data.decode("utf-8", "replace")
    try:
        body = strict_json.loads(text)
    except strict_json.StrictJsonError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        for found in (
            error.get("message") if isinstance(error, dict) else error,
            body.get("message"),
            body.get("detail"),
        ):
            if isinstance(found, str) and found.strip():
                text = found
                break
    return _cut(text, MAX_SERVER_MESSAGE) or "(no message)"


def retry_after_s(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds from a `Retry-After` header (a number or an HTTP date), or None."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def _cut(text: str, limit: int) -> str:
    text = " ".join(clean("".join(c if c.isprintable() else " " for c in text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _why(exc: BaseException) -> str:
    """A few words for a transport failure: `connection refused`, `closed the connection
    without answering`, `name or service not known`."""
    if isinstance(exc, httpx.RemoteProtocolError):
        if "without sending" in str(exc) or "disconnected" in str(exc):
            return "it closed the connection without answering"
        return f"it broke the HTTP protocol: {_cut(str(exc), 80)}"
    errno = _first_errno(exc)
    if errno is not None:
        words = errno[1] if errno[0] <= 0 else os.strerror(errno[0])
        return words[:1].lower() + words[1:]
    if isinstance(exc, httpx.ReadError | httpx.WriteError):
        return "the connection broke"
    return _cut(str(exc), 80) or type(exc).__name__


def _first_errno(exc: BaseException) -> tuple[int, str] | None:
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        found = stack.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno is not None:
            return found.errno, found.strerror or str(found)
        stack += [found.__cause__, found.__context__]
        stack += list(getattr(found, "exceptions", ()))
    return None
