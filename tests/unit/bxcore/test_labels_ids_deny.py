"""Labels and their join (§3.2), the shapes of ids (§6.1, §3.3), and the sentence for each
deny reason (§3.5)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.deny import DenyReason, denial_clause, denial_text
from bxcore.ids import byte_length_between, descends, valid_session
from bxcore.labels import CLEAN, SESSION_DEFAULT, DataClass, Label

LABELS = [Label(c, u) for c in DataClass for u in (False, True)]


PUB, PRIV, SEC = DataClass.PUBLIC, DataClass.PRIVATE, DataClass.SECRET


@pytest.mark.parametrize(
    "a, b, joined",
    [
        (Label(PUB, False), Label(PRIV, False), Label(PRIV, False)),
        (Label(SEC, False), Label(PUB, True), Label(SEC, True)),
        (Label(PRIV, True), Label(PRIV, False), Label(PRIV, True)),
        (Label(PUB, False), Label(PUB, False), Label(PUB, False)),
    ],
)
def test_a_join_takes_the_higher_class_and_either_untrusted_flag(
    a: Label, b: Label, joined: Label
) -> None:
    assert a.join(b) == joined == b.join(a)


def test_the_join_is_a_semilattice_and_never_lowers() -> None:
    for a, b, c in itertools.product(LABELS, repeat=3):
        assert a.join(a) == a
        assert a.join(b).join(c) == a.join(b.join(c))
        assert a.class_.at_most(a.join(b).class_)
        assert not a.untrusted or a.join(b).untrusted


def test_the_order_of_classes_is_public_private_secret() -> None:
    assert DataClass.PUBLIC.at_most(DataClass.PRIVATE)
    assert DataClass.PRIVATE.at_most(DataClass.SECRET)
    assert not DataClass.SECRET.at_most(DataClass.PRIVATE)
    assert Label(DataClass.PRIVATE, False) == SESSION_DEFAULT
    assert Label(DataClass.PUBLIC, False) == CLEAN


@pytest.mark.parametrize(
    "session, valid",
    [
        ("chat-1", True),
        ("a", True),
        ("_x", True),
        ("A.b_c-9", True),
        ("sub-mm-thread-3", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        (".hidden", False),
        ("-dash", False),
        ("a b", False),
        ("a/b", False),
        ("../x", False),
        ("é", False),
        ("a\x00", False),
        ("a\n", False),
    ],
)
def test_a_session_id_is_1_to_128_bytes_of_a_small_alphabet(session: str, valid: bool) -> None:
    assert valid_session(session) is valid


@given(st.text(max_size=200))
def test_session_ids_never_raise_and_valid_ones_are_safe_file_names(text: str) -> None:
    if valid_session(text):
        assert "/" not in text and not text.startswith(".") and 1 <= len(text.encode()) <= 128


@pytest.mark.parametrize(
    "text, low, high, fits",
    [("", 1, 64, False), ("r", 1, 64, True), ("x" * 64, 1, 64, True), ("é" * 33, 1, 64, False),
     ("\ud800", 0, 64, False)],
)  # fmt: skip
def test_byte_lengths_count_utf8_bytes(text: str, low: int, high: int, fits: bool) -> None:
    assert byte_length_between(text, low, high) is fits


SENTENCES = {
    "unknown_tool": "Denied: there is no such tool.",
    "invalid_arguments": "Denied: the arguments are not valid for this tool.",
    "no_grant": "Denied: no grant allows this call.",
    "denied_by_grant": "Denied: a grant forbids this call.",
    "flow_violation": "Denied: this session holds data that may not flow to this destination.",
    "owner_denied": "Denied: the owner refused this call.",
    "approval_expired": "Denied: the owner did not answer in time.",
    "audit_unavailable": "Denied: the audit log cannot be written, so nothing can run.",
    # Issue 9: boxmaker's own files, whatever the grants say (docs/decisions.md).
    "protected": "Denied: this path holds boxmaker's own files, which no tool may touch.",
}


def test_every_deny_reason_has_exactly_its_sentence_of_the_spec() -> None:
    assert {reason.value for reason in DenyReason} == set(SENTENCES)
    for reason, sentence in SENTENCES.items():
        assert denial_text(DenyReason(reason)) == sentence
        assert denial_text(reason) == sentence  # type: ignore[arg-type]  # a plain str works


@pytest.mark.parametrize("reason", list(DenyReason))
def test_the_owner_reads_each_denial_as_its_sentence_without_denied_and_full_stop(
    reason: DenyReason,
) -> None:
    clause = denial_clause(reason)
    assert f"Denied: {clause}." == denial_text(reason)
    assert denial_clause(DenyReason.NO_GRANT) == "no grant allows this call"


@pytest.mark.parametrize(
    ("session", "ancestor", "found"),
    [
        ("chat", "chat", True),
        ("sub-chat-1", "chat", True),
        ("sub-sub-chat-1-2", "chat", True),
        ("sub-sub-chat-1-2", "sub-chat-1", True),
        ("sub-chat-1", "sub-chat-2", False),
        ("chat-2", "chat", False),
        ("sub-chatter-1", "chat", False),
        ("chat", "sub-chat-1", False),
    ],
)
def test_a_sub_agent_descends_from_its_parents(session: str, ancestor: str, found: bool) -> None:
    assert descends(session, ancestor) is found
