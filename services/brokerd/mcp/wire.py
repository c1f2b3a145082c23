"""The JSON-RPC brokerd speaks itself to an MCP server that has started (SPEC §18.6): the line
of a `tools/call` request, the answers brokerd gives to the server's own requests, and each
line the server writes after its start, parsed strictly (a JSON object, no duplicate key, no
NaN, JSON-RPC 2.0 in shape; anything else is `WireError`).

Pure: bytes in, values out. What a line may hold is the server's: hostile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bxcore import strict_json

#: The longest line a server may write: a result cut at 1 MiB of text (`result`) may be
#: six times that escaped, and twice over with its structured copy; past it, the server ends.
MAX_LINE = 16 * 1024 * 1024
METHOD_NOT_FOUND = -32601


class WireError(Exception):
    """A line that is not a JSON-RPC message brokerd takes: one line of why."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request of brokerd's: its `result` object, or the server's `error`."""

    id: int
    result: dict[str, Any] | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Asked:
    """A request of the server's (`ping`, or one brokerd never offered to answer)."""

    id: str | int
    method: str


@dataclass(frozen=True, slots=True)
class Told:
    """A notification of the server's: nothing follows from it."""

    method: str


Message = Reply | Asked | Told


def call_line(request_id: int, tool: str, arguments: str) -> bytes:
    """`tools/call` of `tool` with `arguments`, the canonical JSON object the ledger keeps."""
    name = json.dumps(tool, ensure_ascii=False)
    params = f'{{"arguments":{arguments},"name":{name}}}'
    head = f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call"'
    return f'{head},"params":{params}}}\n'.encode()


def answer_line(asked: Asked) -> bytes:
    """brokerd's answer to a server's request: `ping` is answered, anything else is not
    offered (brokerd announced no client capability at `initialize`)."""
    head: dict[str, Any] = {"jsonrpc": "2.0", "id": asked.id}
    if asked.method == "ping":
        head["result"] = {}
    else:
        head["error"] = {"code": METHOD_NOT_FOUND, "message": "Method not found"}
    return (json.dumps(head, separators=(",", ":")) + "\n").encode()


def parse_line(line: bytes) -> Message:
    """One line the server wrote, as a message; `WireError` when it is not one."""
    try:
        value = strict_json.loads(line)
    except strict_json.StrictJsonError as error:
        raise WireError(f"not JSON: {error}") from None
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise WireError("not a JSON-RPC 2.0 message")
    method = value.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise WireError("a method that is not text")
        if "id" not in value:
            return Told(method)
        asked_id = value["id"]
        if isinstance(asked_id, bool) or not isinstance(asked_id, str | int):
            raise WireError("a request id that is neither text nor a number")
        return Asked(asked_id, method)
    reply_id = value.get("id")
    if isinstance(reply_id, bool) or not isinstance(reply_id, int):
        raise WireError("an answer to no request of brokerd's")
    if ("result" in value) == ("error" in value):
        raise WireError("an answer needs either a result or an error")
    if "error" in value:
        return Reply(reply_id, None, _error_text(value["error"]))
    result = value["result"]
    if not isinstance(result, dict):
        raise WireError("a result that is not an object")
    return Reply(reply_id, result)


def _error_text(error: object) -> str:
    if not isinstance(error, dict):
        raise WireError("an error that is not an object")
    code, message = error.get("code"), error.get("message")
    if isinstance(code, bool) or not isinstance(code, int) or not isinstance(message, str):
        raise WireError("an error without a code and a message")
    return f"error {code}: {message}"
