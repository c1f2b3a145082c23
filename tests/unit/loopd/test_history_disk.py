"""A history on a full disk (issue 28): a record is written whole or not at all, so no line is
ever torn and glued to the next; a turn's number is never used twice, however the file was
damaged; and a turn whose history cannot be written ends with the disk's sentence and its
`turn_end`, both shown at once and written as soon as there is room."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from bxcore.client import Client
from bxcore.config.file import Config
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Done,
    EndReason,
    OwnerSaid,
    OwnerWords,
    ToolCalled,
    ToolRequest,
    ToolResponse,
    Tools,
    ToolsQuery,
    TurnEnd,
    TurnError,
    TurnEvent,
    WordsKept,
)
from services.loopd.history import SessionLog
from services.loopd.history_records import ModelReply, ToolResultRecord, decode, encode
from services.loopd.history_write import HistoryUnwritable
from services.loopd.model import Assistant, Message, Offer, Reply, ToolCall, ToolResult, User
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns
from tests.support.history import Recorded

READ = '{"path":"/w/a.md"}'


class Disk:
    """Stands in for `os.write` on a disk with `room` bytes left (None: room enough): a write
    longer than the room writes what fits, as Linux does, and the next one fails ENOSPC."""

    def __init__(self, room: int | None = None) -> None:
        self.room = room

    def __call__(self, fd: int, data: bytes) -> int:
        if self.room is None:
            return os.write(fd, data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = os.write(fd, data[: self.room])
        self.room -= written
        return written


def written(path: Path, disk: Disk) -> SessionLog:
    log = Recorded("s", path, write=disk)
    log.event(1, OwnerSaid("first"))
    log.append(ModelReply(1, "one", ()))
    log.event(1, TurnEnd(EndReason.DONE))
    return log


def every_line_reads(path: Path) -> list[Any]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [decode(line) for line in data.splitlines()]


@pytest.mark.parametrize("room", [0, 1, 30])
def test_a_record_the_disk_has_no_room_for_leaves_the_file_as_it_was_and_the_next_is_whole(
    tmp_path: Path, room: int
) -> None:
    path = tmp_path / "s.jsonl"
    disk = Disk()
    log = written(path, disk)
    before = path.read_bytes()
    disk.room = room
    with pytest.raises(HistoryUnwritable) as raised:
        log.event(2, OwnerSaid("second"))
    assert raised.value.room
    assert raised.value.why.startswith(f"the disk holding {tmp_path} is full (")
    assert path.read_bytes() == before
    assert len(log.taken) == 3 and log.size == len(before) and not log.owing
    disk.room = None
    log.event(2, OwnerSaid("second"))
    assert every_line_reads(path) == log.taken
    assert Recorded.load("s", path).taken == log.taken


def test_a_write_cut_short_is_carried_on_until_the_record_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"

    def seven_at_a_time(fd: int, data: bytes) -> int:
        return os.write(fd, data[:7])

    log = written(path, Disk())
    log.write = seven_at_a_time
    log.append(ModelReply(2, "a longer answer than seven bytes", ()))
    assert every_line_reads(path) == log.taken
    assert log.size == path.stat().st_size


def test_what_a_failed_write_left_past_the_last_whole_line_is_cut_before_the_next_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    log = written(path, Disk())
    before = path.read_bytes()
    with open(path, "ab") as file:  # a part a write left, that its cut could not take back
        file.write(encode(ModelReply(1, "torn", ()))[:20])
    record = log.event(2, OwnerSaid("second"))
    assert path.read_bytes() == before + encode(record) + b"\n"


def test_an_end_the_disk_kept_out_is_remembered_at_once_and_written_before_the_next_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    disk = Disk()
    log = written(path, disk)
    log.event(2, OwnerSaid("second"))
    before = path.read_bytes()
    disk.room = 0
    error = log.event(2, TurnError("the disk is full"), owe=True)
    end = log.event(2, TurnEnd(EndReason.ERROR), owe=True)
    assert path.read_bytes() == before
    assert log.owing and log.unfinished() == [] and log.taken[-2:] == [error, end]
    assert (error.seq, end.seq) == (4, 5)
    with pytest.raises(HistoryUnwritable):  # still no room: neither is written
        log.event(3, OwnerSaid("third"))
    assert path.read_bytes() == before and log.next_turn == 3
    disk.room = None
    log.event(3, OwnerSaid("third"))
    assert not log.owing
    assert every_line_reads(path) == log.taken
    loaded = Recorded.load("s", path)
    assert loaded.taken == log.taken and loaded.ended(1) and loaded.ended(2)


def glued(path: Path) -> None:
    """What a full disk left before issue 28: turn 12's answer torn, its owner message glued
    onto it, then the turn's end (the merged line cannot be read)."""
    log = Recorded("big", path)
    for turn in range(1, 12):
        log.event(turn, OwnerSaid(f"message {turn}"))
        log.event(turn, TurnEnd(EndReason.DONE))
    torn = encode(ModelReply(11, "an answer cut by the full disk", ()))[:25]
    said = encode(TurnEvent("big", 12, log.seq + 1, OwnerSaid("message 12")))
    ended = encode(TurnEvent("big", 12, log.seq + 2, TurnEnd(EndReason.DONE)))
    with open(path, "ab") as file:
        file.write(torn + said + b"\n" + ended + b"\n")


def test_the_next_turn_is_past_every_turn_the_history_holds_even_one_in_a_line_that_is_lost(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.jsonl"
    glued(path)
    loaded = Recorded.load("big", path)
    assert max(loaded.owner_text) == 11 and loaded.ended(12)  # the message itself is lost
    assert loaded.next_turn == 13
    record = loaded.event(loaded.next_turn, OwnerSaid("message 13"))
    assert record.seq == 25  # past the lost line's event too
    assert loaded.unfinished() == [13]


def test_a_message_never_takes_the_number_of_a_turn_that_has_ended(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with open(path, "wb") as file:  # turn 2's owner message was lost; its end was not
        for seq, (turn, event) in enumerate(
            [(1, OwnerSaid("one")), (1, TurnEnd(EndReason.DONE)), (2, TurnEnd(EndReason.DONE))],
            1,
        ):
            file.write(encode(TurnEvent("s", turn, seq, event)) + b"\n")
    loaded = Recorded.load("s", path)
    assert loaded.turns == 1 and loaded.next_turn == 3


# -- a turn on a full disk ---------------------------------------------------------------------


class Model:
    """Calls read_file once, then says what it read."""

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        self.requests.append(list(messages))
        if isinstance(messages[-1], ToolResult):
            return Reply(f"read: {messages[-1].content}")
        return Reply("", (ToolCall("m1", "read_file", READ),))

    async def aclose(self) -> None:
        pass


class Broker:
    """brokerd: every read_file is done; the disk fills while it runs (`fills`)."""

    def __init__(self, fills: Disk | None = None) -> None:
        self.fills = fills

    async def ask(self, message: Any, **_: Any) -> Any:
        if isinstance(message, ToolsQuery):
            return Tools(message.id, ())
        if isinstance(message, OwnerWords):
            return WordsKept(message.id, message.session, message.turn, True)
        assert isinstance(message, ToolRequest)
        if self.fills is not None:
            self.fills.room, self.fills = 0, None
        return ToolResponse(message.id, Done(True, "the text", Label(DataClass.PUBLIC, False)))

    def close(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_turn_whose_history_fills_the_disk_ends_with_the_disk_error_then_its_end(
    tmp_path: Path,
) -> None:
    sessions = Sessions(Home(tmp_path))
    disk = Disk()
    model, broker, published = Model(), Broker(disk), list[TurnEvent]()
    turns = Turns(
        Config(), model, lambda: cast(Client, broker), sessions.held, published.append,
        sessions.exists,
    )  # fmt: skip
    path = Home(tmp_path).session_history("s")
    with sessions.held("s") as session:
        session.write = disk
        session.event(1, OwnerSaid("read it"))
        assert await turns.run(session, 1) == ""
        shown = [event.event for event in published]
        assert shown[0] == ToolCalled("read_file", READ)  # its result found the disk full
        assert isinstance(shown[1], TurnError) and shown[2] == TurnEnd(EndReason.ERROR)
        said = shown[1].message
        assert said.startswith(f"the disk holding {tmp_path / 'sessions'} is full (")
        assert said.endswith("; the turn stopped. Free some space and send the message again.")
        assert session.unfinished() == [] and session.owing
        on_disk = every_line_reads(path)  # nothing torn; the end not written yet
        assert isinstance(on_disk[-1], TurnEvent) and on_disk[-1].event == shown[0]

        disk.room = None  # space is back: the next message writes what was owed first
        session.event(session.next_turn, OwnerSaid("again"))
        assert await turns.run(session, 2) == "read: the text"
    records = every_line_reads(path)
    assert records == Recorded.load("s", path).taken
    assert [r.event for r in records if isinstance(r, TurnEvent) and r.turn == 1] == [
        OwnerSaid("read it"),
        *shown,
    ]
    stopped = f"Error: this call's result could not be kept: {said}"
    assert ToolResultRecord(1, "1-0-1", stopped) in records
    reply = Assistant("", (ToolCall("m1", "read_file", READ),))
    assert model.requests[1] == [
        User("read it"),
        reply,
        ToolResult("m1", "read_file", stopped),
        User("again"),
    ]
