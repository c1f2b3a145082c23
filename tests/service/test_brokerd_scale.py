"""A ledger of 100,000 records through the real brokerd (issue 10; the million lives in
`python -m bench scale`): brokerd answers `ping` while it loads, says `loading`, holds calls
until it is loaded, reads the whole file only once, and its memory does not grow with it.

The ledger is built with the project's own record builder (`bench.ledger_builder`), so it
is what brokerd would have written, with no index beside it: a ledger of before issue 10.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]

from bench.ledger_builder import build
from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.wire.messages import Done, LedgerHealth, LedgerQuery, LedgerStatus, Ping, Pong
from tests.support.brokerd import args, call
from tests.support.daemons import init_home, running, start

RECORDS = 100_000
MB = 1024 * 1024


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def note(home: Path, name: str = "note") -> str:
    return args(path=f"{home}/workspace/{name}.txt", content="x")


def records_read(output: str) -> list[int]:
    return [int(n) for n in re.findall(r"\((\d+) records read to start", output)]


def test_a_big_ledger_is_read_once_while_ping_is_answered_and_memory_stays_flat(
    short_tmp: Path,
) -> None:
    empty = init_home(short_tmp / "e")
    with running("brokerd", empty) as brokerd:
        assert isinstance(call(brokerd, "s", "c0", "write_file", note(empty)), Done)
        idle = rss(brokerd.pid)

    home = init_home(short_tmp / "h")
    ledger = home / "audit" / "ledger.jsonl"
    head, size = build(ledger, RECORDS)
    # The owner's witness is a pipe: brokerd's load waits on it, after reading the ledger,
    # until the test writes the head the owner saw. Meanwhile it must answer.
    seen = home / "witness" / "gatewayd.json"
    seen.parent.mkdir(mode=0o700, exist_ok=True)
    os.mkfifo(seen, 0o600)
    brokerd = start("brokerd", home)
    try:
        pong = brokerd.ask(Ping("p1"), timeout=15.0)
        assert isinstance(pong, Pong)
        assert report.read(Home(home))["ledger"]["state"] == "loading"
        said = brokerd.ask(LedgerQuery("q1"), socket="admin", timeout=5.0)  # not held back
        assert isinstance(said, LedgerStatus) and said.state is LedgerHealth.LOADING, said
        answers: list[Any] = []
        asking = threading.Thread(
            target=lambda: answers.append(call(brokerd, "s", "c1", "write_file", note(home)))
        )
        asking.start()
        asking.join(0.5)
        assert not answers  # held until the ledger is loaded: nothing is decided before
        with open(seen, "w") as pipe:
            pipe.write(json.dumps({"seq": head.seq, "hash": head.hash, "size": size}))
        asking.join(20.0)
        assert len(answers) == 1 and isinstance(answers[0], Done), answers
        brokerd.wait_ready()
        assert report.read(Home(home))["ledger"]["state"] == "ok"
        said = brokerd.ask(LedgerQuery("q2"), socket="admin")
        assert isinstance(said, LedgerStatus) and said.state is LedgerHealth.OK
        assert said.seq > head.seq and said.problem is None and said.free
        assert records_read(brokerd.output()) == [RECORDS]
        assert rss(brokerd.pid) - idle < 20 * MB
    finally:
        brokerd.stop()
    seen.unlink()

    with running("brokerd", home) as again:
        assert records_read(again.output()) == [RECORDS, 0]  # the index held every call
        assert rss(again.pid) - idle < 20 * MB
        assert isinstance(call(again, "s", "c2", "write_file", note(home, "again")), Done)
