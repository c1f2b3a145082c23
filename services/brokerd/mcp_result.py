"""What the model reads of an MCP tool's result (SPEC §18.6): its text content, structured
content as JSON text when there is no text, other content described, never shown; cut at
1 MiB like a toolkit's output. `isError` is a result the model reads with `ok` false.

Pure: an SDK result object in, an `Outcome` out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_OUTPUT = 1024 * 1024  # characters, as the toolkit's 1 MiB
CUT_NOTE = "\n[… the result passed 1 MiB and was cut]"


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


def read(answer: Any, ms: int) -> Outcome:
    """A `CallToolResult` (or anything else the SDK returned) as the model reads it."""
    dumped = (
        answer.model_dump(by_alias=True, exclude_none=True)
        if hasattr(answer, "model_dump")
        else None
    )
    if not isinstance(dumped, dict) or "content" not in dumped:
        return Outcome.failed("the MCP server answered something that is not a tool result")
    parts: list[str] = []
    for item in dumped.get("content") or []:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        else:
            mime = item.get("mimeType", "") if isinstance(item, dict) else ""
            parts.append(f"[{kind or 'unknown'} content{' ' + mime if mime else ''}: not shown]")
    structured = dumped.get("structuredContent")
    if not any(p for p in parts) and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False, sort_keys=True)]
    text = "\n".join(parts)
    if len(text) > MAX_OUTPUT:
        text = text[:MAX_OUTPUT] + CUT_NOTE
    return Outcome(not bool(dumped.get("isError")), text, ms)
