"""What the owner reads of a turn and of an approval (SPEC §9.1, §10.4, §13), as text.

Pure: no I/O. Everything that came from the model (text, tool names, arguments) passes
through `visible`, so a hostile model cannot move the cursor, clear a line or reorder text on
the owner's terminal. Every line of a turn is shown in the agent's gutter (`AGENT`), cut to
the terminal's width so the terminal never wraps it: a row that does not start with the
marker is the box's own (a card, a prompt, a verdict), and the model cannot draw one. A
denial is shown by its sentence (`no grant allows this call`), a tool's output folded unless
asked for; a `write_file`'s preview and where each target came from (§20) on its card.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from bxcore.clock import parse_rfc3339
from bxcore.deny import denial_clause
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
    TargetInfo,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
)
from bxcore.shown_arguments import shown_arguments, shown_text
from bxcore.visible import visible

INLINE_ARGUMENTS = 160
SHOW_OUTPUT = "--show-output to see it"  # how `bxctl chat MESSAGE` shows a folded output
OUTPUT_INDENT = "    "
AGENT = "agent│ "  # the gutter of every line of a turn; no line of the box starts with it
CARD_CONTINUES = "      "  # where a card's line goes on when it is wider than the terminal
TAB = 4


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def inline_arguments(arguments: str, width: int = INLINE_ARGUMENTS) -> str:
    """The arguments on one line (`{"path": "/a"}`), cut to `width`."""
    return cut(shown_arguments(arguments, indent=None).text, width)


# --- fitting lines to a terminal ------------------------------------------------------------


def cells(char: str) -> int:
    """The columns `char` may take on a terminal, counted high (an ambiguous or wide one as
    two, a combining one as one): a piece cut by this count is never wider than reckoned."""
    return 2 if unicodedata.east_asian_width(char) in ("W", "F", "A") else 1


def columns(text: str) -> int:
    return sum(cells(char) for char in text)


def pieces(line: str, width: int, *, words: bool = False) -> list[str]:
    """`line` cut into pieces of at most `width` columns (at least one character each), every
    character kept. With `words`, a piece that would end inside a word ends at the row's last
    space instead, when it has one, and the one space a row breaks at is left out (as any
    word wrapper does)."""
    found: list[str] = []
    start = used = 0
    index = 0
    while index < len(line):
        size = cells(line[index])
        if used + size > width and index > start:
            if words and line[index] == " ":
                found.append(line[start:index])
                start = index = index + 1
                used = 0
                continue
            space = line.rfind(" ", start + 1, index) if words else -1
            if space > start:
                found.append(line[start:space])
                start, used = space + 1, columns(line[space + 1 : index])
            else:
                found.append(line[start:index])
                start, used = index, 0
        used += size
        index += 1
    found.append(line[start:])
    return found


def fitted(
    line: str, width: int | None, first: str, rest: str, *, words: bool = False
) -> list[str]:
    """`line` after `first`, going on after `rest` on as many rows as it takes, each row at
    most `width` columns (`None`: one row, however long), broken between words if `words`.
    A row with nothing after its lead-in ends where the lead-in's text does."""
    line = line.expandtabs(TAB)
    if width is None:
        parts = [line]
    else:
        parts = pieces(line, max(1, width - max(columns(first), columns(rest))), words=words)
    return [_row(first, parts[0]), *(_row(rest, part) for part in parts[1:])]


def _row(lead: str, text: str) -> str:
    return lead + text if text else lead.rstrip()


def agent_lines(lines: Iterable[str], width: int | None = None) -> list[str]:
    """Each line in the agent's gutter, every row of it (an empty one, a wrapped one too),
    wrapped between words where it can be."""
    return [row for line in lines for row in fitted(line, width, AGENT, AGENT, words=True)]


def card_lines(lines: Iterable[str], width: int | None = None) -> list[str]:
    """A card's lines fitted to `width`: a line too long goes on indented, never at the left
    margin, where only the box starts a row."""
    return [row for line in lines for row in fitted(line, width, "", CARD_CONTINUES)]


# --- a turn ---------------------------------------------------------------------------------


def event_lines(
    event: Event, *, show_output: bool = False, hint: str | None = SHOW_OUTPUT
) -> list[str]:
    """What the owner reads of one turn event (to show in the agent's gutter); nothing for
    their own message. A tool's output is folded to its size and `hint` (how to see it)
    unless `show_output`."""
    if isinstance(event, OwnerSaid):
        return []
    if isinstance(event, AssistantText):
        return visible(event.text, newlines=True).split("\n")
    if isinstance(event, ToolCalled):
        return [f"→ {visible(event.tool)} {inline_arguments(event.arguments)}"]
    if isinstance(event, ToolDone):
        return done_lines(event, show_output=show_output, hint=hint)
    if isinstance(event, ToolDenied):
        return [f"✗ {visible(event.tool)} denied: {denial_clause(event.reason)}"]
    if isinstance(event, ToolPending):
        return [f"… {visible(event.tool)} waits for the owner's approval {event.approval}"]
    if isinstance(event, TurnError):
        return [f"error: {visible(event.message)}"]
    if isinstance(event, TurnEnd):
        if event.reason is EndReason.MAX_STEPS:
            return ["(the turn stopped: the model used all the steps a turn may take)"]
        if event.reason is EndReason.ERROR:
            return ["(the turn ended with an error)"]
        if event.reason is EndReason.CANCELLED:
            return ["(the turn was stopped by the owner)"]
    return []


def done_lines(event: ToolDone, *, show_output: bool, hint: str | None) -> list[str]:
    """`✓ read_file: done, 1.2 kB`, then the output indented when shown, else how to see it."""
    mark, how = ("✓", "done") if event.ok else ("✗", "failed")
    head = f"{mark} {visible(event.tool)}: {how}, {size_text(event.bytes)}"
    if event.output is None or not event.output:  # from before outputs were kept, or empty
        return [head]
    if not show_output:
        return [f"{head} ({hint})" if hint else head]
    return [f"{head}:", *output_lines(event.output)]


def output_lines(output: str, indent: str = OUTPUT_INDENT) -> list[str]:
    """A tool's output (or a preview), made visible, every line of it after `indent`."""
    lines = visible(output, newlines=True).split("\n")
    if len(lines) > 1 and not lines[-1]:
        lines.pop()  # the text's last newline ends its last line
    return [f"{indent}{line}" if line else "" for line in lines]


def size_text(size: int) -> str:
    """`17 bytes`, `1.2 kB`, `3.4 MB` (powers of 1000, as `ls -h --si`)."""
    if size < 1000:
        return "1 byte" if size == 1 else f"{size} bytes"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


# --- an approval ----------------------------------------------------------------------------


def until(expires: str, now_ms: int) -> str:
    """`in 9m 58s`, or `expired`."""
    try:
        left = (parse_rfc3339(expires) - now_ms) // 1000
    except ValueError:
        return visible(expires)
    if left <= 0:
        return "expired"
    minutes, seconds = divmod(left, 60)
    return f"in {minutes}m {seconds:02d}s" if minutes else f"in {seconds}s"


def approval_card(info: ApprovalInfo, now_ms: int, width: int | None = None) -> list[str]:
    """One pending approval with everything the owner decides on: every argument, whole,
    fitted to `width` (wrapping, never cutting)."""
    label = info.label.class_.value + (", untrusted" if info.label.untrusted else "")
    arguments = shown_arguments(info.arguments)
    preview = None if info.preview is None else shown_text(info.preview)
    said = arguments.warnings() + ([] if preview is None else preview.warnings(DIFFERENCE))
    return card_lines(
        [
            f"approval {info.approval}: {visible(info.tool)} in session {visible(info.session)}",
            *([] if info.job is None else [f"  job:     {visible(info.job)}"]),
            f"  why:     {info.why.value}",
            f"  grant:   {visible(info.grant)}{binding_note(info.write)}",
            f"  label:   {label}",
            f"  expires: {visible(info.expires)} ({until(info.expires, now_ms)})",
            *target_lines(info),
            "  arguments:",
            *(f"    {line}" for line in arguments.lines()),
            *([] if preview is None else ["  would change:", *_indented(preview.lines())]),
            *(f"  warning: {sentence}" for sentence in said),
        ],
        width,
    )


DIFFERENCE = "The difference holds"
UNTRUSTED_ORIGIN = "untrusted: "
#: A target's provenance in the owner's words; the console's js/targets.js says the same.
ORIGINS_SAID = {
    "owner": "from your message",
    "job": "from the job's prompt",
    "code": "code, never taken as yours",
    "untrusted": "NOT FROM YOU: first seen in the result of ",
    "unknown": "NOT FROM YOU: in no result the box still holds",
}


def target_lines(info: ApprovalInfo) -> list[str]:
    """Where each target value of a call that asks came from (§20), the ones not the owner's
    first: none for a call that asks for another reason."""
    if not info.targets:
        return []
    ordered = sorted(info.targets, key=lambda t: t.origin in ("owner", "code"))
    return ["  targets (where each value came from):"] + [
        f"    {visible(t.at)} = {visible(t.value)}: {origin_said(t, info.job)}" for t in ordered
    ]


def origin_said(target: TargetInfo, job: str | None = None) -> str:
    """A target's provenance in the owner's words: `from your message`, `code, …`, or which
    call's result a value not the owner's was first seen in."""
    if target.origin == "owner":
        return ORIGINS_SAID["job" if job else "owner"]
    if target.origin in ("code", "unknown"):
        return ORIGINS_SAID[target.origin]
    if target.origin.startswith(UNTRUSTED_ORIGIN):
        tool = "" if target.tool is None else f" ({visible(target.tool)})"
        called = visible(target.origin[len(UNTRUSTED_ORIGIN) :])
        return f"{ORIGINS_SAID['untrusted']}{called}{tool}"
    return visible(target.origin)


def _indented(lines: list[str]) -> list[str]:
    if len(lines) > 1 and not lines[-1]:
        lines = lines[:-1]  # the text's last newline ends its last line
    return [f"{OUTPUT_INDENT}{line}" if line else "" for line in lines]


def binding_note(write: bool | None) -> str:
    """How a shell's folder is bound, after its grant (issue 15); nothing for other tools."""
    if write is None:
        return ""
    return " (folder bound read-write)" if write else " (folder bound read-only)"


def verdict_line(approval: str, answer: Any) -> tuple[str, bool]:
    """What became of a verdict, in one line, and whether it went as the owner asked."""
    if isinstance(answer, Settled):
        if answer.state is ApprovalState.REFUSED:
            return f"denied {approval}: the call is refused", True
        if answer.reason is None:
            return f"approved {approval}: the call runs", True
        why = denial_clause(answer.reason)
        return f"approved {approval}, but the call is denied now: {why}", False
    if isinstance(answer, Error):
        if answer.code is ErrorCode.ALREADY_SETTLED:
            return f"already settled: {visible(answer.message)}", False
        if answer.code is ErrorCode.UNKNOWN_APPROVAL:
            return f"no such approval: {visible(approval)}", False
        return f"{visible(answer.message)} ({answer.code})", False
    return f"unexpected answer: {type(answer).__name__}", False
