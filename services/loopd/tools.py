"""What the model reads back from a tool call (SPEC §10.3, §3.5).

`done` is the output cut by `cap_result`; `denied` is `denial_message(reason, detail)`;
`error` is `Error: …`; `pending` is nothing yet; a call past `max_calls_per_reply` in one
answer is `too_many_calls`. Pure: no I/O.
"""

from __future__ import annotations

from bxcore.deny import DenyReason, denial_text
from bxcore.messages import Denied, Done, Failed, Outcome

CAP = 64 * 1024  # characters


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


def too_many_calls(cap: int) -> str:
    """What the model reads for each call of one answer past the first `cap` (never sent to
    brokerd): `[loop] max_calls_per_reply`."""
    return (
        f"Error: only the first {cap} tool calls of one answer are run; "
        "send the rest again in a later answer."
    )


def result_text(outcome: Outcome) -> str | None:
    """What the model reads for a final outcome; None while it is pending."""
    if isinstance(outcome, Done):
        return cap_result(outcome.output)
    if isinstance(outcome, Denied):
        return denial_message(outcome.reason, outcome.detail)
    if isinstance(outcome, Failed):
        return f"Error: {outcome.message}"
    return None
