"""Who the phone channel hears, and what each event asks (SPEC §21.2, §21.3): a table of cases
over the pure `intake.read`."""

from __future__ import annotations

import pytest

from bxcore.wire.messages import Scope
from services.gatewayd.matrix.intake import (
    Card,
    Ignore,
    Incoming,
    Say,
    Status,
    Stop,
    StopAll,
    ToSession,
    Verdict,
    read,
)

ME, OTHER = "@me:example.org", "@eve:example.org"
CARDS = {"$card": Card("abcd2345", "$root", "approval abcd2345: shell in session mx-1")}
SETTLED = {"$card": Card("abcd2345", "$root", "t", settled="approved by @me:example.org")}
UNTRUSTED = {"$card": Card("abcd2345", "$root", "t", session_scope=False)}
THREADS = {"$root": "mx-1"}


def message(body: str, sender: str = ME, encrypted: bool = True, **fields: str) -> Incoming:
    return Incoming("$ev", sender, encrypted, body=body, **fields)  # type: ignore[arg-type]


def reaction(key: str, on: str = "$card", sender: str = ME, encrypted: bool = True) -> Incoming:
    return Incoming("$ev", sender, encrypted, key=key, reacts_to=on)


def verdict(approve: bool, scope: Scope) -> Verdict:
    return Verdict("$card", "abcd2345", approve, scope, ME, "$root", "$ev")


def decide(event: Incoming, encrypted: bool = True, cards: dict[str, Card] = CARDS) -> object:
    return read(event, owners=frozenset({ME}), encrypted=encrypted, threads=THREADS, cards=cards)


@pytest.mark.parametrize(
    ("event", "encrypted", "expected"),
    [
        (message("hello"), True, ToSession(None, "$ev", "hello")),
        (message("more", thread="$root"), True, ToSession("mx-1", "$root", "more")),
        (message("hello", encrypted=False), False, ToSession(None, "$ev", "hello")),
        (message(" Stop ", thread="$root"), True, Stop("mx-1", "$root", "$ev")),
        (message("stop  ALL"), True, StopAll(None, "$ev")),
        (message("status", thread="$root"), True, Status("$root", "$ev")),
        (reaction("✅"), True, verdict(True, Scope.ONCE)),
        (reaction("✅\ufe0f"), True, verdict(True, Scope.ONCE)),
        (reaction("🔁"), True, verdict(True, Scope.SESSION)),
        (reaction("❌"), True, verdict(False, Scope.ONCE)),
        (message("deny", reply_to="$card", thread="$root"), True,
         verdict(False, Scope.ONCE)),
        (message("> <@box:x> approval …\n\nsession", reply_to="$card"), True,
         verdict(True, Scope.SESSION)),
        (message("Approve", thread="$card"), True, verdict(True, Scope.ONCE)),
    ],
)  # fmt: skip
def test_an_owners_event_asks_for_what_it_says(
    event: Incoming, encrypted: bool, expected: object
) -> None:
    assert decide(event, encrypted) == expected


@pytest.mark.parametrize(
    "event",
    [
        message("hello", sender=OTHER),
        message("approve", sender=OTHER, reply_to="$card"),
        message("stop all", sender=OTHER),
        message("hello", encrypted=False),
        message("stop all", encrypted=False),
        reaction("✅", on="$elsewhere", sender=OTHER),
        Incoming("$ev", OTHER, False, undecrypted=True),
        reaction("👍", on="$root"),
    ],
)
def test_what_is_never_acted_on_is_only_logged(event: Incoming) -> None:
    assert isinstance(decide(event), Ignore)


@pytest.mark.parametrize(
    ("event", "cards", "said"),
    [
        (reaction("✅", sender=OTHER), CARDS, "Only an owner's reaction"),
        (reaction("✅", encrypted=False), CARDS, "not end-to-end encrypted"),
        (reaction("✅", on="$root"), CARDS, "not an approval card"),
        (reaction("👍"), CARDS, "A card takes ✅"),
        (reaction("✅"), SETTLED, "Already settled (approved by @me:example.org)"),
        (message("yes please", reply_to="$card"), CARDS, "says `approve`, `session` or `deny`"),
        (message("stop"), CARDS, "Nothing to stop here"),
        (Incoming("$ev", ME, False, undecrypted=True), CARDS, "could not decrypt"),
        (reaction("🔁"), UNTRUSTED, "🔁 cannot settle this card"),
        (message("hi", thread="$unknown"), CARDS, "not one of the box's sessions"),
    ],
)
def test_what_changes_nothing_is_answered_once(
    event: Incoming, cards: dict[str, Card], said: str
) -> None:
    answer = decide(event, cards=cards)
    assert isinstance(answer, Say) and said in answer.text
