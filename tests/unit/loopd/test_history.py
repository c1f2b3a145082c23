"""A history's outline (`services.loopd.history_scan.outline`), what loopd's start reads of every
history: read from a few lines, it says what loading the whole file says, and a file it cannot
read so is loaded whole (and cut where it is torn)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from bxcore.wire.messages import AssistantText, EndReason, OwnerSaid, ToolCalled, TurnEnd
from services.loopd.core.turn_events import SentCall
from services.loopd.history import Outline, SessionLog
from services.loopd.history_records import ModelReply, Spawned, ToolResultRecord
from services.loopd.history_scan import outline


def turn(log: SessionLog, *, ended: bool = True, spawn: str | None = None) -> None:
    n = log.turns + 1
    log.event(n, OwnerSaid(f'turn {n}, with "quotes" and a \\n and {{"type":"spawned",}}'))
    call = SentCall(f"{n}-0-1", "m1", "spawn" if spawn else "read_file", '{"path":"/a"}')
    log.append(ModelReply(n, "", (call,)))
    log.event(n, ToolCalled(call.name, call.arguments))
    if spawn is not None:
        log.append(Spawned(n, call.id, spawn))
    log.append(ToolResultRecord(n, call.id, '"event":{"kind":"turn_end"} in a result'))
    log.event(n, AssistantText("done"))
    if ended:
        log.event(n, TurnEnd(EndReason.DONE))


def nothing(log: SessionLog) -> None:
    log.path.write_bytes(b"")


def ended_turns(log: SessionLog) -> None:
    turn(log)
    turn(log)


def cut_off(log: SessionLog) -> None:
    turn(log)
    turn(log, ended=False)


def a_message_waiting_behind_a_turn(log: SessionLog) -> None:
    turn(log, ended=False)
    log.event(2, OwnerSaid("the next one, sent while the first runs"))
    log.event(1, TurnEnd(EndReason.DONE))


def spawns(log: SessionLog) -> None:
    turn(log, spawn="sub-s-1")
    turn(log, ended=False, spawn="sub-s-2")


def torn(log: SessionLog) -> None:
    turn(log)
    with open(log.path, "ab") as file:
        file.write(b'{"type":"turn_event","session":"s","turn":2,"seq":9,"event":{"kind":"own')


def torn_after_an_owner_message(log: SessionLog) -> None:
    turn(log)
    log.event(2, OwnerSaid("cut"))
    with open(log.path, "ab") as file:
        file.write(b'{"type":"model_reply","turn":2,"te')


def strange_line(log: SessionLog) -> None:
    turn(log)
    with open(log.path, "ab") as file:
        file.write(b"not a record\n")
    turn(log, ended=False)


@pytest.mark.parametrize(
    "write",
    [
        nothing,
        ended_turns,
        cut_off,
        a_message_waiting_behind_a_turn,
        spawns,
        torn,
        torn_after_an_owner_message,
        strange_line,
    ],
)
def test_an_outline_says_what_loading_the_whole_history_says(
    tmp_path: Path, write: Callable[[SessionLog], None]
) -> None:
    path = tmp_path / "s.jsonl"
    write(SessionLog("s", path))

    found = outline("s", path)

    loaded = SessionLog.load("s", path).outline()
    assert replace(found, updated="") == replace(loaded, updated="")  # a cut file is newer


def test_an_outline_of_a_torn_history_cuts_it_where_a_load_would(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog("s", path)
    turn(log)
    whole = path.read_bytes()
    with open(path, "ab") as file:
        file.write(b'{"type":"turn_event","se')

    assert outline("s", path).turns == 1
    assert path.read_bytes() == whole


def test_an_outline_gives_the_turns_the_unfinished_the_children_and_the_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog("s", path)
    spawns(log)

    found = outline("s", path)

    assert found == Outline(2, 2, ("sub-s-1", "sub-s-2"), found.updated)
    assert found.updated == SessionLog.load("s", path).updated != ""
    assert outline("s", tmp_path / "none.jsonl") == Outline(0, 0, (), "")
