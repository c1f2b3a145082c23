"""The talking half of `bxctl model check` (issue 14): reach the server and list its models
(one GET, its failures sorted into refused, DNS, TLS, timeout, key), then send one tiny
request with one tool through loopd's own provider client (`services.loopd.providers`), so
the check sees exactly what a turn would. Foreign exceptions become `model_verdict` values
here, at the edge; what they mean is `model_verdict`'s.
"""

from __future__ import annotations

import dataclasses
import errno
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from bxcore import strict_json
from bxcore.config.file import ModelConfig
from bxctl.model_verdict import (
    PROBE_ASK,
    PROBE_SCHEMA,
    PROBE_SYSTEM,
    PROBE_TOOL,
    Failure,
    Listing,
    Outcome,
    Probe,
    Reach,
    judge_error,
    judge_reply,
)
from services.loopd.face import (
    VERSION,
    McpTool,
    ModelError,
    User,
    make_model,
    messages_url,
    read_key,
    server_message,
)

LIST_TIMEOUT_S = 10.0  # listing models is quick on every server; a model's answer may not be
MAX_LIST_BYTES = 4 * 1024 * 1024
PROBE_TOOL_OFFER = McpTool(PROBE_TOOL, "Tell the weather in a city.", PROBE_SCHEMA)


def models_url(config: ModelConfig) -> str:
    """Where the server lists its models: `{base_url}/models` for chat-completions servers,
    the Messages API root's `/v1/models` for Anthropic."""
    if config.provider == "anthropic":
        return messages_url(config.base_url).removesuffix("/messages") + "/models?limit=1000"
    return config.base_url.rstrip("/") + "/models"


def _headers(config: ModelConfig, key: str | None) -> dict[str, str]:
    if config.provider == "anthropic":
        signed = {"anthropic-version": VERSION}
        return signed | ({"x-api-key": key} if key is not None else {})
    return {"authorization": f"Bearer {key}"} if key is not None else {}


async def reach(config: ModelConfig, environ: Mapping[str, str]) -> tuple[Reach, Listing | None]:
    """GET the list of models: the server reached (and the models, when it lists them), or
    why not."""
    key, _ = read_key(config.api_key_env, environ)
    timeout = min(config.timeout_s, LIST_TIMEOUT_S)
    started = time.monotonic()
    try:
        async with httpx.AsyncClient(
            timeout=timeout, trust_env=False, follow_redirects=False
        ) as client:
            response = await client.get(models_url(config), headers=_headers(config, key))
    except httpx.TimeoutException:
        return Reach(time.monotonic() - started, Failure.TIMEOUT, f"{timeout:g} s"), None
    except (httpx.TransportError, httpx.InvalidURL) as error:
        failure, detail = transport_failure(error)
        return Reach(time.monotonic() - started, failure, detail), None
    seconds = time.monotonic() - started
    status = response.status_code
    if status in (401, 403):
        message = server_message(response.content[:MAX_LIST_BYTES])
        return Reach(seconds, Failure.KEY, message, status), None
    if not response.is_success:
        return Reach(seconds), Listing(None)
    return Reach(seconds), Listing(model_names(response.content))


def model_names(data: bytes) -> tuple[str, ...] | None:
    """The model names in a list of models: `data[].id` (OpenAI, Anthropic, and the servers
    that copy them), else `models[].name` or `.model` (Ollama's own form); None if neither."""
    try:
        body: Any = strict_json.loads(data[:MAX_LIST_BYTES])
    except strict_json.StrictJsonError:
        return None
    if not isinstance(body, dict):
        return None
    for key, fields in (("data", ("id",)), ("models", ("name", "model"))):
        items = body.get(key)
        if isinstance(items, list):
            found = [
                next((item[f] for f in fields if f in item), None)
                for item in items
                if isinstance(item, dict)
            ]
            return tuple(name for name in found if isinstance(name, str))
    return None


def transport_failure(error: BaseException) -> tuple[Failure, str]:
    """Refused, DNS or TLS, read from the exceptions under httpx's, with a few words."""
    for cause in _causes(error):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return Failure.TLS, cause.verify_message or "the certificate is not trusted"
        if isinstance(cause, ssl.SSLError):
            return Failure.TLS, cause.reason or str(cause)
        if isinstance(cause, socket.gaierror):
            return Failure.DNS, cause.strerror or str(cause)
        if isinstance(cause, ConnectionRefusedError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
        ):
            return Failure.REFUSED, "connection refused"
    if isinstance(error, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return Failure.OTHER, f"[model] base_url cannot be used: {error}"
    text = " ".join(str(error).split()) or type(error).__name__
    if "ssl" in text.lower() or "certificate" in text.lower():
        return Failure.TLS, text
    if "name or service not known" in text.lower() or "name resolution" in text.lower():
        return Failure.DNS, text
    return Failure.OTHER, text


def _causes(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    stack: list[BaseException | None] = [error]
    while stack:
        each = stack.pop()
        if each is None or any(each is seen for seen in found):
            continue
        found.append(each)
        stack += [each.__cause__, each.__context__, *getattr(each, "exceptions", ())]
    return found


async def probe(config: ModelConfig, environ: Mapping[str, str], streamed: bool) -> Probe:
    """One tiny request with one tool, whole or streamed, through loopd's client, one try."""
    model = make_model(dataclasses.replace(config, stream=streamed), environ, backoff=())
    started = time.monotonic()
    limit = config.timeout_s + 5.0  # a stream that trickles on has no deadline of its own yet
    try:
        with anyio.fail_after(limit):
            reply = await model.complete(PROBE_SYSTEM, [User(PROBE_ASK)], [PROBE_TOOL_OFFER])
        seconds = time.monotonic() - started
    except ModelError as error:
        seconds = time.monotonic() - started
        return Probe(streamed, judge_error(str(error)), seconds, str(error))
    except TimeoutError:
        return Probe(streamed, Outcome.FAILED, limit, f"no whole answer within {limit:g} s")
    finally:
        with anyio.CancelScope(shield=True):
            await model.aclose()
    outcome, detail = judge_reply(reply.text, [(c.name, c.arguments) for c in reply.tool_calls])
    return Probe(streamed, outcome, seconds, detail)
