"""What the model reads of an MCP tool's result (SPEC §18.6): its text content, structured
content as JSON text when there is no text, other content described, never shown; cut at
1 MiB like a toolkit's output. `isError` is a result the model reads with `ok` false, in the
shape of a built-in tool's failure (`read_file: /x: no such file`): the tool's name, then why
(`error_text`).

Pure: the result object a server answered (`wire`) in, an `Outcome` out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.brokerd.core import mcp_args

MAX_OUTPUT = 1024 * 1024  # characters, as the toolkit's 1 MiB
CUT_NOTE = "\n[… the result passed 1 MiB and was cut]"
REPORTED = "the tool reported an error"


@dataclass(frozen=True, slots=True)
class Outcome:
    """`error` None: the server answered (`ok` false for `isError`); else brokerd's sentence.
    `started`: the server was reached, so it may have read what its paths hold."""

    ok: bool
    output: str
    ms: int = 0
    error: str | None = None
    started: bool = True

    @classmethod
    def failed(cls, message: str, *, started: bool = False) -> Outcome:
        return cls(False, "", 0, message, started)


class ResultError(Exception):
    """A `tools/call` result that is not one: one line of why."""


CONTENT = frozenset({"text", "image", "audio", "resource_link", "resource"})


def error_text(tool: str, text: str) -> str:
    """What the model reads of an `isError` result of `tool` (its model name): `{tool}: the
    tool reported an error: {text}`, or without `: {text}` when the result says nothing."""
    return f"{tool}: {REPORTED}: {text}" if text else f"{tool}: {REPORTED}"


def read(result: Mapping[str, Any], ms: int, output_schema: str | None, tool: str) -> Outcome:
    """A `tools/call` result object of `tool` (its model name), parsed strictly, as the model
    reads it; `ResultError` when it is not a tool result. A tool that lists an `outputSchema`
    (here its canonical JSON) must return structured content that holds to it unless
    `isError` (MCP's rule, which the SDK's client kept)."""
    content = result.get("content")
    failed = result.get("isError", False)
    structured = result.get("structuredContent")
    if not isinstance(content, list) or not isinstance(failed, bool):
        raise ResultError("not a tool result (content, isError)")
    if structured is not None and not isinstance(structured, dict):
        raise ResultError("structuredContent is not an object")
    parts: list[str] = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind not in CONTENT:
            raise ResultError(f"content of an unknown type {str(kind)[:40]!r}")
        assert isinstance(item, dict)
        if kind == "text":
            if not isinstance(item.get("text"), str):
                raise ResultError("text content without text")
            parts.append(item["text"])
            continue
        mime = item.get("mimeType", "")
        if not isinstance(mime, str):
            raise ResultError("a mimeType that is not text")
        parts.append(f"[{kind} content{' ' + mime if mime else ''}: not shown]")
    if output_schema is not None and not failed:
        if "structuredContent" not in result:
            raise ResultError("the tool has an outputSchema but returned no structured content")
        mismatch = mcp_args.mismatch(output_schema, structured)
        if mismatch is not None:
            raise ResultError(f"the structured content breaks the outputSchema: {mismatch}")
    if not any(p for p in parts) and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False, sort_keys=True)]
    text = "\n".join(parts)
    if failed:
        text = error_text(tool, text)
    if len(text) > MAX_OUTPUT:
        text = text[:MAX_OUTPUT] + CUT_NOTE
    return Outcome(not failed, text, ms)
