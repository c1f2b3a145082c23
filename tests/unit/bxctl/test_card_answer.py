"""`bxctl.card_answer`: only the code of the card's own approval id approves it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.labels import DataClass, Label
from bxcore.wire.messages import ApprovalInfo, AskWhy, Scope
from bxctl.card_answer import CardVerdict, NotAnAnswer, answer_code, prompt, read_answer

ID_CHARS = "abcdefghijklmnopqrstuvwxyz23456789"


def card(approval: str = "k3v9qz2m", why: AskWhy = AskWhy.GRANT_ASKS) -> ApprovalInfo:
    return ApprovalInfo(
        approval, "s1", "c1", "shell", '{"command":"ls"}', "workspace-shell",
        Label(DataClass.PRIVATE, False), why, "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z",
    )  # fmt: skip


ONCE, SESSION, DENY = (
    CardVerdict(True, Scope.ONCE),
    CardVerdict(True, Scope.SESSION),
    CardVerdict(False, Scope.ONCE),
)


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("k3v9", ONCE),
        (" K3V9 \n", ONCE),
        ("k3v9qz", ONCE),
        ("k3v9qz2m", ONCE),
        ("k3v9 s", SESSION),
        ("s k3v9", SESSION),
        ("k3v9 session", SESSION),
        ("n", DENY),
        ("No", DENY),
        ("", None),
        ("  \n", None),
    ],
)
def test_the_cards_code_approves_and_n_denies(reply: str, verdict: CardVerdict | None) -> None:
    assert read_answer(reply, card()) == verdict


@pytest.mark.parametrize(
    "reply",
    [
        "y", "yes", "s", "session",  # the old answers: typed ahead, or under a fake prompt
        "k3v", "k3v8", "abcd", "k3v9qz2mx", "k3v9qz2n",  # too short, or another id
        "k3v9 k3v9", "k3v9 s s", "k3v9 y", "n k3v9", "y k3v9", "s s",
    ],
)  # fmt: skip
def test_anything_else_decides_nothing_and_says_what_to_type(reply: str) -> None:
    answer = read_answer(reply, card())
    assert isinstance(answer, NotAnAnswer)
    assert answer.why == (
        "not an answer for k3v9qz2m: type k3v9 to approve it once, "
        "k3v9 s to approve it for the session, or n to deny"
    )


def test_a_call_asked_for_untrusted_content_is_approved_only_once() -> None:
    untrusted = card(why=AskWhy.UNTRUSTED)
    assert read_answer("k3v9", untrusted) == ONCE
    refused = read_answer("k3v9 s", untrusted)
    assert isinstance(refused, NotAnAnswer) and "approved only once" in refused.why
    assert isinstance(read_answer("y", untrusted), NotAnAnswer)
    assert prompt(untrusted) == "approve k3v9qz2m? type k3v9 (once) or n (deny): "


def test_the_prompt_names_the_card_and_its_code() -> None:
    assert answer_code("k3v9qz2m") == "k3v9"
    assert prompt(card()) == "approve k3v9qz2m? type k3v9 (once), k3v9 s (session) or n (deny): "


ids = st.text(ID_CHARS, min_size=8, max_size=8)


@given(ids, ids, st.sampled_from(["", " s", " session"]))
def test_an_answer_typed_for_one_card_never_approves_another(
    shown: str, other: str, scope: str
) -> None:
    answer = read_answer(answer_code(shown) + scope, card(other))
    approved = isinstance(answer, CardVerdict) and answer.approve
    assert approved == (answer_code(shown) == answer_code(other))
