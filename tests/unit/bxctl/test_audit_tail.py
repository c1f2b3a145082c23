"""`bxctl audit tail` with brokerd not running (SPEC §13): the newest records read from the
file itself, backwards, as many as asked, and only the session's with `--session`."""

from __future__ import annotations

import json
from pathlib import Path

from bench.ledger_builder import build
from bxcore.home.layout import Home
from tests.support.cli import bxctl


def test_tail_reads_the_newest_records_of_the_file_when_brokerd_is_not_running(
    short_tmp: Path,
) -> None:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    build(Home(home).ledger, 2_000)  # calls of sessions chat-0 .. chat-4, 200 calls a session

    def tail(*args: str) -> list[dict[str, object]]:
        done = bxctl(home, "audit", "tail", "--json", *args)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    newest = tail("-n", "3")
    assert [record["seq"] for record in newest] == [1_998, 1_999, 2_000]
    older = tail("-n", "2", "--session", "chat-3")
    assert [record["session"] for record in older] == ["chat-3", "chat-3"]
    assert all(int(str(record["seq"])) < 1_600 for record in older)
