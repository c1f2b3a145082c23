"""What the owner's typed answer to an approval card means (SPEC §9.2, §13), bound to that card.

Pure: no I/O. To approve, the owner types the first characters of the approval id the card
shows (`k3v9`, or `k3v9 s` for the session): an answer typed for another card, for a fake
card the model drew, or before any card was shown cannot approve this one. Denying is `n`.
An empty line is no answer at all (chat asks again).
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore.wire.messages import ApprovalInfo, AskWhy, Scope

CODE_LENGTH = 4  # of the approval id's 8 characters of a-z 2-9: 1 in 1.1 million by chance
SESSION_WORDS = frozenset({"s", "session"})
DENY_WORDS = frozenset({"n", "no"})


@dataclass(frozen=True, slots=True)
class CardVerdict:
    """The owner's verdict on the card it was typed for."""

    approve: bool
    scope: Scope


@dataclass(frozen=True, slots=True)
class NotAnAnswer:
    """A reply that decides nothing, and the one line that says what to type."""

    why: str


def answer_code(approval: str) -> str:
    """What the owner types to approve `approval`: its first characters."""
    return approval[:CODE_LENGTH]


def session_scope_allowed(info: ApprovalInfo) -> bool:
    """§9.2: a session-scoped approval never covers a call asked only for untrusted content."""
    return info.why is AskWhy.GRANT_ASKS


def prompt(info: ApprovalInfo) -> str:
    """The question under the card, naming the card's id and the code that approves it."""
    code = answer_code(info.approval)
    if session_scope_allowed(info):
        return f"approve {info.approval}? type {code} (once), {code} s (session) or n (deny): "
    return f"approve {info.approval}? type {code} (once) or n (deny): "


def read_answer(reply: str, info: ApprovalInfo) -> CardVerdict | NotAnAnswer | None:
    """What `reply` decides about the card of `info`; None for an empty line."""
    words = reply.lower().split()
    if not words:
        return None
    if len(words) == 1 and words[0] in DENY_WORDS:
        return CardVerdict(False, Scope.ONCE)
    codes = [word for word in words if word not in SESSION_WORDS]
    session = len(codes) < len(words)
    if len(words) <= 2 and len(codes) == 1 and _names(codes[0], info.approval):
        if not session:
            return CardVerdict(True, Scope.ONCE)
        if session_scope_allowed(info):
            return CardVerdict(True, Scope.SESSION)
        return NotAnAnswer(
            f"{info.approval} asks because the session holds untrusted content: it can be "
            f"approved only once ({answer_code(info.approval)}), or denied (n)"
        )
    return NotAnAnswer(_what_to_type(info))


def _names(code: str, approval: str) -> bool:
    """Whether `code` is the start of `approval` the owner was asked for (4 to 8 of its
    characters)."""
    return CODE_LENGTH <= len(code) <= len(approval) and approval.startswith(code)


def _what_to_type(info: ApprovalInfo) -> str:
    code = answer_code(info.approval)
    scope = f", {code} s to approve it for the session" if session_scope_allowed(info) else ""
    return f"not an answer for {info.approval}: type {code} to approve it once{scope}, or n to deny"
