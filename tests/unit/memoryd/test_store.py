"""The memory store (SPEC §11): notes keep their label, a recall carries the join of every note
it searched, hostile queries are plain words, and a (session, call) acts once (I8)."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bxcore.labels import CLEAN, DataClass, Label
from services.memoryd import recall as recall_module
from services.memoryd import store as store_module
from services.memoryd.recall import (
    INDENT,
    MAX_OUTPUT,
    Answer,
    match_expression,
    render_note,
    render_recall,
    store_label,
)
from services.memoryd.store import RECALL_LIMIT, CallReused, Store, StoreError

PUBLIC = Label(DataClass.PUBLIC, False)
PRIVATE = Label(DataClass.PRIVATE, False)
PUBLIC_UNTRUSTED = Label(DataClass.PUBLIC, True)
SECRET = Label(DataClass.SECRET, False)
SECRET_UNTRUSTED = Label(DataClass.SECRET, True)

NOW = 1_780_000_000_000


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "memory" / "memory.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    opened = Store.open(path)
    try:
        yield opened
    finally:
        opened.close()


_calls = iter(range(1, 10**9))


def note(store: Store, text: str, label: Label = PRIVATE, session: str = "chat-1") -> int:
    call = f"call_{next(_calls)}"
    answer = store.note(session, call, f"note:{call}", text, label, NOW)
    assert answer.ok and answer.label == CLEAN
    return int(answer.output.removeprefix("noted #"))


# --- note, recall, forget ---------------------------------------------------------------------


def test_a_note_is_answered_with_its_id_and_a_clean_label(store: Store) -> None:
    first = store.note("chat-1", "c1", "a1", "buy milk", PRIVATE, NOW)
    second = store.note("chat-1", "c2", "a2", "buy eggs", PRIVATE, NOW)
    assert first == Answer(True, "noted #1", CLEAN)
    assert second == Answer(True, "noted #2", CLEAN)


def test_a_note_keeps_its_session_call_text_label_and_time(store: Store) -> None:
    store.note("chat-7", "call_9", "args", "the door code is 4711", SECRET_UNTRUSTED, NOW + 5)
    [kept] = store.notes()
    assert (kept.id, kept.session, kept.call) == (1, "chat-7", "call_9")
    assert kept.text == "the door code is 4711"
    assert kept.label == SECRET_UNTRUSTED
    assert kept.created == "2026-05-28T20:26:40.005Z"


def test_recall_finds_a_note_by_one_of_its_words(store: Store) -> None:
    note(store, "apples and oranges")
    note(store, "the bike needs new tyres")
    assert store.recall("oranges") == Answer(True, "#1 apples and oranges", PRIVATE)


def test_recall_matches_word_forms_and_ignores_case_and_accents(store: Store) -> None:
    note(store, "Apples from the Café")
    assert store.recall("apple").output == "#1 Apples from the Café"
    assert store.recall("CAFE").output == "#1 Apples from the Café"


def test_recall_finds_notes_holding_any_word_best_first(store: Store) -> None:
    note(store, "milk")
    note(store, "bread")
    note(store, "milk and bread")
    note(store, "nothing related")
    answer = store.recall("milk bread")
    assert answer.output.splitlines()[0] == "#3 milk and bread"
    assert sorted(answer.output.splitlines()) == ["#1 milk", "#2 bread", "#3 milk and bread"]


def test_recall_with_no_match_says_so_with_the_label_of_the_notes_it_searched(
    store: Store,
) -> None:
    note(store, "apples", SECRET)
    assert store.recall("pears") == Answer(True, "no notes match", SECRET)


def test_recall_on_an_empty_store_says_no_notes_match(store: Store) -> None:
    assert store.recall("") == Answer(True, "no notes match", CLEAN)
    assert store.recall("anything") == Answer(True, "no notes match", CLEAN)


def test_recall_returns_at_most_ten_notes(store: Store) -> None:
    for n in range(25):
        note(store, f"reminder number {n}")
    assert len(store.recall("reminder").output.splitlines()) == RECALL_LIMIT


@pytest.mark.parametrize("query", ["", "   ", "!?", "***", '""', "_", "\x00\x00"])
def test_a_query_without_words_gives_the_most_recent_notes_newest_first(
    store: Store, query: str
) -> None:
    for n in range(12):
        note(store, f"note {n}")
    lines = store.recall(query).output.splitlines()
    assert lines == [f"#{n} note {n - 1}" for n in range(12, 2, -1)]


def test_every_session_sees_every_note(store: Store) -> None:
    note(store, "shared fact", session="chat-1")
    assert store.recall("fact").output == "#1 shared fact"


def test_forget_deletes_the_note_and_says_so(store: Store) -> None:
    note(store, "old plan")
    answer = store.forget("chat-1", "f1", "forget-1", 1, PRIVATE, NOW)
    assert answer == Answer(True, "forgot #1", CLEAN)
    assert store.notes() == []
    assert store.recall("plan") == Answer(True, "no notes match", CLEAN)  # the store is empty


@pytest.mark.parametrize("note_id", [2, 0, -1, 2**63 - 1, -(2**63)])
def test_forget_of_a_missing_id_is_not_ok_and_changes_nothing(store: Store, note_id: int) -> None:
    note(store, "keep me")
    answer = store.forget("chat-1", "f1", "forget", note_id, PRIVATE, NOW)
    assert answer == Answer(False, f"no note #{note_id}", CLEAN)
    assert [n.text for n in store.notes()] == ["keep me"]


@pytest.mark.parametrize(
    "caller, note_label, forgotten",
    [
        (PUBLIC, PUBLIC, True),
        (PUBLIC, PUBLIC_UNTRUSTED, True),
        (PUBLIC_UNTRUSTED, PRIVATE, False),
        (PUBLIC, SECRET, False),
        (PRIVATE, PRIVATE, True),
        (PRIVATE, SECRET, False),
        (PRIVATE, SECRET_UNTRUSTED, False),
        (SECRET, PRIVATE, True),
        (SECRET_UNTRUSTED, SECRET, True),
    ],
)
def test_forget_reaches_only_a_note_whose_class_the_caller_holds_and_says_no_note_otherwise(
    store: Store, caller: Label, note_label: Label, forgotten: bool
) -> None:
    note_id = note(store, "the note", note_label)
    absent = store.forget("chat-2", "f0", "forget-absent", note_id + 1, caller, NOW)
    answer = store.forget("chat-2", "f1", "forget", note_id, caller, NOW)
    if forgotten:
        assert answer == Answer(True, f"forgot #{note_id}", CLEAN)
        assert store.notes() == []
    else:  # word for word what an absent id gets: no id above the caller's class shows
        assert answer == Answer(False, f"no note #{note_id}", CLEAN)
        assert absent == Answer(False, f"no note #{note_id + 1}", CLEAN)
        assert [n.text for n in store.notes()] == ["the note"]


def test_a_forgotten_id_is_never_given_again(store: Store) -> None:
    note(store, "one")
    store.forget("chat-1", "f1", "forget", 1, PRIVATE, NOW)
    assert note(store, "two") == 2


# --- the recall label -------------------------------------------------------------------------


def test_recalling_a_secret_note_carries_a_secret_label(store: Store) -> None:
    note(store, "the launch code", SECRET)
    assert store.recall("launch").label == SECRET


def test_every_recall_carries_the_join_of_every_note_in_the_store(store: Store) -> None:
    note(store, "tea public", PUBLIC)
    note(store, "tea untrusted", PUBLIC_UNTRUSTED)
    note(store, "tea private", PRIVATE)
    note(store, "coffee secret", SECRET)
    for query in ("tea", "coffee", "tea public", "nothing like it", ""):
        assert store.recall(query).label == SECRET_UNTRUSTED, query


def test_a_recall_that_matches_nothing_still_carries_a_secret_notes_label(store: Store) -> None:
    note(store, "the vault code is 4711", SECRET)
    note(store, "groceries", PUBLIC)
    for query in ("4711", "4712", "zebra", "!!!"):
        assert store.recall(query).label == SECRET, query
    assert store.recall("zebra").output == "no notes match"


def test_the_recall_label_falls_back_once_the_note_that_raised_it_is_forgotten(
    store: Store,
) -> None:
    note(store, "public words", PUBLIC)
    secret = note(store, "secret words", SECRET)
    assert store.recall("public").label == SECRET
    store.forget("chat-1", "f-secret", "forget", secret, SECRET, NOW)
    assert store.recall("public").label == PUBLIC
    assert store.searched_label() == PUBLIC


def test_an_empty_store_is_searched_as_public_and_trusted(store: Store) -> None:
    assert store.searched_label() == CLEAN
    assert store.recall("anything").label == CLEAN


@pytest.mark.parametrize(
    ("secret", "private", "untrusted", "label"),
    [
        (False, False, False, CLEAN),
        (False, False, True, PUBLIC_UNTRUSTED),
        (False, True, False, PRIVATE),
        (True, False, False, SECRET),
        (True, True, False, SECRET),
        (True, True, True, SECRET_UNTRUSTED),
        (False, True, True, Label(DataClass.PRIVATE, True)),
    ],
)
def test_the_store_label_is_the_highest_class_present_and_any_untrusted(
    secret: bool, private: bool, untrusted: bool, label: Label
) -> None:
    assert store_label(secret, private, untrusted) == label


def test_the_searched_label_uses_the_label_indexes_not_a_scan(store: Store) -> None:
    conn = sqlite3.connect(store.path)
    try:
        plan = conn.execute("EXPLAIN QUERY PLAN " + store_module._STORE_LABEL).fetchall()
    finally:
        conn.close()
    details = [row[3] for row in plan]
    assert not any(detail.startswith("SCAN notes") for detail in details), details
    assert sum("USING COVERING INDEX" in detail for detail in details) == 3, details


def test_a_store_made_before_the_label_indexes_gains_them_when_opened(path: Path) -> None:
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX notes_class")
    conn.execute("DROP INDEX notes_untrusted")
    conn.commit()
    conn.close()
    reopened = Store.open(path)
    try:
        note(reopened, "kept", SECRET)
        assert reopened.recall("other").label == SECRET
    finally:
        reopened.close()
    conn = sqlite3.connect(path)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert {"notes_class", "notes_untrusted"} <= names


def test_render_recall_joins_the_searched_label_with_every_note_given() -> None:
    assert render_recall([], SECRET) == Answer(True, "no notes match", SECRET)
    assert render_recall([(1, "a", PUBLIC_UNTRUSTED)], SECRET).label == SECRET_UNTRUSTED
    assert render_recall([(1, "a", SECRET)], CLEAN).label == SECRET  # never below a note


# --- hostile queries and text -----------------------------------------------------------------

HOSTILE = [
    '"',
    '"unbalanced',
    "*",
    "a*",
    "NEAR(",
    "NEAR(a b, 2)",
    "AND OR NOT",
    "NOT apple",
    "text: apple",
    "notes_fts: x",
    "{text}: x",
    "^apple",
    "(((",
    ")",
    "-apple",
    "+",
    "\x00",
    "apple\x00pear",
    "x" * 10_000,
    "apple " * 5_000,
    "日本語のノート",
    "🍎🍐",
    "e\u0301",
    "\u202e\u200b",
    "'; DROP TABLE notes; --",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_a_hostile_query_never_raises_and_changes_nothing(store: Store, query: str) -> None:
    note(store, "apple pear")
    answer = store.recall(query)
    assert answer.ok
    assert [n.text for n in store.notes()] == ["apple pear"]


@pytest.mark.parametrize("query", ["AND OR NOT", "NEAR(apple", '"apple', "apple*"])
def test_fts5_syntax_in_a_query_is_read_as_plain_words(store: Store, query: str) -> None:
    note(store, "apple")
    note(store, "and or not near")
    expected = {
        "AND OR NOT": "#2 and or not near",
        "NEAR(apple": None,
        '"apple': "#1 apple",
        "apple*": "#1 apple",
    }[query]
    lines = store.recall(query).output.splitlines()
    if expected is None:
        assert sorted(lines) == ["#1 apple", "#2 and or not near"]
    else:
        assert lines == [expected]


def test_a_prefix_star_is_not_a_wildcard(store: Store) -> None:
    note(store, "applesauce")
    assert store.recall("app*").output == "no notes match"


def test_a_query_expression_quotes_each_word() -> None:
    assert match_expression('NEAR(a "b" c') == '"NEAR" OR "a" OR "b" OR "c"'
    assert match_expression("a a A") == '"a" OR "A"'
    assert match_expression("!!! ...") is None
    assert match_expression("w " * 1000) == '"w"'
    many = " ".join(f"w{n}" for n in range(1000))
    expression = match_expression(many)
    assert expression is not None and expression.count(" OR ") == recall_module.MAX_QUERY_WORDS - 1


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=200))
def test_no_query_at_all_makes_recall_raise(store: Store, query: str) -> None:
    answer = store.recall(query)
    assert answer.ok


@pytest.mark.parametrize(
    "text", ["a\x00b", "日本語 🍎", "x" * 100_000, '"quoted" * NEAR( AND', "line\r\nbreak"]
)
def test_any_text_is_kept_exactly(store: Store, text: str) -> None:
    note(store, text)
    assert store.notes()[0].text == text


def test_a_note_with_line_breaks_cannot_pose_as_another_note(store: Store) -> None:
    note(store, "first line\n#99 forged note\r\nthird")
    assert store.recall("first").output == (
        f"#1 first line\n{INDENT}#99 forged note\n{INDENT}third"
    )


def test_each_recalled_note_starts_its_own_line() -> None:
    rendered = render_recall(
        [(3, "a\nb", PUBLIC), (1, "c\u2028d", PUBLIC), (2, "", PUBLIC)], PUBLIC
    )
    starts = [line for line in rendered.output.split("\n") if not line.startswith(INDENT)]
    assert starts == ["#3 a", "#1 c", "#2 "]


def test_render_note_keeps_a_single_line_as_it_is() -> None:
    assert render_note(7, "plain words") == "#7 plain words"


def test_a_recall_larger_than_the_output_limit_is_cut_and_says_so_keeping_every_label() -> None:
    big = "y" * (MAX_OUTPUT // 3)
    notes = [(n, big, SECRET if n == 10 else PUBLIC) for n in range(1, 11)]
    answer = render_recall(notes, PUBLIC)
    assert len(answer.output.encode("utf-8")) <= MAX_OUTPUT + 100
    assert answer.output.endswith("[output cut at 1048576 bytes; 7 more notes not shown]")
    assert answer.label == SECRET  # the join of every note selected, shown or not


def test_a_cut_never_splits_a_character() -> None:
    answer = render_recall([(1, "é" * MAX_OUTPUT, PUBLIC)], PUBLIC)
    answer.output.encode("utf-8")  # no lone surrogate, no broken character
    assert answer.output.endswith("[output cut at 1048576 bytes; 0 more notes not shown]")


# --- once (I8) --------------------------------------------------------------------------------


def test_a_note_sent_again_by_the_same_call_is_kept_once_and_answered_the_same(
    store: Store,
) -> None:
    first = store.note("chat-1", "call_1", "args", "once", PRIVATE, NOW)
    again = store.note("chat-1", "call_1", "args", "once", PRIVATE, NOW + 1000)
    assert again == first
    assert len(store.notes()) == 1


def test_a_forget_sent_again_answers_as_the_first_time(store: Store) -> None:
    note(store, "gone soon")
    first = store.forget("chat-1", "f1", "args", 1, PRIVATE, NOW)
    again = store.forget("chat-1", "f1", "args", 1, PRIVATE, NOW)
    assert again == first == Answer(True, "forgot #1", CLEAN)


def test_the_same_call_id_in_another_session_is_another_call(store: Store) -> None:
    store.note("chat-1", "call_1", "args", "one", PRIVATE, NOW)
    store.note("chat-2", "call_1", "args", "two", PRIVATE, NOW)
    assert [n.text for n in store.notes()] == ["one", "two"]


def test_a_call_that_comes_again_with_other_arguments_is_refused(store: Store) -> None:
    store.note("chat-1", "call_1", "args-1", "one", PRIVATE, NOW)
    with pytest.raises(CallReused, match="call call_1 of session chat-1 already ran"):
        store.note("chat-1", "call_1", "args-2", "two", PRIVATE, NOW)
    with pytest.raises(CallReused):
        store.forget("chat-1", "call_1", "args-3", 1, PRIVATE, NOW)
    assert [n.text for n in store.notes()] == ["one"]


def test_the_remembered_answer_is_kept_with_its_arguments(store: Store) -> None:
    assert store.remembered("chat-1", "call_1") is None
    store.note("chat-1", "call_1", "args", "one", PRIVATE, NOW)
    remembered = store.remembered("chat-1", "call_1")
    assert remembered is not None
    assert remembered.arguments == "args"
    assert remembered.answer == Answer(True, "noted #1", CLEAN)


def test_the_once_table_survives_a_restart(path: Path) -> None:
    first = Store.open(path)
    first.note("chat-1", "call_1", "args", "one", PRIVATE, NOW)
    first.close()
    second = Store.open(path)
    try:
        assert second.note("chat-1", "call_1", "args", "one", PRIVATE, NOW).output == "noted #1"
        assert len(second.notes()) == 1
    finally:
        second.close()


# --- the file ---------------------------------------------------------------------------------


def test_the_store_is_in_wal_mode(store: Store, path: Path) -> None:
    with sqlite3.connect(path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_folder_is_0700_and_the_files_are_0600(store: Store, path: Path) -> None:
    note(store, "something")
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    files = sorted(p.name for p in path.parent.iterdir())
    assert "memory.sqlite3" in files and "memory.sqlite3-wal" in files
    for name in files:
        assert stat.S_IMODE(os.stat(path.parent / name).st_mode) == 0o600, name


def test_an_existing_folder_and_file_open_to_others_are_made_private(path: Path) -> None:
    path.parent.mkdir(mode=0o755)
    os.chmod(path.parent, 0o755)
    path.touch()
    os.chmod(path, 0o644)
    Store.open(path).close()
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_file_that_is_not_a_database_is_a_clear_error(path: Path) -> None:
    path.parent.mkdir(mode=0o700)
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"cannot open the memory store .*not a database"):
        Store.open(path)


def test_a_symlink_in_place_of_the_file_is_refused(path: Path, tmp_path: Path) -> None:
    path.parent.mkdir(mode=0o700)
    (tmp_path / "elsewhere").write_bytes(b"")
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="cannot open the memory store"):
        Store.open(path)


def test_a_store_of_another_schema_version_is_refused(path: Path) -> None:
    Store.open(path).close()
    with sqlite3.connect(path) as other:
        other.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="schema version 99"):
        Store.open(path)


def test_a_locked_database_fails_after_the_busy_timeout_instead_of_hanging(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "BUSY_S", 0.1)
    opened = Store.open(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError, match="could not keep the note: database is locked"):
            opened.note("chat-1", "c1", "args", "blocked", PRIVATE, NOW)
        other.execute("ROLLBACK")
        assert opened.note("chat-1", "c1", "args", "free", PRIVATE, NOW).ok
        assert [n.text for n in opened.notes()] == ["free"]
    finally:
        other.close()
        opened.close()


def test_an_operation_that_runs_too_long_is_interrupted_and_the_store_serves_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(300):
        note(store, f"common word {n}")
    monkeypatch.setattr(store_module, "QUERY_S", -1.0)  # every budget is already spent
    with pytest.raises(StoreError, match="took too long"):
        store.recall("common")
    with pytest.raises(StoreError, match="took too long"):
        store.note("chat-1", "c-late", "args", "late", PRIVATE, NOW)
    monkeypatch.setattr(store_module, "QUERY_S", 2.0)
    assert len(store.recall("common").output.splitlines()) == RECALL_LIMIT
    assert store.remembered("chat-1", "c-late") is None
    assert len(store.notes()) == 300


def test_the_repr_says_where_and_whether_it_is_open(path: Path) -> None:
    opened = Store.open(path)
    assert repr(opened) == f"Store({path}, open)"
    opened.close()
    assert repr(opened) == f"Store({path}, closed)"


def test_the_owner_browses_the_newest_notes_and_searches_them(store: Store) -> None:
    store.note("chat-1", "c1", "a1", "buy milk", PRIVATE, NOW)
    store.note("chat-2", "c2", "a2", "the door code is 4711", SECRET_UNTRUSTED, NOW + 1)
    store.note("chat-1", "c3", "a3", "buy eggs", PRIVATE, NOW + 2)
    newest, total = store.browse(None, 2)
    assert total == 3 and [n.text for n in newest] == ["buy eggs", "the door code is 4711"]
    found, total = store.browse("door", 10)
    assert total == 3
    assert [(n.text, n.session, n.label) for n in found] == [
        ("the door code is 4711", "chat-2", SECRET_UNTRUSTED)
    ]
    assert store.browse("nothing-like-it", 10)[0] == []
