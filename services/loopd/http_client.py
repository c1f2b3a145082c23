"""The HTTP client of a model server (SPEC §10.2): one httpx client, three tries, one-line
errors, and the readers of a body (whole, JSON, server-sent events).

Timeouts, broken connections, 429 and 5xx are tried again after a backoff (`Retry-After`
honoured up to a cap); anything else fails at once. Every foreign exception (httpx's, the JSON
parser's) becomes a `ModelError` here, at the edge. What an answer means is the providers' job
(`http_provider` and its subclasses).
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx

from services.loopd.model import ModelError
from services.loopd.replies import clean

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
    """One try that may be worth another: unreachable, timeout, or a 429/5xx status."""

    kind: str
    why: str = ""
    status: int = 0
    wait_s: float | None = None  # Retry-After


class _Retry(Exception):
    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.why)
        self.failure = failure


class HttpClient:
    """One model server's HTTP client: `post` tries a request up to `len(backoff) + 1` times."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        key_env: str,
        *,
        sleep: Sleep = anyio.sleep,
        backoff: Sequence[float] = BACKOFF_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.key_env = key_env
        self.tries = len(backoff) + 1
        self._backoff = tuple(backoff)
        self._sleep = sleep
        # trust_env=False: no proxy variables or .netrc; loopd talks to base_url and only there.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            trust_env=False,
            follow_redirects=False,
            headers={"user-agent": USER_AGENT},
        )

    def __repr__(self) -> str:
        state = "closed" if self._client.is_closed else "open"
        return f"<HttpClient {self.base_url} {state}, {self.tries} tries, {self.timeout_s:g} s>"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        read: Callable[[httpx.Response], Awaitable[T]],
        *,
        stream: bool = False,
    ) -> T:
        """POST `body` as JSON and give the response to `read`. A whole answer must arrive
        within `timeout_s`; a streamed one may take longer while pieces keep coming."""
        payload = clean(json.dumps(body, ensure_ascii=False)).encode("utf-8")
        failure = _Failure("unreachable", "not tried")
        for attempt in range(self.tries):
            if attempt:
                await self._sleep(self._wait_s(attempt, failure))
            try:
                return await self._try(url, payload, headers, read, stream)
            except _Retry as retry:
                failure = retry.failure
        raise ModelError(self._exhausted(failure))

    async def _try(
        self,
        url: str,
        payload: bytes,
        headers: Mapping[str, str],
        read: Callable[[httpx.Response], Awaitable[T]],
        stream: bool,
    ) -> T:
        sent = {"content-type": "application/json", "accept": "application/json", **headers}
        try:
            with anyio.fail_after(None if stream else self.timeout_s):
                async with self._client.stream(
                    "POST", url, content=payload, headers=sent
                ) as response:
                    if not response.is_success:
                        await self._refused(response)
                    return await read(response)
        except (TimeoutError, httpx.TimeoutException):
            raise _Retry(_Failure("timeout")) from None
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
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            if cut:
                return b"".join(parts)[:limit]
            raise invalid(f"it is larger than {limit} bytes")
    return b"".join(parts)


def parse_json(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise invalid(f"not JSON ({_cut(str(exc) or type(exc).__name__, 80)})") from None


async def read_json(response: httpx.Response) -> Any:
    return parse_json(await read_at_most(response, MAX_ANSWER_BYTES))


def is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("text/event-stream")


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """The (event, data) of each server-sent event; comments and ids are skipped."""
    event, size = "", 0
    data: list[str] = []
    async for line in response.aiter_lines():
        size += len(line) + 1
        if size > MAX_ANSWER_BYTES:
            raise invalid(f"it is larger than {MAX_ANSWER_BYTES} bytes")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield event or "message", "\n".join(data)


def answered_error(body: dict[str, Any]) -> ModelError:
    """An error object the server sent as its answer (or in its stream), as one line."""
    return ModelError(
        f"the model server answered with an error: {server_message(json.dumps(body).encode())}"
    )


def server_message(data: bytes) -> str:
    """The server's own words about an error, on one line and short."""
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
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
