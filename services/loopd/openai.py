"""The `openai` provider: `POST {base_url}/chat/completions` (SPEC §10.2), whole or streamed.

Spoken by OpenAI and by the local servers that copy it (Ollama, llama.cpp's server, vLLM, LM
Studio), so the answer is read leniently where they differ (arguments as an object, a call
without an id) and strictly everywhere else. The answer is only read, never acted on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.loopd.http_client import (
    answered_error,
    invalid,
    is_event_stream,
    parse_json,
    read_json,
    sse_events,
)
from services.loopd.http_provider import HttpProvider
from services.loopd.model import (
    Assistant,
    Message,
    Offer,
    Reply,
    ToolResult,
    User,
)
from services.loopd.replies import clean, tool_calls
from services.loopd.schemas import offer_schema


def tool_list(specs: Sequence[Offer]) -> list[dict[str, Any]]:
    """`tools` as chat completions takes them."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": offer_schema(spec),
            },
        }
        for spec in specs
    ]


def chat_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt first, then the conversation in chat-completions form."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in messages:
        if isinstance(message, User):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, Assistant):
            said: dict[str, Any] = {"role": "assistant", "content": message.text}
            if message.tool_calls:
                said["content"] = message.text or None
                said["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            out.append(said)
        elif isinstance(message, ToolResult):
            out.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
            )
    return out


def request_body(
    model: str,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[Offer],
    *,
    stream: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": chat_messages(system, messages)}
    if tools:  # OpenAI refuses an empty list
        body["tools"] = tool_list(tools)
    body["stream"] = stream
    return body


# -- the answer -----------------------------------------------------------------------------


def reply_of(body: Any, messages: Sequence[Message]) -> Reply:
    """The Reply in a whole answer: `choices[0].message`."""
    if not isinstance(body, dict):
        raise invalid(f"expected a JSON object, got {_json_type(body)}")
    choices = body.get("choices")
    if choices is None and "error" in body:
        raise answered_error(body)
    if not isinstance(choices, list) or not choices:
        raise invalid("`choices` is missing or empty")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise invalid("`choices[0].message` is not an object")
    return reply_of_message(message, messages, "choices[0].message")


def reply_of_message(message: dict[str, Any], messages: Sequence[Message], where: str) -> Reply:
    text = _text(message.get("content"), f"{where}.content")
    calls = message.get("tool_calls")
    if calls is None:
        calls = []
    if not isinstance(calls, list):
        raise invalid(f"`{where}.tool_calls` is not a list")
    found: list[tuple[object, str, str]] = []
    for n, call in enumerate(calls):
        at = f"{where}.tool_calls[{n}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise invalid(f"`{at}.function` is not an object")
        name = function.get("name")
        if not isinstance(name, str):
            raise invalid(f"`{at}.function.name` is not a string")
        found.append((call.get("id"), name, arguments_text(function.get("arguments"))))
    return Reply(clean(text), tool_calls(found, messages))


def arguments_text(value: object) -> str:
    """The arguments as the model wrote them; an object (some local servers send one) as JSON,
    so that the broker judges it; none at all as `{}`."""
    if isinstance(value, str):
        return value
    if value is None:
        return "{}"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        parts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise invalid(f"`{where}` has a part that is not text")
            parts.append(part.get("text", ""))
        return "".join(parts)
    raise invalid(f"`{where}` is not a string")


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# -- streaming ------------------------------------------------------------------------------


@dataclass
class _Partial:
    """One tool call as its pieces arrive."""

    id: object = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


async def read_stream(response: httpx.Response, messages: Sequence[Message]) -> Reply:
    """Assemble the Reply from `data:` chunks of `choices[0].delta` until `[DONE]`. A server
    that answers whole despite `stream: true` is read as a whole answer."""
    if not is_event_stream(response):
        return reply_of(await read_json(response), messages)
    text: list[str] = []
    partials: dict[int, _Partial] = {}
    async for _event, data in sse_events(response):
        if data.strip() == "[DONE]":
            break
        chunk = parse_json(data)
        if not isinstance(chunk, dict):
            raise invalid("a streamed chunk is not a JSON object")
        if "error" in chunk:
            raise answered_error(chunk)
        choices = chunk.get("choices")
        if not choices:  # a usage chunk, say
            continue
        first = choices[0] if isinstance(choices, list) else None
        delta = first.get("delta") if isinstance(first, dict) else None
        if delta is None:
            continue
        if not isinstance(delta, dict):
            raise invalid("`choices[0].delta` of a streamed chunk is not an object")
        text.append(_text(delta.get("content"), "choices[0].delta.content"))
        _add_calls(partials, delta.get("tool_calls"))
    message = {
        "content": "".join(text),
        "tool_calls": [
            {
                "id": partial.id,
                "function": {
                    "name": "".join(partial.name),
                    "arguments": "".join(partial.arguments) if partial.arguments else None,
                },
            }
            for _, partial in sorted(partials.items())
        ],
    }
    return reply_of_message(message, messages, "the streamed message")


def _add_calls(partials: dict[int, _Partial], deltas: object) -> None:
    if deltas is None:
        return
    if not isinstance(deltas, list):
        raise invalid("`choices[0].delta.tool_calls` of a streamed chunk is not a list")
    for delta in deltas:
        if not isinstance(delta, dict):
            raise invalid("a streamed tool call is not an object")
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            same = [n for n, p in partials.items() if p.id is not None and p.id == delta.get("id")]
            index = same[0] if same else len(partials)
        partial = partials.setdefault(index, _Partial())
        if delta.get("id") is not None:
            partial.id = delta.get("id")
        function = delta.get("function") or {}
        if not isinstance(function, dict):
            raise invalid("a streamed tool call's `function` is not an object")
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise invalid("a streamed tool call's name is not a string")
            partial.name.append(name)
        if function.get("arguments") is not None:
            partial.arguments.append(arguments_text(function["arguments"]))


# -- the model ------------------------------------------------------------------------------


class OpenAIModel(HttpProvider):
    """A chat-completions server."""

    def _url(self, base_url: str) -> str:
        return f"{base_url}/chat/completions"

    def _headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key is not None else {}

    def _body(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer], stream: bool
    ) -> dict[str, Any]:
        return request_body(self.config.model, system, messages, tools, stream=stream)

    def _whole(self, body: Any, messages: Sequence[Message]) -> Reply:
        return reply_of(body, messages)

    async def _streamed(self, response: httpx.Response, messages: Sequence[Message]) -> Reply:
        return await read_stream(response, messages)
