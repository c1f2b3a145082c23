"""What the owner reads of a turn and of an approval (SPEC §9.1, §10.4, §13), as text.

Pure: no I/O. Everything that came from the model (text, tool names, arguments) passes
through `visible`, so a hostile model cannot move the cursor, clear a line or reorder text on
the owner's terminal to paint a fake prompt or hide an argument.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from bxcore.clock import parse_rfc3339
from bxcore.messages import (
    ApprovalInfo,
    ApprovalState,
    AssistantText,
    EndReason,
    Error,
    ErrorCode,
    Event,
    OwnerSaid,
    Settled,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
)

INLINE_ARGUMENTS = 160


def visible(text: str, *, newlines: bool = False) -> str:
    """`text` with every control and format character (ESC, CR, bidi overrides, …) shown as
    an escape; newlines and tabs kept only where `newlines` says."""
    out: list[str] = []
    for char in text:
        if newlines and char in "\n\t":
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def inline_arguments(arguments: str, width: int = INLINE_ARGUMENTS) -> str:
    """The arguments on one line (`{"path": "/a"}`), cut to `width`."""
    try:
        text = json.dumps(json.loads(arguments), ensure_ascii=False)
    except (ValueError, RecursionError):
        text = arguments
    return cut(visible(text), width)


def pretty_arguments(arguments: str) -> list[str]:
    """Every argument, whole, one JSON line each (§9.1: the owner sees all that will run)."""
    try:
        text = json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
    except (ValueError, RecursionError):
        return [visible(arguments)]
    return visible(text, newlines=True).split("\n")


def event_lines(event: Event) -> list[str]:
    """What the owner reads of one turn event; nothing for their own message."""
    if isinstance(event, OwnerSaid):
        return []
    if isinstance(event, AssistantText):
        return [visible(event.text, newlines=True)]
    if isinstance(event, ToolCalled):
        return [f"→ {visible(event.tool)} {inline_arguments(event.arguments)}"]
    if isinstance(event, ToolDone):
        mark, how = ("✓", "") if event.ok else ("✗", " failed")
        return [f"{mark} {visible(event.tool)}{how} ({event.bytes} bytes)"]
    if isinstance(event, ToolDenied):
        return [f"✗ {visible(event.tool)} denied: {event.reason}"]
    if isinstance(event, ToolPending):
        return [f"… {visible(event.tool)} waits for the owner's approval {event.approval}"]
    if isinstance(event, TurnError):
        return [f"error: {visible(event.message)}"]
    if isinstance(event, TurnEnd):
        if event.reason is EndReason.MAX_STEPS:
            return ["(the turn stopped: the model used all the steps a turn may take)"]
        if event.reason is EndReason.ERROR:
            return ["(the turn ended with an error)"]
    return []


def until(expires: str, now_ms: int) -> str:
    """`in 9m 58s`, or `expired`."""
    try:
        left = (parse_rfc3339(expires) - now_ms) // 1000
    except ValueError:
        return expires
    if left <= 0:
        return "expired"
    minutes, seconds = divmod(left, 60)
    return f"in {minutes}m {seconds:02d}s" if minutes else f"in {seconds}s"


def approval_card(info: ApprovalInfo, now_ms: int) -> list[str]:
    """One pending approval with everything the owner decides on."""
    label = info.label.class_.value + (", untrusted" if info.label.untrusted else "")
    return [
        f"approval {info.approval}: {visible(info.tool)} in session {info.session}",
        f"  why:     {info.why.value}",
        f"  grant:   {visible(info.grant)}",
        f"  label:   {label}",
        f"  expires: {info.expires} ({until(info.expires, now_ms)})",
        "  arguments:",
        *(f"    {line}" for line in pretty_arguments(info.arguments)),
    ]


def verdict_line(approval: str, answer: Any) -> tuple[str, bool]:
    """What became of a verdict, in one line, and whether it went as the owner asked."""
    if isinstance(answer, Settled):
        if answer.state is ApprovalState.REFUSED:
            return f"denied {approval}: the call is refused", True
        if answer.reason is None:
            return f"approved {approval}: the call runs", True
        return f"approved {approval}, but the call is denied now: {answer.reason}", False
    if isinstance(answer, Error):
        if answer.code is ErrorCode.ALREADY_SETTLED:
            return f"already settled: {visible(answer.message)}", False
        if answer.code is ErrorCode.UNKNOWN_APPROVAL:
            return f"no such approval: {approval}", False
        return f"{visible(answer.message)} ({answer.code})", False
    return f"unexpected answer: {type(answer).__name__}", False
