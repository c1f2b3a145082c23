"""What the owner reads of a turn and of an approval card (SPEC §9.1, §10.4, §12.2, §21): the
lines every owner surface shows (`bxctl` fits them to a terminal, the phone channel posts
them), so a card says the same wherever it is read.

Pure: no I/O. Everything that came from the model (text, tool names, arguments) passes through
`bxcore.visible` and `bxcore.shown_arguments`: the one rule for foreign text. A denial is shown
by its sentence (`no grant allows this call`), a tool's output folded unless asked for, a
`write_file`'s preview on its card.
"""

from __future__ import annotations

from bxcore.clock import parse_rfc3339
from bxcore.deny import denial_clause
from bxcore.shown_arguments import shown_arguments, shown_text
from bxcore.visible import visible
from bxcore.wire.messages import (
    ApprovalInfo,
    AssistantText,
    EndReason,
    Event,
    OwnerSaid,
    TargetInfo,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
)

INLINE_ARGUMENTS = 160
SHOW_OUTPUT = "--show-output to see it"  # how `bxctl chat MESSAGE` shows a folded output
OUTPUT_INDENT = "    "


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def inline_arguments(arguments: str, width: int = INLINE_ARGUMENTS) -> str:
    """The arguments on one line (`{"path": "/a"}`), cut to `width`."""
    return cut(shown_arguments(arguments, indent=None).text, width)


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


def card_body(info: ApprovalInfo, now_ms: int) -> list[str]:
    """One pending approval with everything the owner decides on: every argument, whole
    (each view fits the lines to its width, wrapping, never cutting)."""
    label = info.label.class_.value + (", untrusted" if info.label.untrusted else "")
    arguments = shown_arguments(info.arguments)
    preview = None if info.preview is None else shown_text(info.preview)
    said = arguments.warnings() + ([] if preview is None else preview.warnings(DIFFERENCE))
    return [
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
    ]


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
