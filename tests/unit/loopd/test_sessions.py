"""The sessions loopd knows (`services.loopd.sessions`), on a home in a temporary folder: a
history is loaded when needed and let go when idle, the session list still answers for every
session, pages are read from the files, and the start-up scan keeps nothing loaded."""

from __future__ import annotations

from pathlib import Path

from bxcore.clock import rfc3339
from bxcore.home.layout import Home
from bxcore.wire.messages import AssistantText, EndReason, OwnerSaid, TurnEnd
from services.loopd.history import SessionLog
from services.loopd.history_records import Spawned
from services.loopd.sessions import Sessions, Summary
from tests.support.history import Recorded


def a_turn(log: SessionLog, text: str = "hello", *, ended: bool = True) -> None:
    turn = log.turns + 1
    log.event(turn, OwnerSaid(text))
    log.event(turn, AssistantText(f"you said {text}"))
    if ended:
        log.event(turn, TurnEnd(EndReason.DONE))


def written(home: Home, session: str, turns: int = 1, *, last_ended: bool = True) -> SessionLog:
    """A history on disk, written as loopd writes it."""
    log = Recorded(session, home.session_history(session))
    for n in range(turns):
        a_turn(log, f"turn {n + 1}", ended=last_ended or n + 1 < turns)
    return log


def test_a_session_let_go_is_still_listed_from_its_summary(tmp_path: Path) -> None:
    home = Home(tmp_path)
    sessions = Sessions(home, max_loaded=1)
    first = sessions.get("first")
    a_turn(first)
    a_turn(first)
    sessions.get("second")  # the cache keeps one: the first is let go

    assert sessions.names() == ["first", "second"]
    assert sessions.summary("first") == Summary(2, first.updated)
    again = sessions.get("first")
    assert again is not first and again.turns == 2 and again.updated


def test_a_held_history_is_the_one_copy_every_caller_gets(tmp_path: Path) -> None:
    home = Home(tmp_path)
    sessions = Sessions(home, max_loaded=1, max_bytes=1)
    with sessions.held("busy") as busy:
        a_turn(busy)
        for n in range(5):
            a_turn(sessions.get(f"other-{n}"))
        assert sessions.get("busy") is busy
        assert sessions.hold("busy") is busy  # a parent's turn and the child's own
        sessions.release("busy")
    assert sessions.get("busy") is not busy  # once idle, it went: over both bounds


def test_a_page_is_read_from_the_file_as_the_events_were_written(tmp_path: Path) -> None:
    home = Home(tmp_path)
    log = written(home, "long", turns=30)
    sessions = Sessions(home, max_loaded=0)

    events, more = sessions.page("long", 0, 1_000_000)
    assert (events, more) == (log.events(), False)
    assert sessions.page("long", 80, 1_000_000) == (log.events(80), False)

    pages: list[list[object]] = []
    after, more = 0, True
    while more:
        page, more = sessions.page("long", after, 2_000)
        assert page, "a page holds at least one event"
        pages.append(list(page))
        after = page[-1].seq
    assert len(pages) > 1 and [e for p in pages for e in p] == log.events()


def test_a_page_of_a_session_that_does_not_exist_is_empty_and_creates_nothing(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    sessions = Sessions(home)

    assert sessions.page("nobody", 0, 1000) == ([], False)
    assert not sessions.exists("nobody") and sessions.names() == []
    assert not home.session_history("nobody").exists()


def test_a_page_stops_at_a_torn_line_without_cutting_the_file(tmp_path: Path) -> None:
    home = Home(tmp_path)
    log = written(home, "torn", turns=2)
    path = home.session_history("torn")
    with open(path, "ab") as file:
        file.write(b'{"type":"turn_event","session":"torn","tu')
    size = path.stat().st_size

    assert Sessions(home).page("torn", 0, 1_000_000) == (log.events(), False)
    assert path.stat().st_size == size


def test_the_scan_keeps_nothing_loaded_and_names_the_cut_off_turns_a_parent_does_not_resume(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    written(home, "done", turns=3)
    written(home, "cut", turns=2, last_ended=False)
    parent = written(home, "parent", turns=1, last_ended=False)
    parent.append(Spawned(1, "1-0-1", "sub-parent-1"))
    written(home, "sub-parent-1", turns=1, last_ended=False)
    (home.sessions / ".hidden.jsonl").write_bytes(b"")  # not a session id: passed over

    sessions = Sessions(home)
    assert sessions.scan() == [("cut", 2), ("parent", 1)]
    assert "Cache(0 of" in repr(sessions)
    assert sessions.names() == ["cut", "done", "parent", "sub-parent-1"]
    assert [sessions.summary(n).turns for n in sessions.names()] == [2, 3, 1, 1]
    mtime = home.session_history("done").stat().st_mtime_ns // 1_000_000
    assert sessions.summary("done").updated == rfc3339(mtime)


def test_the_scan_cuts_a_torn_last_line_as_a_load_does(tmp_path: Path) -> None:
    home = Home(tmp_path)
    written(home, "torn", turns=1)
    path = home.session_history("torn")
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"type":"turn_event","ses')

    assert Sessions(home).scan() == []
    assert path.read_bytes() == whole


def test_a_history_on_disk_exists_and_so_does_one_loaded_with_records(tmp_path: Path) -> None:
    home = Home(tmp_path)
    written(home, "on-disk")
    sessions = Sessions(home)
    empty = sessions.get("loaded-empty")

    assert sessions.exists("on-disk")
    assert not sessions.exists("loaded-empty")
    a_turn(empty)
    assert sessions.exists("loaded-empty")
