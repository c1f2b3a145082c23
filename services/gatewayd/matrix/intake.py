"""What one Matrix event from the room means to the box (SPEC §21.2, §21.3): an owner's message
to a session, a command (`stop`, `stop all`, `status`), a verdict on a card, something to
answer once, or nothing.

Pure: no I/O, no clock. The rules of who is heard live here and nowhere else: only an owner,
and with `encrypted = true` only an event that was decrypted from an end-to-end encrypted one;
a verdict only on (or in reply to) a card's own event, bound to that card's approval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bxcore.wire.messages import Scope

APPROVE_ONCE = "\u2705"  # ✅
APPROVE_SESSION = "\U0001f501"  # 🔁
DENY = "\u274c"  # ❌
VERDICT_KEYS: Mapping[str, tuple[bool, Scope]] = {
    APPROVE_ONCE: (True, Scope.ONCE),
    APPROVE_SESSION: (True, Scope.SESSION),
    DENY: (False, Scope.ONCE),
}
VERDICT_WORDS: Mapping[str, tuple[bool, Scope]] = {
    "approve": (True, Scope.ONCE),
    "session": (True, Scope.SESSION),
    "deny": (False, Scope.ONCE),
}
NOT_A_CARD = (
    "That is not an approval card: a verdict counts only as a reaction on the card itself "
    "(or a reply to it)."
)
UNDECRYPTED = (
    "The box could not decrypt that (the room key had not reached its device): nothing was "
    "done. Send it again; if this goes on, check the box's device in the room's settings."
)
ONLY_OWNERS = "Only an owner's reaction settles a card: this changes nothing."
NOT_ENCRYPTED = (
    "That reaction was not end-to-end encrypted, and this box acts only on encrypted ones: "
    "this changes nothing."
)
WRONG_KEY = (
    "A card takes ✅ (approve once), 🔁 (approve for the session) or ❌ (deny); nothing else."
)


@dataclass(frozen=True)
class Incoming:
    """One event of the room as the channel read it: a text message or a reaction."""

    event_id: str
    sender: str
    encrypted: bool  # decrypted from an m.room.encrypted event
    body: str | None = None  # a message's text
    key: str | None = None  # a reaction's key
    reacts_to: str | None = None  # the event a reaction is on
    thread: str | None = None  # the root of the thread the event is in
    reply_to: str | None = None  # the event a message replies to
    at_ms: int = 0  # when the homeserver says it was sent
    undecrypted: bool = False  # an encrypted event the box holds no key for


@dataclass(frozen=True)
class Card:
    """An approval card the box posted: its approval, and where it is."""

    approval: str
    thread: str | None  # the thread it was posted in (None: the room's main timeline)
    title: str = ""  # what it is about, for its edits ("approval … : shell in session …")
    settled: str | None = None  # how it ended, once known ("approved by @me:…", "expired")
    session_scope: bool = True  # 🔁 allowed: not when it asks because of untrusted content


# --- what the channel does -------------------------------------------------------------------


@dataclass(frozen=True)
class Ignore:
    """Not acted on: logged once, with the sender, and nothing said in the room."""

    why: str


@dataclass(frozen=True)
class Say:
    """Answered once, in the thread the event is in (or under the card it was on)."""

    thread: str | None
    text: str
    reply_to: str


@dataclass(frozen=True)
class ToSession:
    """An owner's message for session `session` (None: a new session, whose thread is the
    message's own event)."""

    session: str | None
    thread: str
    text: str


@dataclass(frozen=True)
class Stop:
    session: str
    thread: str
    reply_to: str


@dataclass(frozen=True)
class StopAll:
    thread: str | None
    reply_to: str


@dataclass(frozen=True)
class Status:
    thread: str | None
    reply_to: str


@dataclass(frozen=True)
class Verdict:
    card: str  # the card's event id
    approval: str
    approve: bool
    scope: Scope
    owner: str
    thread: str | None
    reply_to: str


Action = Ignore | Say | ToSession | Stop | StopAll | Status | Verdict


def read(
    event: Incoming,
    *,
    owners: frozenset[str],
    encrypted: bool,
    threads: Mapping[str, str],
    cards: Mapping[str, Card],
) -> Action:
    """What `event` asks for. `threads`: each thread root the box knows, to its session;
    `cards`: each card's event id, to its card."""
    on_card = cards.get(event.reacts_to or "")
    if event.sender not in owners:
        if on_card is not None:  # answered, never acted on
            return Say(on_card.thread, ONLY_OWNERS, event.reacts_to or "")
        return Ignore(f"from {event.sender}, who is not an owner")
    if event.undecrypted:
        return Say(event.thread, UNDECRYPTED, event.event_id)
    if encrypted and not event.encrypted:
        if on_card is not None:
            return Say(on_card.thread, NOT_ENCRYPTED, event.reacts_to or "")
        return Ignore(f"from {event.sender}, not end-to-end encrypted (encrypted = true)")
    if event.key is not None:
        return _reaction(event, cards)
    if event.body is None:
        return Ignore(f"from {event.sender}, neither a text message nor a reaction")
    if event.reply_to is not None and event.reply_to in cards:
        return _reply_to_card(event, event.reply_to, cards[event.reply_to])
    if event.thread is not None and event.thread in cards:  # in the thread a card began
        return _reply_to_card(event, event.thread, cards[event.thread])
    words = " ".join(_without_fallback(event.body).split()).lower()
    if words == "stop all":
        return StopAll(event.thread, event.event_id)
    if words == "status":
        return Status(event.thread, event.event_id)
    session = None if event.thread is None else threads.get(event.thread)
    if words == "stop":
        if session is None:
            return Say(event.thread, "Nothing to stop here: `stop` works in a session's thread, "
                       "`stop all` anywhere.", event.event_id)  # fmt: skip
        return Stop(session, event.thread or event.event_id, event.event_id)
    if event.thread is not None and session is None:
        return Say(event.thread, "This thread is not one of the box's sessions: start a new "
                   "one with a message outside any thread.", event.event_id)  # fmt: skip
    text = _without_fallback(event.body)
    if not text.strip():
        return Ignore(f"from {event.sender}, an empty message")
    return ToSession(session, event.thread or event.event_id, text)


def _reaction(event: Incoming, cards: Mapping[str, Card]) -> Action:
    key = (event.key or "").replace("\ufe0f", "")  # the emoji presentation selector
    assert event.reacts_to is not None
    card = cards.get(event.reacts_to)
    if card is None:
        if key in VERDICT_KEYS:
            return Say(event.thread, NOT_A_CARD, event.reacts_to)
        return Ignore(f"a reaction by {event.sender} on an event that is not a card")
    if key not in VERDICT_KEYS:
        return Say(card.thread, WRONG_KEY, event.reacts_to)
    return _verdict(event, event.reacts_to, card, VERDICT_KEYS[key])


NO_SESSION_SCOPE = (
    "🔁 cannot settle this card: it asks because the session holds untrusted content, and "
    "no session-wide approval covers such a call. React ✅ or ❌."
)


def _reply_to_card(event: Incoming, card_event: str, card: Card) -> Action:
    assert event.body is not None
    word = _without_fallback(event.body).strip().lower()
    found = VERDICT_WORDS.get(word)
    if found is None:
        return Say(card.thread, "A reply to a card says `approve`, `session` or `deny`; "
                   "nothing else.", event.event_id)  # fmt: skip
    return _verdict(event, card_event, card, found)


def _verdict(event: Incoming, card_event: str, card: Card, found: tuple[bool, Scope]) -> Action:
    if card.settled is not None:
        return Say(card.thread, f"Already settled ({card.settled}): this changes nothing.",
                   event.event_id)  # fmt: skip
    approve, scope = found
    if scope is Scope.SESSION and not card.session_scope:
        return Say(card.thread, NO_SESSION_SCOPE, event.event_id)
    return Verdict(card_event, card.approval, approve, scope, event.sender, card.thread,
                   event.event_id)  # fmt: skip


def _without_fallback(body: str) -> str:
    """A reply's text without the quoted fallback some clients put first (`> <@a:b> …` lines
    and the blank line after them)."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    if lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)
