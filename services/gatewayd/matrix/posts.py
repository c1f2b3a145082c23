"""What the box shows in the room (SPEC §21.2, §21.3): a turn as one message in its session's
thread, edited in place as the turn's events come; an approval card, edited when it is settled.

Pure: no I/O, no clock. The lines are `bxcore.owner_text`'s, the ones `bxctl` shows, so every
foreign character is made visible by the one rule; the text is sent as plain text, never as
markup. A turn that outgrows one message goes on in the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bxcore.owner_text import card_body, event_lines
from bxcore.visible import visible
from bxcore.wire.messages import ApprovalInfo, ApprovalState, AskWhy, TurnEvent

MOST_TEXT = 24_000  # characters in one message (an event may hold 64 KiB of JSON)
OFFER = (
    "React ✅ approve once · 🔁 approve for the session · ❌ deny "
    "(or reply: approve, session, deny)."
)
NO_SESSION_SCOPE = (
    "React ✅ approve once · ❌ deny (or reply: approve, deny). 🔁 cannot cover this call: it asks "
    "because the session holds untrusted content."
)


@dataclass
class TurnText:
    """One turn's lines, split into messages of at most `MOST_TEXT` characters."""

    session: str
    turn: int
    parts: list[list[str]] = field(default_factory=lambda: [[]])
    seen: int = -1  # the last event's seq taken

    def take(self, event: TurnEvent) -> list[int]:
        """Add `event`'s lines; the parts whose text changed (none for an event seen)."""
        if event.seq <= self.seen:
            return []
        self.seen = event.seq
        lines = event_lines(event.event, hint=None)
        changed: list[int] = []
        for line in lines:
            for piece in _pieces(line):
                if len(self.text(len(self.parts) - 1)) + len(piece) + 1 > MOST_TEXT:
                    self.parts.append([])
                self.parts[-1].append(piece)
                if len(self.parts) - 1 not in changed:
                    changed.append(len(self.parts) - 1)
        return changed

    def text(self, part: int) -> str:
        return "\n".join(self.parts[part])


def _pieces(line: str) -> list[str]:
    return [line[at : at + MOST_TEXT // 2] for at in range(0, max(len(line), 1), MOST_TEXT // 2)]


def card_text(info: ApprovalInfo, now_ms: int) -> str:
    """The card as posted: everything the owner decides on, every argument whole (a card too
    long for one message is cut, saying so), then the reactions it takes."""
    lines = card_body(info, now_ms)
    offer = NO_SESSION_SCOPE if info.why is AskWhy.UNTRUSTED else OFFER
    text = "\n".join(lines)
    if len(text) > MOST_TEXT:
        shown = text[:MOST_TEXT]
        text = (
            f"{shown}\n… (cut: the card is {len(text)} characters, of which {MOST_TEXT} are "
            "shown; the whole card is in the console and `bxctl pending`)"
        )
    return f"{text}\n\n{offer}"


def card_title(info: ApprovalInfo) -> str:
    return f"approval {info.approval}: {visible(info.tool)} in session {visible(info.session)}"


def settled_text(title: str, how: str) -> str:
    """A settled card: what it was, and how it ended; no reactions offered any more."""
    return f"{title}: {how}"


def how_settled(state: ApprovalState, by: str | None) -> str:
    """`approved by @me:example.org`, `denied`, `expired`, `settled elsewhere: approved`."""
    if state is ApprovalState.EXPIRED:
        return "expired"
    said = "approved" if state is ApprovalState.APPROVED else "denied"
    if state is ApprovalState.PENDING:
        said = "settled"
    return f"{said} by {by}" if by else f"{said} elsewhere"
