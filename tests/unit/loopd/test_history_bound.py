"""What a session's history keeps in memory (issue 28): the turns the model is still sent
(`SessionLog.transcript`: the newest whole turns that fit in `context` characters, the turn
that runs always whole), nothing older, however long the file grows; the same as written and
as loaded back, a restart included."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.wire.messages import AssistantText, EndReason, OwnerSaid, ToolCalled, TurnEnd
from services.loopd.core.turn_events import SentCall
from services.loopd.history import SessionLog
from services.loopd.history_kept import WEIGHT_OF_LOG, WEIGHT_OF_TURN, chars, held
from services.loopd.history_records import ModelReply, ToolResultRecord
from services.loopd.model import Assistant, Message, ToolCall, ToolResult, User

# A turn: the owner's words, then steps of (calls, each result's length), then the last words.
Turn = tuple[int, list[tuple[int, int]], int]


def take_turn(log: SessionLog, turn: int, shape: Turn, *, end: bool = True) -> list[Message]:
    """Write one turn as loopd does; the messages the model has had of it."""
    said, steps, words = shape
    log.event(turn, OwnerSaid("o" * said))
    messages: list[Message] = [User("o" * said)]
    for step, (calls, result) in enumerate(steps):
        made = tuple(
            SentCall(f"{turn}-{step}-{n}", f"m{n}", "read_file", "{}") for n in range(calls)
        )
        log.append(ModelReply(turn, "", made))
        messages.append(Assistant("", tuple(ToolCall(c.model_id, c.name, "{}") for c in made)))
        for call in made:
            log.event(turn, ToolCalled("read_file", "{}"))
            log.append(ToolResultRecord(turn, call.id, "r" * result))
            messages.append(ToolResult(call.model_id, "read_file", "r" * result))
    if end:
        log.append(ModelReply(turn, "w" * words, ()))
        log.event(turn, AssistantText("w" * words))
        log.event(turn, TurnEnd(EndReason.DONE))
        messages.append(Assistant("w" * words))
    return messages


def window(turns: list[list[Message]], context: int) -> list[Message]:
    """What the model is sent for the last of `turns`, worked out from all of them."""
    chosen = [turns[-1]]
    size = sum(map(chars, turns[-1]))
    for earlier in reversed(turns[:-1]):
        size += sum(map(chars, earlier))
        if size > context:
            break
        chosen.append(earlier)
    return [message for turn in reversed(chosen) for message in turn]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("bounded")
    return (folder / f"{n}.jsonl" for n in itertools.count())


TURN = st.tuples(
    st.integers(0, 60),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80)), max_size=3),
    st.integers(0, 120),
)


@settings(deadline=None, max_examples=60)
@given(st.lists(TURN, min_size=1, max_size=12), st.integers(1, 400))
def test_each_turn_is_sent_the_newest_earlier_turns_that_fit_and_nothing_older_is_kept(
    files: Iterator[Path], shapes: list[Turn], context: int
) -> None:
    path = next(files)
    log = SessionLog("s", path, context)
    had: list[list[Message]] = []
    with mock.patch("os.fsync", new=lambda fd: None):  # not what is tested here, and slow
        for turn, shape in enumerate(shapes, 1):
            had.append(take_turn(log, turn, shape, end=turn < len(shapes)))
            assert log.transcript(turn) == window(had, context)
    loaded = SessionLog.load("s", path, context)
    newest = len(shapes)
    assert loaded.transcript(newest) == log.transcript(newest) == window(had, context)
    assert loaded.unfinished() == log.unfinished() == [newest]
    assert loaded.owner_text == log.owner_text and newest in log.owner_text
    sent = sum(map(held, window(had, context)))
    running = sum(map(held, had[-1]))
    assert log.weight <= max(sent, running) + WEIGHT_OF_TURN * newest + WEIGHT_OF_LOG


def test_a_long_history_holds_its_context_s_worth_and_its_figures_stay_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "long.jsonl"
    log = SessionLog("long", path, 50_000)
    with mock.patch("os.fsync", new=lambda fd: None):
        for turn in range(1, 241):
            take_turn(log, turn, (10, [(1, 100)], 10_000))
    assert path.stat().st_size > 240 * 20_000  # each answer is there twice
    for each in (log, SessionLog.load("long", path, 50_000)):
        assert each.turns == 240 and each.next_turn == 241 and each.unfinished() == []
        assert each.seq == 240 * 4 and each.size == path.stat().st_size
        assert sorted(each.owner_text) == list(range(237, 241))  # 4 turns of 10,120 chars
        assert each.transcript(240)[0] == User("o" * 10)
        assert len(each.transcript(240)) == 4 * 4
        assert each.weight < 50_000 + 5 * WEIGHT_OF_TURN + WEIGHT_OF_LOG
        assert each.ended(1) and each.ended(240) and not each.ended(241)


def test_an_open_turn_keeps_what_it_is_sent_while_newer_messages_wait(tmp_path: Path) -> None:
    log = SessionLog("s", tmp_path / "s.jsonl", 100)
    for turn in range(1, 4):
        take_turn(log, turn, (10, [], 30))
    running = take_turn(log, 4, (10, [(1, 20)], 0), end=False)
    before = log.transcript(4)
    for turn in range(5, 9):  # the owner goes on typing while turn 4 runs
        log.event(turn, OwnerSaid("n" * 40))
    assert log.transcript(4) == before
    assert before[-len(running) :] == running and before[0] == User("o" * 10)
    assert log.unfinished() == [4, 5, 6, 7, 8]
    assert log.transcript(5)[-1] == User("n" * 40)


def test_a_turn_longer_than_the_context_is_sent_whole_and_alone(tmp_path: Path) -> None:
    log = SessionLog("s", tmp_path / "s.jsonl", 100)
    take_turn(log, 1, (10, [], 10))
    messages = take_turn(log, 2, (10, [(2, 300)], 0), end=False)
    assert log.transcript(2) == messages
    assert log.owner_text == {2: "o" * 10}


def test_a_turn_cut_off_in_a_long_history_resumes_from_what_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog("s", path, 1_000)
    for turn in range(1, 60):
        take_turn(log, turn, (10, [(1, 50)], 200))
    take_turn(log, 60, (10, [(2, 50)], 0), end=False)
    call = SentCall("60-1-0", "again", "read_file", "{}")
    log.append(ModelReply(60, "", (call,)))  # a crash before the call's result
    loaded = SessionLog.load("s", path, 1_000)
    assert loaded.unfinished() == [60]
    assert loaded.open_calls(60) == [(call, False)] == log.open_calls(60)
    assert loaded.transcript(60) == log.transcript(60)
    assert loaded.steps(60) == 2 and loaded.next_turn == 61
