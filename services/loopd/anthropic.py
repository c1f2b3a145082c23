"""The `anthropic` provider: Claude's Messages API with `tool_use` blocks (SPEC §10.2).

`base_url` is the server's root, as Anthropic's own SDKs take it (`https://api.anthropic.com`):
requests go to `{base_url}/v1/messages`; a base_url that already ends in `/v1` is taken as
meant and gets `/messages` only. The answer is only read, never acted on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bxcore import strict_json
from services.loopd.http_client import answered_error, invalid, parse_json
from services.loopd.http_provider import HttpProvider
from services.loopd.model import (
    Assistant,
    Message,
    Offer,
    Reply,
    ToolCall,
    ToolResult,
    Usage,
    User,
    count_of,
    finish_of,
)
from services.loopd.replies import clean, tool_calls
from services.loopd.schemas import offer_schema

VERSION = "2023-06-01"
MAX_TOKENS = 4096  # the Messages API needs a limit: this one when [model] max_tokens is 0


def messages_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


def tool_list(specs: Sequence[Offer]) -> list[dict[str, Any]]:
    """`tools` as the Messages API takes them."""
    return [
        {"name": spec.name, "description": spec.description, "input_schema": offer_schema(spec)}
        for spec in specs
    ]


def api_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Messages API turns: tool results are `tool_result` blocks of a user
    turn, and consecutive blocks of one role share a turn (the API wants the roles to alternate
    and every turn to have content, so empty text is left out)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        if isinstance(message, User):
            role = "user"
            if message.text:
                blocks.append({"type": "text", "text": message.text})
        elif isinstance(message, Assistant):
            role = "assistant"
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks += [
                {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)}
                for call in message.tool_calls
            ]
        elif isinstance(message, ToolResult):
            role = "user"
            block = {"type": "tool_result", "tool_use_id": message.call_id}
            if message.content:
                block["content"] = message.content
            blocks.append(block)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _input(call: ToolCall) -> dict[str, Any]:
    """A tool_use block's `input` must be an object: the arguments parsed, or `{}` when they are
    not an object (a call another provider's model wrote; the broker already judged it)."""
    try:
        value = strict_json.loads(call.arguments)
    except strict_json.StrictJsonError:
        return {}
    return value if isinstance(value, dict) else {}


def request_body(
    model: str,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[Offer],
    *,
    stream: bool = False,
    max_tokens: int = 0,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens or MAX_TOKENS}
    if system:
        body["system"] = system
    body["messages"] = api_messages(messages)
    if tools:
        body["tools"] = tool_list(tools)
    body["stream"] = stream
    return body


def arguments_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: What the Messages API counts as read: the prompt's uncached part, and what it wrote to or
#: read from its cache (each is read, and each is billed).
INPUT_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def usage_of(fields: object, known: Usage | None = None) -> Usage | None:
    """The figures of a `usage` object, over those `known` from earlier events of a stream
    (`message_start`'s, then `message_delta`'s running totals); None when none are given."""
    read, written = count_of(fields, *INPUT_COUNTS), count_of(fields, "output_tokens")
    if read is None and written is None:
        return known
    known = known or Usage()
    return Usage(
        known.input if read is None else read, known.output if written is None else written
    )


# -- the answer -----------------------------------------------------------------------------


def reply_of(body: Any, messages: Sequence[Message]) -> Reply:
    """The Reply in a whole answer: its `text` blocks joined, its `tool_use` blocks as calls;
    other blocks (thinking, say) are not for the loop."""
    if not isinstance(body, dict):
        raise invalid("expected a JSON object")
    if body.get("type") == "error":
        raise answered_error(body)
    content = body.get("content")
    if not isinstance(content, list):
        raise invalid("`content` is missing or not a list")
    text: list[str] = []
    found: list[tuple[object, str, str]] = []
    for n, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(block, dict) or not isinstance(kind, str):
            raise invalid(f"`content[{n}]` is not a block")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise invalid(f"`content[{n}].text` is not a string")
            text.append(block["text"])
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str):
                raise invalid(f"`content[{n}].name` is not a string")
            if "input" not in block:
                raise invalid(f"`content[{n}].input` is missing")
            found.append((block.get("id"), block["name"], arguments_text(block["input"])))
    reason = body.get("stop_reason")
    if reason is not None and not isinstance(reason, str):
        raise invalid("`stop_reason` is not a string")
    calls = tool_calls(found, messages)
    return Reply(
        clean("".join(text)), calls, finish_of(reason), reason or "", usage_of(body.get("usage"))
    )


# -- streaming ------------------------------------------------------------------------------


@dataclass
class _Block:
    kind: str
    id: object = None
    name: object = None
    start_input: object = None
    parts: list[str] = field(default_factory=list)


@dataclass
class StreamedReply:
    """A streamed answer put together from its events: `content_block_start` and
    `content_block_delta` make the blocks, `message_delta` says the `stop_reason`, and
    `message_stop` ends it. Pure. An answer is complete at `message_stop` or a stop reason.
    The usage figures: `message_start`'s, updated by each `message_delta`'s."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    done: bool = False  # `message_stop` came
    usage: Usage | None = None

    def take(self, data: str) -> bool:
        """Read one event's data; True once it was `message_stop` (nothing more is read)."""
        event = parse_json(data)
        kind = event.get("type") if isinstance(event, dict) else None
        if not isinstance(event, dict) or not isinstance(kind, str):
            raise invalid("a streamed event is not an object with a `type`")
        if kind == "error":
            raise answered_error(event)
        if kind == "message_stop":
            self.done = True
            return True
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self.usage = usage_of(message.get("usage"), self.usage)
            return False
        if kind == "message_delta":
            self.usage = usage_of(event.get("usage"), self.usage)
            delta = event.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if reason is not None:
                self.stop_reason = _string(reason, "stop_reason")
            return False
        if kind not in ("content_block_start", "content_block_delta"):
            return False
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise invalid(f"a `{kind}` event has no index")
        if kind == "content_block_start":
            start = event.get("content_block")
            if not isinstance(start, dict) or not isinstance(start.get("type"), str):
                raise invalid("a `content_block_start` event has no block")
            block = _Block(start["type"], start.get("id"), start.get("name"), start.get("input"))
            if start["type"] == "text":
                block.parts.append(_string(start.get("text", ""), "text"))
            self.blocks[index] = block
        else:
            _add_delta(self.blocks.get(index), event.get("delta"))
        return False

    def reply(self, messages: Sequence[Message]) -> Reply:
        """The Reply, once the stream has ended; an answer the stream never finished is an
        error, not a shorter answer."""
        if not self.done and self.stop_reason is None:
            raise invalid("the stream ended before the answer did (no message_stop)")
        text: list[str] = []
        found: list[tuple[object, str, str]] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text":
                text += block.parts
            elif block.kind == "tool_use":
                if not isinstance(block.name, str):
                    raise invalid("a streamed `tool_use` block has no name")
                found.append((block.id, block.name, _streamed_arguments(block)))
        reason = self.stop_reason
        calls = tool_calls(found, messages)
        return Reply(clean("".join(text)), calls, finish_of(reason), reason or "", self.usage)


def _add_delta(block: _Block | None, delta: object) -> None:
    if block is None or not isinstance(delta, dict):
        raise invalid("a `content_block_delta` event has no block or no delta")
    if delta.get("type") == "text_delta":
        block.parts.append(_string(delta.get("text"), "text_delta"))
    elif delta.get("type") == "input_json_delta":
        block.parts.append(_string(delta.get("partial_json"), "input_json_delta"))


def _streamed_arguments(block: _Block) -> str:
    """A streamed tool_use block's input: its JSON pieces, re-encoded as a whole answer's would
    be when they parse, else as written (the broker judges them); no pieces, or only empty
    ones (a tool called without arguments), the input it started with, else `{}`."""
    written = "".join(block.parts)
    if not written.strip():
        return arguments_text(block.start_input if block.start_input is not None else {})
    try:
        return arguments_text(strict_json.loads(written))
    except strict_json.StrictJsonError:  # a key twice kept as written: the broker refuses it
        return written


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"a streamed `{where}` is not a string")
    return value


# -- the model ------------------------------------------------------------------------------


class AnthropicModel(HttpProvider):
    """Claude through the Messages API."""

    def _url(self, base_url: str) -> str:
        return messages_url(base_url)

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": VERSION}
        if key is not None:
            headers["x-api-key"] = key
        return headers

    def _body(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        stream: bool,
        max_tokens: int,
    ) -> dict[str, Any]:
        model = self.config.model
        return request_body(model, system, messages, tools, stream=stream, max_tokens=max_tokens)

    def _whole(self, body: Any, messages: Sequence[Message]) -> Reply:
        return reply_of(body, messages)

    def _stream_reader(self) -> StreamedReply:
        return StreamedReply()
