"""Session labels on disk: never lowered, atomic, and inherited by sub-agents (§6.2–6.3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bxcore.ids import parent_of_sub
from bxcore.labels import SESSION_DEFAULT, DataClass, Label
from services.brokerd.state import StateError, StateStore

PUBLIC = Label(DataClass.PUBLIC, False)
PRIVATE = Label(DataClass.PRIVATE, False)
PRIVATE_UNTRUSTED = Label(DataClass.PRIVATE, True)
SECRET = Label(DataClass.SECRET, False)
SECRET_UNTRUSTED = Label(DataClass.SECRET, True)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state" / "broker")


def test_a_plain_session_with_no_file_is_private_and_trusted_and_creates_nothing(
    store: StateStore,
) -> None:
    assert store.read("chat-1") == SESSION_DEFAULT == PRIVATE
    assert not store.folder.exists()
    assert not store.folder.parent.exists()


def test_raising_writes_the_join_and_a_later_read_sees_it(store: StateStore) -> None:
    assert store.raise_("chat-1", PRIVATE, PUBLIC.join(Label(DataClass.PUBLIC, True))) == (
        PRIVATE_UNTRUSTED
    )
    assert store.read("chat-1") == PRIVATE_UNTRUSTED
    assert (store.folder / "chat-1.json").read_bytes() == b'{"class": "private", "untrusted": true}'


def test_a_label_is_never_lowered_even_from_a_stale_current(store: StateStore) -> None:
    store.raise_("chat-1", PRIVATE, SECRET)
    assert store.raise_("chat-1", PRIVATE, PUBLIC) == SECRET
    assert store.raise_("chat-1", PUBLIC, Label(DataClass.PUBLIC, True)) == SECRET_UNTRUSTED
    assert store.read("chat-1") == SECRET_UNTRUSTED


def test_raising_to_the_same_label_does_not_rewrite_the_file(store: StateStore) -> None:
    store.raise_("chat-1", PRIVATE, SECRET)
    before = os.stat(store.folder / "chat-1.json").st_ino
    store.raise_("chat-1", SECRET, PUBLIC)
    assert os.stat(store.folder / "chat-1.json").st_ino == before


def test_raising_a_default_session_by_nothing_still_writes_its_file(store: StateStore) -> None:
    assert store.raise_("chat-2", PRIVATE, PUBLIC) == PRIVATE
    assert (store.folder / "chat-2.json").exists()
    assert not any(p.name.endswith(".tmp") for p in store.folder.iterdir())


# The three examples of SPEC §6.3.


def test_a_new_subagent_copies_the_parents_untrusted_flag(store: StateStore) -> None:
    store.raise_("mm-thread", PRIVATE, PRIVATE_UNTRUSTED)
    assert store.read("sub-mm-thread-3") == PRIVATE_UNTRUSTED
    assert (store.folder / "sub-mm-thread-3.json").exists()


def test_a_nested_subagent_copies_through_a_missing_middle_child(store: StateStore) -> None:
    store.raise_("mm-thread", PRIVATE, SECRET_UNTRUSTED)
    assert store.read("sub-sub-mm-thread-1-2") == SECRET_UNTRUSTED
    assert (store.folder / "sub-mm-thread-1.json").exists()


def test_a_plain_session_still_creates_nothing_on_read(store: StateStore) -> None:
    assert store.read("chat-1") == PRIVATE
    assert not store.folder.exists()


def test_a_later_read_of_a_subagent_hits_its_own_file(store: StateStore) -> None:
    store.raise_("mm-thread", PRIVATE, PRIVATE_UNTRUSTED)
    store.read("sub-mm-thread-3")
    store.raise_("mm-thread", PRIVATE_UNTRUSTED, SECRET)
    assert store.read("sub-mm-thread-3") == PRIVATE_UNTRUSTED
    assert store.read("sub-mm-thread-4") == SECRET_UNTRUSTED


def test_a_subagent_of_a_parent_with_no_file_is_the_default(store: StateStore) -> None:
    assert store.read("sub-chat-9-1") == PRIVATE


@pytest.mark.parametrize(
    "session, parent",
    [
        ("sub-mm-thread-3", "mm-thread"),
        ("sub-sub-mm-thread-1-2", "sub-mm-thread-1"),
        ("sub-a-10", "a"),
        ("chat-1", None),
        ("sub-x", None),
        ("sub-x-", None),
        ("sub--1", None),
        ("sub-x-1a", None),
        ("sub-x-١", None),
        ("sub-.x-1", None),
        ("sub-", None),
    ],
)
def test_the_parent_of_a_subagent_id(session: str, parent: str | None) -> None:
    assert parent_of_sub(session) == parent


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[]",
        b'{"class":"private"}',
        b'{"class":"top","untrusted":false}',
        b'{"class":"private","untrusted":0}',
        b'{"class":"private","untrusted":false,"x":1}',
        b"\xff\xfe",
        b"[" * 4000,
        b" " * 5000,
    ],
)
def test_a_damaged_state_file_is_named_not_trusted(store: StateStore, content: bytes) -> None:
    store.folder.mkdir(parents=True)
    (store.folder / "chat-1.json").write_bytes(content)
    with pytest.raises(StateError, match=r"chat-1\.json"):
        store.read("chat-1")


def test_an_invalid_session_id_is_refused_before_any_path_is_built(store: StateStore) -> None:
    for bad in ("../x", "a/b", ".hidden", "", "x" * 129):
        with pytest.raises(StateError):
            store.read(bad)


def test_peeking_at_a_subagent_inherits_without_creating_its_file(store: StateStore) -> None:
    store.raise_("mm-thread", PRIVATE, SECRET_UNTRUSTED)
    assert store.peek("sub-mm-thread-3") == SECRET_UNTRUSTED
    assert not (store.folder / "sub-mm-thread-3.json").exists()
    store.raise_("mm-thread", SECRET_UNTRUSTED, SECRET_UNTRUSTED)
    assert store.read("sub-mm-thread-3") == SECRET_UNTRUSTED
    assert (store.folder / "sub-mm-thread-3.json").exists()


def test_peeking_at_a_plain_session_creates_nothing(store: StateStore) -> None:
    assert store.peek("chat-1") == PRIVATE
    assert not store.folder.exists()
