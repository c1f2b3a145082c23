"""A history line is never larger than what can be read back, and a line that cannot be read
costs only itself: a load cuts a torn last line and nothing else (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bxcore.wire import codec as wire
from bxcore.wire.messages import EndReason, OwnerSaid, TurnEnd
from services.loopd.core.turn_events import SentCall
from services.loopd.history import SessionLog
from services.loopd.history_records import MAX_LINE, ModelReply, RecordTooLarge, encode
from services.loopd.history_scan import read_events
from tests.support.history import Recorded


def written(path: Path) -> SessionLog:
    log = Recorded("s", path)
    log.event(1, OwnerSaid("first"))
    log.append(ModelReply(1, "one", ()))
    log.event(1, TurnEnd(EndReason.DONE))
    return log


def test_a_reply_too_large_to_read_back_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = written(path)
    before = path.read_bytes()
    huge = ModelReply(2, "x" * MAX_LINE, (SentCall("2-0-1", "c", "write_file", "{}"),))
    with pytest.raises(RecordTooLarge, match="the model's answer is too large to keep"):
        log.append(huge)
    assert path.read_bytes() == before
    assert len(log.taken) == 3


def test_the_largest_line_appended_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = written(path)
    empty = len(encode(ModelReply(2, "", ())))
    log.append(ModelReply(2, "y" * (MAX_LINE - empty), ()))
    assert MAX_LINE == wire.MAX_MESSAGE
    assert Recorded.load("s", path).taken == log.taken


def test_a_bad_line_in_the_middle_is_passed_over_and_every_later_line_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    written(path)
    with open(path, "ab") as file:
        file.write(b'{"type":"model_reply","turn":2,"text":"' + b"z" * (MAX_LINE + 10) + b'"}\n')
        file.write(b"not json at all\n")
    later = Recorded.load("s", path)
    later.event(2, OwnerSaid("second"))
    size = path.stat().st_size
    loaded = Recorded.load("s", path)
    assert path.stat().st_size == size  # nothing cut
    assert loaded.owner_text == {1: "first", 2: "second"}
    assert [e.event for e, _ in read_events(path)][-1] == OwnerSaid("second")


def test_only_a_torn_last_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = written(path)
    whole = path.read_bytes()
    with open(path, "ab") as file:
        file.write(b"garbage\n" + encode(ModelReply(2, "torn", ()))[:-3])
    loaded = Recorded.load("s", path)
    assert path.read_bytes() == whole + b"garbage\n"
    assert loaded.taken == log.taken and loaded.size == len(whole) + 8
