"""The console's live stream, in process (SPEC §12.3): event ids, what a page that reconnects
with `Last-Event-ID` is given (the events it missed, or a `reset`), and what is dropped past
the kept count or bytes. The stream over HTTP is tested in tests/e2e/test_console_http.py.
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    ApprovalSettled,
    ApprovalState,
    AssistantText,
    EndReason,
    LedgerHead,
    OwnerSaid,
    Ping,
    TurnEnd,
    TurnEvent,
)
from services.gatewayd.console.feed import KEEP_BYTES, KEEP_EVENTS, SLOT, Feed, Item
from services.gatewayd.held import held

HASH = "0" * 64


def fill(feed: Feed, count: int, size: int = 10) -> None:
    for n in range(count):
        feed.publish("turn", str(n % 10).encode() * size)


def numbers(items: list[Item]) -> list[int]:
    return [item.n for item in items]


# --- ids ----------------------------------------------------------------------------------------


def test_ids_are_the_boot_and_a_count_from_one() -> None:
    feed = Feed()
    assert feed.last == 0
    fill(feed, 3)
    assert feed.last == 3
    assert [feed.event_id(n) for n in (1, 2, 3)] == [f"{feed.boot}-{n}" for n in (1, 2, 3)]
    assert len(feed.boot) == 8 and "-" not in feed.boot
    assert numbers(feed.after(0)) == [1, 2, 3]


def test_every_start_of_gatewayd_has_a_boot_of_its_own() -> None:
    assert len({Feed().boot for _ in range(50)}) == 50


def test_turn_approval_and_ledger_messages_are_kept_as_the_wire_writes_them() -> None:
    feed = Feed()
    turn = TurnEvent("s1", 1, 1, OwnerSaid("hi <b>there</b>"))
    settled = ApprovalSettled("a1", "s1", ApprovalState.APPROVED)
    head = LedgerHead(7, HASH, 900)
    for message in (turn, settled, head):
        feed.take(message)
    assert [(item.name, item.data) for item in feed.after(0)] == [
        ("turn", wire.encode(turn)),
        ("approval_settled", wire.encode(settled)),
        ("ledger", wire.encode(head)),
    ]
    assert all(b"\n" not in item.data for item in feed.after(0))  # one SSE data line each


def test_messages_no_page_listens_for_are_not_kept_and_take_no_id() -> None:
    feed = Feed()
    feed.take(Ping("p"))
    feed.take("not a message")
    assert (feed.last, feed.after(0)) == (0, [])


def test_the_repr_says_what_is_kept_and_nothing_of_it() -> None:
    feed = Feed()
    feed.take(TurnEvent("s1", 1, 1, AssistantText("a secret answer")))
    assert repr(feed) == f"Feed({feed.boot}, 1 kept, last 1)"


# --- resuming -----------------------------------------------------------------------------------


def test_a_page_without_last_event_id_starts_at_the_newest_event() -> None:
    feed = Feed()
    assert feed.resume_from(None) == 0
    fill(feed, 5)
    assert feed.resume_from(None) == 5
    assert feed.after(5) == []


def test_a_page_of_this_boot_resumes_after_its_last_event_and_gets_exactly_what_it_missed() -> None:
    feed = Feed()
    fill(feed, 5)
    for seen in range(6):
        start = feed.resume_from(feed.event_id(seen))
        assert start == seen
        assert numbers(feed.after(seen)) == list(range(seen + 1, 6))


def test_an_id_of_another_boot_is_a_reset() -> None:
    feed, other = Feed(), Feed()
    fill(feed, 3)
    fill(other, 3)
    assert other.boot != feed.boot
    assert feed.resume_from(other.event_id(2)) is None
    assert feed.resume_from("zzzzzzzz-2") is None


@pytest.mark.parametrize(
    "id_",
    [
        "",
        "-",
        "2",
        "{boot}",
        "{boot}-",
        "{boot}--1",
        "{boot}-+1",
        "{boot}-1.0",
        "{boot}- 1",
        "{boot}-1 ",
        "{boot}-0x1",
        "{boot}-1-1",
        "{boot}-²",  # a digit to str.isdigit, and no number to int()
        "{boot}-١",  # an Arabic-Indic one: a number to int(), and no id this feed gave
        "{boot}-①",
        "{boot}-" + "1" * 19,
        "{boot}-" + "9" * 5000,
        " {boot}-1",
        "{BOOT}-1",
    ],
)
def test_a_malformed_id_is_a_reset(id_: str) -> None:
    feed = Feed()
    feed.boot = "0a1b2c3d"  # letters in it, so the upper-case one is another boot
    fill(feed, 3)
    assert feed.resume_from(id_.format(boot=feed.boot, BOOT=feed.boot.upper())) is None


def test_an_id_from_the_future_is_a_reset() -> None:
    feed = Feed()
    fill(feed, 3)
    assert feed.resume_from(feed.event_id(4)) is None
    assert Feed().resume_from(f"{feed.boot}-1") is None


def test_an_id_older_than_what_is_kept_is_a_reset_and_the_oldest_kept_is_still_a_resume() -> None:
    feed = Feed(keep=3)
    fill(feed, 10)  # 8, 9 and 10 are kept
    assert numbers(feed.after(0)) == [8, 9, 10]
    assert feed.resume_from(feed.event_id(7)) == 7  # missed 8, 9, 10: all still here
    assert numbers(feed.after(7)) == [8, 9, 10]
    for gone in (0, 1, 6):
        assert feed.resume_from(feed.event_id(gone)) is None


# --- after() ------------------------------------------------------------------------------------


def test_after_gives_the_kept_events_after_n_oldest_first() -> None:
    feed = Feed()
    fill(feed, 4)
    assert numbers(feed.after(0)) == [1, 2, 3, 4]
    assert numbers(feed.after(2)) == [3, 4]
    assert feed.after(4) == []
    assert feed.after(99) == []


def test_after_an_event_no_longer_kept_starts_at_the_oldest_one_so_the_gap_shows() -> None:
    feed = Feed(keep=2)
    fill(feed, 5)
    items = feed.after(1)
    assert numbers(items) == [4, 5]
    assert items[0].n != 2  # the stream sees it fell behind and sends `reset`


# --- dropping -----------------------------------------------------------------------------------


def test_the_defaults_keep_4096_events_and_8_mib() -> None:
    assert (KEEP_EVENTS, KEEP_BYTES) == (4096, 8 * 1024 * 1024)


def test_past_the_kept_count_the_oldest_events_are_dropped() -> None:
    feed = Feed(keep=100)
    fill(feed, 250)
    assert numbers(feed.after(0)) == list(range(151, 251))
    assert feed.last == 250


def cost(item: Item) -> int:
    """What an item takes in memory, as the feed counts it."""
    return held(item) + SLOT


def test_past_the_kept_bytes_the_oldest_events_are_dropped() -> None:
    one = cost(Item(1, "turn", b"x" * 10))  # ~140 bytes: 10 of them, and the item around them
    feed = Feed(keep=1000, keep_bytes=10 * one)
    fill(feed, 12, size=10)  # 12 of them published: the two oldest go
    assert numbers(feed.after(0)) == list(range(3, 13))
    assert sum(cost(item) for item in feed.after(0)) == 10 * one
    feed.publish("turn", b"x" * (10 + one))  # as much as two more: two more go
    assert numbers(feed.after(0)) == [*range(5, 13), 13]
    assert feed.resume_from(feed.event_id(3)) is None
    assert feed.resume_from(feed.event_id(4)) == 4


def test_one_event_larger_than_the_kept_bytes_is_still_kept_alone() -> None:
    feed = Feed(keep=1000, keep_bytes=100)
    fill(feed, 3)
    feed.publish("turn", b"x" * 500)
    assert numbers(feed.after(0)) == [4]
    feed.publish("turn", b"y")  # and it goes as soon as a newer one comes
    assert numbers(feed.after(0)) == [5]


@given(
    keep=st.integers(1, 20),
    keep_bytes=st.integers(1, 2000),
    sizes=st.lists(st.integers(0, 60), max_size=60),
    seen=st.integers(0, 70),
)
def test_a_resume_is_either_exactly_what_was_missed_or_a_reset(
    keep: int, keep_bytes: int, sizes: list[int], seen: int
) -> None:
    feed = Feed(keep=keep, keep_bytes=keep_bytes)
    for size in sizes:
        feed.publish("turn", b"x" * size)
    kept = feed.after(0)
    assert 0 < len(kept) <= keep if sizes else kept == []
    assert numbers(kept) == list(range(feed.last - len(kept) + 1, feed.last + 1))
    if len(kept) > 1:
        assert sum(cost(item) for item in kept) <= keep_bytes
    start = feed.resume_from(feed.event_id(seen))
    if start is None:
        gone = bool(kept) and seen < kept[0].n - 1
        assert seen > feed.last or gone or (not kept and seen != feed.last)
    else:
        assert start == seen
        assert numbers(feed.after(seen)) == list(range(seen + 1, feed.last + 1))


# --- waiting ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_wait_returns_at_once_when_there_is_something_newer() -> None:
    feed = Feed()
    fill(feed, 2)
    with anyio.fail_after(1):
        await feed.wait(1, timeout=30)


@pytest.mark.anyio
async def test_wait_returns_when_an_event_comes_and_wakes_every_waiting_page() -> None:
    feed = Feed()
    woken: list[int] = []

    async def page(number: int) -> None:
        await feed.wait(0, timeout=30)
        woken.append(number)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            for number in range(3):
                tasks.start_soon(page, number)
            await anyio.wait_all_tasks_blocked()
            assert woken == []
            feed.take(TurnEvent("s1", 1, 1, TurnEnd(EndReason.DONE)))
    assert sorted(woken) == [0, 1, 2]


@pytest.mark.anyio
async def test_wait_gives_up_after_its_timeout() -> None:
    feed = Feed()
    started = anyio.current_time()
    await feed.wait(0, timeout=0.05)
    assert 0.04 <= anyio.current_time() - started < 2
    assert feed.last == 0
