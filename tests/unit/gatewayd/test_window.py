"""gatewayd's window of a session's turn events (SPEC §10.4, §12), in process: what it holds,
when it knows it may lag behind loopd, what it drops, and which sessions it keeps. The
service tests prove the stream and the long poll over real sockets; these, the rules."""

from __future__ import annotations

import pytest

from bxcore.wire import codec as wire
from bxcore.wire.messages import OwnerSaid, TurnEvent
from services.gatewayd import window as window_module
from services.gatewayd.held import held
from services.gatewayd.window import ENTRY, Took, Window, Windows


def said(seq: int, text: str = "hi", session: str = "s") -> TurnEvent:
    return TurnEvent(session, 1, seq, OwnerSaid(text))


def seqs(events: tuple[TurnEvent, ...]) -> list[int]:
    return [event.seq for event in events]


def test_an_empty_window_covers_nothing_and_begins_at_the_first_event_it_takes() -> None:
    window = Window("s")
    assert (window.last, window.covers(0), window.stale) == (None, False, True)
    assert window.after(0, 1_000_000) == ((), False)
    assert window.take(said(7)) is Took.HELD
    assert (window.base, window.last) == (6, 7)
    assert window.covers(6) and not window.covers(5)


def test_events_are_held_in_order_an_old_one_is_ignored_and_a_gap_makes_it_stale() -> None:
    window = Window("s")
    window.start(0, [said(1), said(2)], complete=True)
    assert not window.stale and window.last == 2
    assert window.take(said(2)) is Took.OLD  # a repeat from the stream
    assert window.take(said(3)) is Took.HELD
    assert window.take(said(5)) is Took.GAP  # 4 was missed: loopd holds what we lack
    assert (window.stale, window.gaps, window.last) == (True, 1, 3)
    assert seqs(window.after(0, 1_000_000)[0]) == [1, 2, 3]


def test_start_with_events_that_are_not_contiguous_leaves_it_empty_and_stale() -> None:
    window = Window("s")
    window.start(0, [said(1), said(3)], complete=True)
    assert (window.base, window.last, window.stale) == (None, None, True)


def test_a_start_loopd_could_not_finish_is_stale_until_read_again_whole() -> None:
    window = Window("s")
    window.start(10, [said(11)], complete=False)
    assert window.stale and window.covers(10) and not window.covers(9)
    window.start(10, [said(11), said(12)], complete=True)
    assert not window.stale and window.last == 12


def test_after_gives_what_fits_in_the_budget_but_always_one_and_says_when_more_is_held() -> None:
    window = Window("s")
    window.start(0, [said(n) for n in range(1, 6)], complete=True)
    one = len(wire.encode(said(1)))
    assert window.after(2, 1_000_000) == (tuple(said(n) for n in (3, 4, 5)), False)
    assert seqs(window.after(0, 2 * one)[0]) == [1, 2]
    assert window.after(0, 2 * one)[1] is True
    assert seqs(window.after(0, 1)[0]) == [1]  # never nothing while something is held
    assert window.after(5, 1_000_000) == ((), False)


def test_past_its_count_the_oldest_events_are_dropped_and_the_base_moves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(window_module, "MAX_EVENTS", 3)
    window = Window("s")
    window.start(0, [said(n) for n in range(1, 6)], complete=True)
    assert (window.base, window.last) == (2, 5)
    assert not window.covers(1)  # who asks from before the window asks loopd
    assert seqs(window.after(2, 1_000_000)[0]) == [3, 4, 5]


def test_past_its_bytes_the_oldest_are_dropped_but_the_newest_is_always_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = said(1, "x" * 1000)
    monkeypatch.setattr(window_module, "MAX_BYTES", held(big) + ENTRY + 10)
    window = Window("s")
    window.take(big)
    window.take(said(2, "y" * 1000))
    assert (window.base, window.last) == (1, 2)
    huge = said(3, "z" * 5000)  # alone larger than the budget: still held
    assert window.take(huge) is Took.HELD
    assert window.after(0, 1_000_000) == ((huge,), False)


def test_windows_keep_the_sessions_used_lately_and_all_turn_stale_after_a_reconnect() -> None:
    windows = Windows(limit=2)
    a, b = windows.get("a"), windows.get("b")
    for window in (a, b):
        window.start(0, [said(1, session=window.session)], complete=True)
    assert windows.get("a") is a  # used now: b is the least recent
    windows.get("c")
    assert windows.get("a") is a
    assert windows.get("b") is not b  # dropped; a fresh window knows nothing
    windows.all_stale()
    assert a.stale


def test_a_window_counts_what_its_events_take_in_memory_not_their_json() -> None:
    window = Window("s")
    cut = said(1, "x" * 10_000 + "[… 5 more characters cut]")  # "…": 2 bytes a character
    window.take(cut)
    assert window.held == held(cut) + ENTRY
    assert window.held > 2 * len(wire.encode(cut))


def test_past_the_budget_of_all_windows_the_least_recently_used_others_are_dropped() -> None:
    one = held(said(1, "x" * 1000)) + ENTRY
    windows = Windows(limit=10, budget=3 * one)
    for session in "abc":
        window = windows.get(session)
        window.take(said(1, "x" * 1000, session))
        windows.trim(window)
    assert windows.held == 3 * one
    windows.get("a")  # used now: b is the least recent
    d = windows.get("d")
    d.take(said(1, "x" * 1000, "d"))
    windows.trim(d)
    assert windows.held == 3 * one
    assert windows.get("b").last is None  # dropped; a fresh window knows nothing
    assert windows.get("d") is d


def test_one_window_over_the_budget_of_all_is_kept_alone() -> None:
    windows = Windows(limit=10, budget=100)
    other = windows.get("other")
    other.take(said(1, session="other"))
    window = windows.get("s")
    window.take(said(1, "y" * 5000))
    windows.trim(window)
    assert windows.get("s") is window and windows.held == window.held
