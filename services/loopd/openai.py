"""The `openai` provider: `POST {base_url}/chat/completions` (SPEC §10.2), whole or streamed.

Spoken by OpenAI and by the local servers that copy it (Ollama, llama.cpp's server, vLLM, LM
Studio, and the gateways in front of others), so the answer is read leniently where they
differ (arguments as an object, a call without an id, `StreamedReply`'s ways of numbering
calls) and strictly everywhere else. The answer is only read, never acted on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.loopd.http_client import answered_error, invalid, parse_json
from services.loopd.http_provider import HttpProvider
from services.loopd.model import (
    Assistant,
    Message,
    ModelError,
    Offer,
    Reply,
    ToolResult,
    Usage,
    User,
    count_of,
    finish_of,
)
from services.loopd.replies import clean, tool_calls
from services.loopd.schemas import offer_schema

log = logging.getLogger("loopd")


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
    max_tokens: int = 0,
    stream_usage: bool = True,
) -> dict[str, Any]:
    """The request; `max_tokens` 0 sends none (the server's own default). A streamed one asks
    for the usage figures in a last chunk (`stream_options`) unless `stream_usage` is False."""
    body: dict[str, Any] = {"model": model, "messages": chat_messages(system, messages)}
    if tools:  # OpenAI refuses an empty list
        body["tools"] = tool_list(tools)
    if max_tokens:
        body["max_tokens"] = max_tokens
    body["stream"] = stream
    if stream and stream_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def refuses_stream_options(error: ModelError) -> bool:
    """True for a server's refusal of the request that names `stream_options` (servers that
    check their fields strictly and predate it): asked again without it, usage goes unsaid."""
    said = str(error)
    return "refused the request" in said and "stream_options" in said


def usage_of(answer: dict[str, Any]) -> Usage | None:
    """The figures of a whole answer or of a chunk: `usage` (`prompt_tokens`,
    `completion_tokens`), or Groq's `x_groq.usage`; None when it gives none."""
    fields = answer.get("usage")
    groq = answer.get("x_groq")
    if fields is None and isinstance(groq, dict):
        fields = groq.get("usage")
    read, written = count_of(fields, "prompt_tokens"), count_of(fields, "completion_tokens")
    if read is None and written is None:
        return None
    return Usage(read or 0, written or 0)


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
    reason = first.get("finish_reason") if isinstance(first, dict) else None
    said = {**message, "finish_reason": reason}
    return reply_of_message(said, messages, "choices[0].message", usage_of(body))


def reply_of_message(
    message: dict[str, Any], messages: Sequence[Message], where: str, usage: Usage | None = None
) -> Reply:
    """The Reply of an assistant message, with the `finish_reason` of its choice added."""
    reason = message.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise invalid(f"the `finish_reason` of {where} is not a string")
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
    calls = tool_calls(found, messages)
    return Reply(clean(text), calls, finish_of(reason), reason or "", usage)


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
    """One tool call as its pieces arrive; `index` as the server numbered it (None: not)."""

    index: int | None
    id: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamedReply:
    """A streamed answer put together from its `data:` chunks (`choices[0].delta`). Pure.

    Servers differ in how they mark which call a piece belongs to, and each is read as meant:
    an id sent only first, then `""` or none (DashScope); several calls under one `index`
    told apart by their ids (Ollama, some proxies); pieces with neither (Gemini), which
    continue the call opened last. The answer is complete at `[DONE]` or a `finish_reason`.
    The usage figures come in the last chunk (with `choices: []`, or with the finish reason),
    when the server sends them at all.
    """

    text: list[str] = field(default_factory=list)
    calls: list[_Partial] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False  # `[DONE]` came
    usage: Usage | None = None

    def take(self, data: str) -> bool:
        """Read one event's data; True once it was `[DONE]` (nothing more is read)."""
        if data.strip() == "[DONE]":
            self.done = True
            return True
        chunk = parse_json(data)
        if not isinstance(chunk, dict):
            raise invalid("a streamed chunk is not a JSON object")
        if "error" in chunk:
            raise answered_error(chunk)
        self.usage = usage_of(chunk) or self.usage
        choices = chunk.get("choices")
        if not choices:  # a usage chunk, say
            return False
        first = choices[0] if isinstance(choices, list) else None
        if not isinstance(first, dict):
            raise invalid("`choices[0]` of a streamed chunk is not an object")
        reason = first.get("finish_reason")
        if reason is not None:
            if not isinstance(reason, str):
                raise invalid("`choices[0].finish_reason` of a streamed chunk is not a string")
            self.finish_reason = reason
        delta = first.get("delta")
        if delta is None:
            return False
        if not isinstance(delta, dict):
            raise invalid("`choices[0].delta` of a streamed chunk is not an object")
        self.text.append(_text(delta.get("content"), "choices[0].delta.content"))
        self._add_calls(delta.get("tool_calls"))
        return False

    def reply(self, messages: Sequence[Message]) -> Reply:
        """The Reply, once the stream has ended; an answer the stream never finished is an
        error, not a shorter answer."""
        if not self.done and self.finish_reason is None:
            raise invalid("the stream ended before the answer did (no [DONE], no finish_reason)")
        message = {
            "content": "".join(self.text),
            "tool_calls": [
                {
                    "id": call.id,
                    "function": {
                        "name": "".join(call.name),
                        "arguments": "".join(call.arguments) if call.arguments else None,
                    },
                }
                for call in self.calls
            ],
            "finish_reason": self.finish_reason,
        }
        return reply_of_message(message, messages, "the streamed message", self.usage)

    def _add_calls(self, deltas: object) -> None:
        if deltas is None:
            return
        if not isinstance(deltas, list):
            raise invalid("`choices[0].delta.tool_calls` of a streamed chunk is not a list")
        for delta in deltas:
            if not isinstance(delta, dict):
                raise invalid("a streamed tool call is not an object")
            call = self._call_of(delta)
            function = delta.get("function") or {}
            if not isinstance(function, dict):
                raise invalid("a streamed tool call's `function` is not an object")
            name = function.get("name")
            if name is not None:
                if not isinstance(name, str):
                    raise invalid("a streamed tool call's name is not a string")
                call.name.append(name)
            if function.get("arguments") is not None:
                call.arguments.append(arguments_text(function["arguments"]))

    def _call_of(self, delta: dict[str, Any]) -> _Partial:
        """The call a piece belongs to, opened if it is new."""
        raw_index, raw_id = delta.get("index"), delta.get("id")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        id_ = raw_id if isinstance(raw_id, str) and raw_id else None
        if id_ is not None:
            same = [call for call in self.calls if call.id == id_]
            if same:
                return same[-1]
        if index is not None:
            last = next((c for c in reversed(self.calls) if c.index == index), None)
        else:
            last = self.calls[-1] if self.calls else None
        if last is not None and (id_ is None or last.id is None):
            last.id = last.id or id_
            return last
        self.calls.append(_Partial(index, id_))
        return self.calls[-1]


# -- the model ------------------------------------------------------------------------------


class OpenAIModel(HttpProvider):
    """A chat-completions server. A streamed request asks for usage figures until the server
    refuses the request for it; then it is asked again without, and never again."""

    _stream_usage = True

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        *,
        max_tokens: int | None = None,
    ) -> Reply:
        try:
            return await super().complete(system, messages, tools, max_tokens=max_tokens)
        except ModelError as error:
            if not (self.config.stream and self._stream_usage and refuses_stream_options(error)):
                raise
        log.warning("the model server refuses stream_options: its streamed answers go uncounted")
        self._stream_usage = False
        return await super().complete(system, messages, tools, max_tokens=max_tokens)

    def _url(self, base_url: str) -> str:
        return f"{base_url}/chat/completions"

    def _headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key is not None else {}

    def _body(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        stream: bool,
        max_tokens: int,
    ) -> dict[str, Any]:
        model, usage = self.config.model, self._stream_usage
        return request_body(
            model, system, messages, tools, stream=stream, max_tokens=max_tokens, stream_usage=usage
        )

    def _whole(self, body: Any, messages: Sequence[Message]) -> Reply:
        return reply_of(body, messages)

    def _stream_reader(self) -> StreamedReply:
        return StreamedReply()
