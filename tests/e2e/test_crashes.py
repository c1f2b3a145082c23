"""Each daemon of a box started with `bxctl up`, killed with SIGKILL while a call is in flight:
the supervisor starts it again, `bxctl status` counts the restart, the call is answered once
and its side effect happens once, and `bxctl down` leaves nothing behind (SPEC §7 I8, §10.6,
§13, §16 "Faults"). Each test has its own box: it kills part of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from bxcore.home.layout import SERVICES
from tests.fakes.model_server import Answer
from tests.support.box import processes_of, wait_until
from tests.support.brokerd import args, ledger_records, write_grant
from tests.support.daemons import tool_owned
from tests.support.e2e import UpBox, box_up, results_read
from tests.support.owner import Reader

UNKNOWN = "Error: the outcome of this call is unknown after a restart"
RAN = "[exit status 0]"


def shell_folder(home: Path) -> Path:
    """The folder the shell grant names: beside the home (no tool reaches into the home)."""
    return home.parent / "box"


def grant_a_shell_folder(home: Path) -> None:
    folder = shell_folder(home)
    folder.mkdir()
    tool_owned(folder)  # the shell writes there
    write_grant(home, "box-shell", tool="shell", mode="allow", path=str(folder))


@pytest.fixture
def box() -> Iterator[UpBox]:
    with box_up(before_up=grant_a_shell_folder) as box:
        yield box


def records_of(box: UpBox, session: str, kind: str) -> list[dict[str, Any]]:
    return [
        r for r in ledger_records(box.home) if r.get("session") == session and r["kind"] == kind
    ]


def kill(box: UpBox, name: str, pid: int) -> dict[str, Any]:
    """SIGKILL `name` (process `pid`), as a crash; its status once the supervisor runs it
    again."""
    os.kill(pid, signal.SIGKILL)
    return box.restarted(name, pid)


def the_box(supervisor: int) -> list[psutil.Process]:
    """The supervisor and everything under it now: the services and their sandboxes."""
    process = psutil.Process(supervisor)
    return [process, *process.children(recursive=True)]


def others_untouched(box: UpBox, before: dict[str, dict[str, Any]], victim: str) -> None:
    after = box.services()
    for name in SERVICES:
        if name != victim:
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted too"
            assert after[name]["restarts"] == 0


def down_leaves_nothing(box: UpBox, processes: list[psutil.Process]) -> None:
    """`bxctl down`, then: none of `processes` (the box as it was) and nothing naming the home."""
    result = box.bxctl("down")
    assert (result.returncode, result.stdout) == (0, "stopped\n"), result.stderr
    alive = [p for p in processes if _alive(p)]
    assert alive == [], "outlived `bxctl down`"
    assert processes_of(box.home) == []


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("victim", ["brokerd", "loopd", "gatewayd"])
def test_a_daemon_killed_during_a_shell_call_is_restarted_and_the_command_runs_once(
    box: UpBox, victim: str
) -> None:
    folder = shell_folder(box.home)
    runs = folder / "runs.txt"
    command = args(command="echo run >> runs.txt; sleep 1", cwd=str(folder))
    box.model.script("run it", box.model.calls(("shell", command)), Answer(text="Finished."))
    status = box.status()
    before = {item["name"]: item for item in status["services"]}
    with box.bxctl_process("chat", "--session", "crash", "run it") as chat:
        assert chat.stdout is not None
        wait_until(runs.exists, 15, "the command started")  # and it sleeps, in its sandbox
        in_flight = the_box(status["supervisor"])
        assert "bwrap" in [p.name() for p in in_flight]
        started_by_victim = psutil.Process(before[victim]["pid"]).children(recursive=True)
        if victim == "brokerd":
            assert {"bwrap", "sleep"} <= {p.name() for p in started_by_victim}
        restarted = kill(box, victim, before[victim]["pid"])
        # brokerd's sandbox dies with it: nothing runs on that nobody supervises
        wait_until(lambda: not any(map(_alive, started_by_victim)), 5, "its children gone")
        out = Reader(chat.stdout.fileno(), chat)
        assert out.drain(timeout=60) == 0, out.everything
    assert (restarted["restarts"], restarted["last_exit"]) == (1, "signal 9")
    others_untouched(box, before, victim)

    assert runs.read_text() == "run\n"
    assert out.everything.endswith("Finished.\n")
    (read,) = results_read(box.model.requests_for("run it")[-1])
    (decided,) = records_of(box, "crash", "decision")
    executed = records_of(box, "crash", "executed")
    if victim == "brokerd":  # killed with its sandbox: never recorded as run, never run again
        assert read in (UNKNOWN, RAN)
        assert len(executed) == (0 if read == UNKNOWN else 1)
    else:  # brokerd ran it; the call sent again is answered from what it recorded
        assert read == RAN
        assert [r["call"] for r in executed] == [decided["call"]]
    assert decided["outcome"] == "allowed"
    down_leaves_nothing(box, in_flight)


def test_memoryd_killed_with_a_note_in_flight_is_restarted_and_the_note_kept_once(
    box: UpBox,
) -> None:
    note = args(action="note", text="the cat is called Tom")
    box.model.script("remember", box.model.calls(("memory", note)), Answer(text="Noted."))
    status = box.status()
    before = {item["name"]: item for item in status["services"]}
    memoryd = before["memoryd"]["pid"]
    os.kill(memoryd, signal.SIGSTOP)  # the note waits for it, in flight
    with box.bxctl_process("chat", "--session", "memo", "remember") as chat:
        assert chat.stdout is not None
        wait_until(lambda: records_of(box, "memo", "decision"), 15, "the note decided")
        processes = the_box(status["supervisor"])
        restarted = kill(box, "memoryd", memoryd)
        out = Reader(chat.stdout.fileno(), chat)
        assert out.drain(timeout=60) == 0, out.everything
    assert (restarted["restarts"], restarted["last_exit"]) == (1, "signal 9")
    others_untouched(box, before, "memoryd")

    assert out.everything.endswith(
        "agent│ ✓ memory: done, 8 bytes (--show-output to see it)\nagent│ Noted.\n"
    )
    assert results_read(box.model.requests_for("remember")[-1]) == ["noted #1"]
    with contextlib.closing(sqlite3.connect(box.home / "memory" / "memory.sqlite3")) as db:
        kept = db.execute("SELECT text FROM notes").fetchall()
    assert kept == [("the cat is called Tom",)]
    assert len(records_of(box, "memo", "executed")) == 1
    down_leaves_nothing(box, processes)
