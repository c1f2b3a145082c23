"""What a history says of its turns (`services.loopd.history.SessionLog`): the transcript the
model reads, the calls a crash left open, a turn's steps, last words and failure. Kept as each
record is taken; here checked against the same questions answered by reading every record
again, as loopd did before (issue 11), on the history as written and as loaded back."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    OwnerSaid,
    ToolCalled,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from services.loopd.core.turn_events import SentCall
from services.loopd.history import SessionLog
from services.loopd.history_records import ModelReply, Record, ToolResultRecord
from services.loopd.model import Assistant, Message, ToolCall, ToolResult, User

# -- the questions, answered by reading every record ---------------------------------------


def transcript(records: Sequence[Record], up_to: int) -> list[Message]:
    calls: dict[str, SentCall] = {}
    by_turn: dict[int, list[Message]] = {}
    for record in records:
        if record.turn > up_to:
            continue
        if isinstance(record, TurnEvent) and isinstance(record.event, OwnerSaid):
            by_turn.setdefault(record.turn, []).append(User(record.event.text))
        elif isinstance(record, ModelReply):
            calls.update((call.id, call) for call in record.calls)
            made = tuple(ToolCall(c.model_id, c.name, c.arguments) for c in record.calls)
            by_turn.setdefault(record.turn, []).append(Assistant(record.text, made))
        elif isinstance(record, ToolResultRecord):
            call = calls[record.call]
            result = ToolResult(call.model_id, call.name, record.content)
            by_turn.setdefault(record.turn, []).append(result)
    return [message for turn in sorted(by_turn) for message in by_turn[turn]]


def replies(records: Sequence[Record], turn: int) -> list[ModelReply]:
    return [r for r in records if isinstance(r, ModelReply) and r.turn == turn]


def since_last_reply(records: Sequence[Record], turn: int) -> list[Record]:
    last = max((n for n, r in enumerate(records) if r in replies(records, turn)), default=-1)
    return [r for r in records[last + 1 :] if r.turn == turn]


def open_calls(records: Sequence[Record], turn: int) -> list[tuple[SentCall, bool]]:
    if not replies(records, turn):
        return []
    after = since_last_reply(records, turn)
    answered = {r.call for r in after if isinstance(r, ToolResultRecord)}
    shown = sum(isinstance(r, TurnEvent) and isinstance(r.event, ToolCalled) for r in after)
    calls = replies(records, turn)[-1].calls
    return [(c, n < shown) for n, c in enumerate(calls) if c.id not in answered]


def final_answer(records: Sequence[Record], turn: int) -> tuple[str, bool] | None:
    if not replies(records, turn) or replies(records, turn)[-1].calls:
        return None
    after = since_last_reply(records, turn)
    shown = any(isinstance(r, TurnEvent) and isinstance(r.event, AssistantText) for r in after)
    return replies(records, turn)[-1].text, shown


def failure(records: Sequence[Record], turn: int) -> str | None:
    events = [r.event for r in records if isinstance(r, TurnEvent) and r.turn == turn]
    ends = [e for e in events if isinstance(e, TurnEnd)]
    if not ends or ends[-1].reason is not EndReason.ERROR:
        return None
    errors = [e.message for e in events if isinstance(e, TurnError)]
    return (errors[-1] if errors else "") or "no reason was given"


def says_what_every_record_says(log: SessionLog, records: Sequence[Record]) -> None:
    for turn in range(0, 5):
        assert log.transcript(turn) == transcript(records, turn)
        assert log.steps(turn) == len(replies(records, turn))
        assert log.reply_calls(turn) == (r[-1].calls if (r := replies(records, turn)) else ())
        assert log.last_text(turn) == (r[-1].text if (r := replies(records, turn)) else "")
        assert log.open_calls(turn) == open_calls(records, turn)
        assert log.final_answer(turn) == final_answer(records, turn)
        assert log.failure(turn) == failure(records, turn)


# -- histories -----------------------------------------------------------------------------

TURNS = st.integers(1, 3)
EVENTS = st.one_of(
    st.just(OwnerSaid("a message")),
    st.just(ToolCalled("read_file", '{"path":"/a"}')),
    st.just(AssistantText("words")),
    st.builds(TurnError, st.sampled_from(["", "it broke"])),
    st.builds(TurnEnd, st.sampled_from(list(EndReason))),
)
STEP = st.one_of(
    st.tuples(st.just("event"), TURNS, EVENTS),
    st.tuples(st.just("reply"), TURNS, st.integers(0, 3), st.sampled_from(["", "words"])),
    st.tuples(st.just("result"), TURNS, st.integers(0, 5)),
)


def history(steps: list[tuple[Any, ...]]) -> list[Record]:
    """Records as loopd could write them, crashes included: a result only for a call the
    turn's replies made, each call id once."""
    records: list[Record] = []
    calls: dict[int, list[SentCall]] = {}
    for step in steps:
        match step:
            case ("event", turn, event):
                records.append(TurnEvent("s", turn, len(records) + 1, event))
            case ("reply", turn, n, text):
                made = tuple(
                    SentCall(f"{len(records)}-{k}", f"m{k}", "read_file", '{"path":"/a"}')
                    for k in range(n)
                )
                calls.setdefault(turn, []).extend(made)
                records.append(ModelReply(turn, text, made))
            case ("result", turn, pick) if calls.get(turn):
                call = calls[turn][pick % len(calls[turn])]
                records.append(ToolResultRecord(turn, call.id, "read"))
    return records


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new file for each example: one folder for them all (removing a folder costs ms)."""
    folder = tmp_path_factory.mktemp("histories")
    return (folder / f"{n}.jsonl" for n in itertools.count())


@settings(deadline=None)
@given(st.lists(STEP, max_size=25))
def test_a_history_says_what_reading_every_record_says_as_written_and_as_loaded(
    files: Iterator[Path], steps: list[tuple[Any, ...]]
) -> None:
    records = history(steps)
    path = next(files)
    log = SessionLog("s", path)
    with mock.patch("os.fsync", new=lambda fd: None):  # not what is tested here, and slow
        for record in records:
            log.append(record)
    says_what_every_record_says(log, records)
    says_what_every_record_says(SessionLog.load("s", path), records)


def test_a_turn_s_transcript_leaves_out_the_owner_message_already_sent_for_the_next(
    tmp_path: Path,
) -> None:
    log = SessionLog("s", tmp_path / "s.jsonl")
    call = SentCall("1-0-1", "m1", "read_file", '{"path":"/a"}')
    log.event(1, OwnerSaid("first"))
    log.append(ModelReply(1, "", (call,)))
    log.event(2, OwnerSaid("second, sent while the first runs"))
    log.append(ToolResultRecord(1, call.id, "read"))

    assert log.transcript(1) == [
        User("first"),
        Assistant("", (ToolCall("m1", "read_file", '{"path":"/a"}'),)),
        ToolResult("m1", "read_file", "read"),
    ]
    assert log.transcript(2)[-1] == User("second, sent while the first runs")


def test_after_a_crash_the_open_calls_are_those_without_a_result_and_the_owner_saw_the_first(
    tmp_path: Path,
) -> None:
    log = SessionLog("s", tmp_path / "s.jsonl")
    calls = tuple(SentCall(f"1-0-{n}", f"m{n}", "read_file", "{}") for n in (1, 2, 3))
    log.event(1, OwnerSaid("go"))
    log.append(ModelReply(1, "", calls))
    log.event(1, ToolCalled("read_file", "{}"))
    log.append(ToolResultRecord(1, calls[0].id, "read"))
    log.event(1, ToolCalled("read_file", "{}"))  # the crash came before its result

    loaded = SessionLog.load("s", log.path)
    assert loaded.open_calls(1) == [(calls[1], True), (calls[2], False)]
    assert (loaded.steps(1), loaded.final_answer(1), loaded.failure(1)) == (1, None, None)
