"""What the model reads back from a tool call (SPEC §10.3, §3.5), and whether the call worked.

`done` is the output cut by `cap_result`; `denied` is `denial_message(reason, detail)`;
`error` is `Error: …`; `pending` is nothing yet; a call past `max_calls_per_reply` in one
answer is `too_many_calls`; a call whose turn the owner stopped is `CANCELLED_RESULT`. The
owner's views get the output too, cut shorter (`shown_output`). Success is the `ok` of a
`CallResult`, never read back from its text. Also: the owner's line for too many calls
(`too_many_calls_said`) and a spawn's task (`task_of`). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore import strict_json
from bxcore.deny import DenyReason, denial_text
from bxcore.wire.messages import MAX_OUTPUT_SHOWN, Denied, Done
from services.loopd.core.turn_events import FinalOutcome

CAP = 64 * 1024  # characters
CANCELLED_RESULT = (
    "Error: the owner stopped the turn before this call's result was read; the call may have run."
)


@dataclass(frozen=True, slots=True)
class CallResult:
    """What the model reads for one call (`content`), and whether the call did its work
    (`ok`: false for a denial, an error, or a command that failed). Only `content` is kept in
    the history: `ok` is for the owner's `tool_done` event, told when the call ends."""

    content: str
    ok: bool


def denial_message(reason: DenyReason, detail: str | None) -> str:
    """The sentence for `reason`; with a detail, the sentence without its full stop, `: `,
    the detail and a full stop (§3.5)."""
    sentence = denial_text(reason)
    if detail is None:
        return sentence
    return f"{sentence.removesuffix('.')}: {detail}."


def cap_result(output: str) -> str:
    """At most 64 KiB of characters, then how many more were cut."""
    if len(output) <= CAP:
        return output
    return f"{output[:CAP]}\n[… {len(output) - CAP} more characters cut]"


def shown_output(output: str, limit: int = MAX_OUTPUT_SHOWN) -> str:
    """A tool's output as the owner's views get it (`tool_done`): at most `limit` bytes of
    UTF-8 in all, cut on a character's edge, with a last line saying how much was cut."""
    data = output.encode("utf-8", "replace")  # a lone surrogate cannot be sent: `?`
    if len(data) <= limit:
        return data.decode("utf-8")
    room = limit - len(_cut_note(len(data)).encode())  # the note is never longer than this
    kept = data[:room].decode("utf-8", "ignore")
    return kept + _cut_note(len(data) - len(kept.encode()))


def _cut_note(cut: int) -> str:
    return f"\n[… {cut:,} more bytes cut]"


def failed(message: str) -> CallResult:
    """A call that could not do its work: the model reads `Error: {message}`."""
    return CallResult(f"Error: {message}", ok=False)


def too_many_calls(cap: int) -> CallResult:
    """What the model reads for each call of one answer past the first `cap` (never sent to
    brokerd): `[loop] max_calls_per_reply`."""
    return failed(
        f"only the first {cap} tool calls of one answer are run; "
        "send the rest again in a later answer."
    )


def result_of(outcome: FinalOutcome) -> CallResult:
    """What the model reads for a final outcome."""
    if isinstance(outcome, Done):
        return CallResult(cap_result(outcome.output), outcome.ok)
    if isinstance(outcome, Denied):
        return CallResult(denial_message(outcome.reason, outcome.detail), ok=False)
    return failed(outcome.message)


def too_many_calls_said(asked: int, cap: int) -> str:
    """The owner's `error` event for a reply with more calls than `cap` (the reason, as a
    denial's: the model reads `too_many_calls` for each refused call)."""
    return (
        f"the model asked for {asked} tool calls in one answer; only the first {cap} run "
        f"([loop] max_calls_per_reply), the other {asked - cap} were refused without brokerd"
    )


def task_of(arguments: str) -> str | None:
    """The task of a `spawn` call: its arguments must be `{"task": "…"}`, nothing else."""
    try:
        value = strict_json.loads(arguments)
    except strict_json.StrictJsonError:
        return None
    if isinstance(value, dict) and list(value) == ["task"] and isinstance(value["task"], str):
        return value["task"]
    return None
