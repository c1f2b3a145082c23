"""Faults that used to hang or mislead (issue 10), through the real processes: a socket path
taken, `bxctl down` with a sandbox running, a service that leaves a process outside its
group, `status` while the ledger is not ok, the owner's commands while brokerd is down, and
memory calls while memoryd is failed.

Every test has its own home; `box_home` runs `bxctl down` after it and fails the test if any
process naming the home survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from bxcore.errors import SETUP_ERROR_EXIT
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Done,
    Failed,
    SupervisorReport,
    SupervisorStop,
    ToolRequest,
    ToolResponse,
)
from bxctl.supervisor.runner import READY_S
from tests.support.box import (
    ESCAPER,
    REPO,
    box_home,
    bxctl,
    cmdline_of,
    env,
    processes_of,
    up,
    wait_until,
)
from tests.support.brokerd import RawClient, args, write_grant
from tests.support.daemons import init_home, start, sync_request, tool_owned


@pytest.fixture
def home(short_tmp: Path) -> Iterator[Path]:
    with box_home(short_tmp) as home:
        yield home


def status(home: Path) -> tuple[int, dict[str, Any]]:
    result = bxctl(home, "status", "--json")
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, json.loads(result.stdout)


def services(home: Path) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in status(home)[1]["services"]}


def take(home: Path, socket: str) -> Path:
    """Put a folder where `socket`'s ipc path should be."""
    path = Home(home).socket_path(socket)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir()
    return path


def running_process(pid: int, home: Path | None = None) -> bool:
    """`pid` runs (not a zombie), and names `home` when given: not a reused pid."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return home is None or any(str(home) in arg for arg in process.cmdline())
    except psutil.Error:
        return False


# -- a socket path taken ---------------------------------------------------------------------------

TAKEN = [
    ("gatewayd", "gateway"),
    ("brokerd", "broker"),
    ("brokerd", "admin"),
    ("brokerd", "broker-events"),
    ("memoryd", "memory"),
    ("loopd", "loop"),
    ("loopd", "loop-events"),
]


@pytest.mark.parametrize(("daemon", "socket"), TAKEN)
def test_a_daemon_whose_socket_path_is_taken_exits_78_at_once_with_one_line_naming_it(
    short_tmp: Path, daemon: str, socket: str
) -> None:
    home = init_home(short_tmp / "h")
    path = take(home, socket)
    started = time.monotonic()
    process = start(daemon, home)
    try:
        code = process.process.wait(timeout=10)
    finally:
        process.stop()
    assert time.monotonic() - started < 5.0
    assert code == SETUP_ERROR_EXIT
    said = [line for line in process.output().splitlines() if line.startswith(f"{daemon}: ")]
    assert said == [
        f"{daemon}: cannot bind ipc://{path}: Address already in use "
        "(a folder is at that path; move it away)"
    ]
    assert "Traceback" not in process.output()


def test_up_reports_a_taken_socket_path_within_the_readiness_limit(home: Path) -> None:
    init_home(home)
    path = take(home, "gateway")
    started = time.monotonic()
    result = up(home, "gatewayd")
    took = time.monotonic() - started
    assert result.returncode == 1
    assert took < READY_S, took
    assert "gatewayd failed to start" in result.stderr.splitlines()[-1]
    assert f"gatewayd: cannot bind ipc://{path}" in result.stderr  # the last lines of its log
    gatewayd = services(home)["gatewayd"]
    assert gatewayd["state"] == "failed" and gatewayd["restarts"] == 0
    assert gatewayd["last_exit"] == "cannot start: exit 78"
    log = (home / "logs" / "gatewayd.log").read_text()
    assert log.count("started gatewayd") == 1  # no restart can mend it: none was tried
    assert "it cannot start until its setup is mended" in log


def test_up_says_at_once_when_the_supervisors_own_socket_path_is_taken(home: Path) -> None:
    init_home(home)
    path = take(home, "supervisor")
    started = time.monotonic()
    result = up(home)
    assert time.monotonic() - started < 5.0
    assert result.returncode == 1
    assert result.stderr == (
        f"bxctl: the supervisor stopped: supervisor: cannot bind ipc://{path}: "
        "Address already in use (a folder is at that path; move it away)\n"
    )
    assert processes_of(home) == []


# -- nothing of the box outlives `down` ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_down_with_a_sandbox_running_leaves_nothing_of_it(home: Path, mode: str) -> None:
    """Without bwrap the toolkit's shell runs in a session of its own: a group kill misses it."""
    init_home(home, f'[sandbox]\nmode = "{mode}"\nshell_timeout_s = 200\n')
    granted = home.parent / "g"
    granted.mkdir()
    tool_owned(granted)
    write_grant(home, "test-shell", tool="shell", mode="allow", path=str(granted), class_="private")
    assert up(home, "brokerd").returncode == 0
    brokerd = psutil.Process(services(home)["brokerd"]["pid"])
    command = args(command="sleep 100", cwd=str(granted))
    with RawClient(home, "broker") as raw:
        raw.send(wire.encode(ToolRequest("r1", "s1", "c1", "shell", command)))

        def sleeping() -> list[psutil.Process] | None:
            tree = brokerd.children(recursive=True)
            return tree if any(cmdline_of(p) == ["sleep", "100"] for p in tree) else None

        tree = wait_until(sleeping, 15, "the sandbox's sleep")
        result = bxctl(home, "down")
    assert result.returncode == 0, result.stderr
    left = [p for p in tree if running_process(p.pid)]
    for process in left:
        process.kill()
    assert left == [], left


def test_what_a_service_leaves_outside_its_group_is_stopped_before_it_counts_as_exited(
    home: Path,
) -> None:
    assert up(home, ESCAPER).returncode == 0
    helper_file = Home(home).run_dir / "escaper.helper"
    first = int(helper_file.read_text())
    assert running_process(first, home)
    escaper = services(home)["escaper"]["pid"]
    os.kill(escaper, signal.SIGKILL)  # a crash: the helper, in a session of its own, lives on

    def restarted() -> int | None:
        again = services(home)["escaper"]
        return again["pid"] if again["state"] == "running" and again["pid"] != escaper else None

    wait_until(restarted, 15, "escaper restarted")
    assert not running_process(first, home)  # stopped, and reaped, before the restart
    log = (home / "logs" / "escaper.log").read_text()
    assert f"stopping what escaper left running: {first}" in log
    second = int(helper_file.read_text())
    assert second != first and running_process(second, home)
    result = bxctl(home, "down")
    assert result.returncode == 0, result.stderr
    assert not running_process(second, home)
    assert processes_of(home) == []


# -- status and the ledger -------------------------------------------------------------------------


def test_status_shows_the_ledger_ok_with_its_seq(home: Path) -> None:
    init_home(home)
    assert up(home, "brokerd").returncode == 0
    code, data = status(home)
    assert code == 0
    assert data["ledger"]["state"] == "ok" and data["ledger"]["seq"] >= 1, data["ledger"]
    plain = bxctl(home, "status")
    assert plain.returncode == 0
    assert any(line.startswith("ledger ok (seq ") for line in plain.stdout.splitlines())


def test_status_exits_3_and_says_why_when_brokerd_runs_with_a_failed_ledger(home: Path) -> None:
    init_home(home)
    faulty = {**env(), "BX_TEST_FAULTS": "fsync-after:0"}  # every fsync fails: nothing is durable
    command = [sys.executable, "-m", "bxctl", "--home", str(home), "up", "--service", "brokerd"]
    started = subprocess.run(command, capture_output=True, text=True, env=faulty, cwd=REPO)
    assert started.returncode == 1, started.stderr  # up, but it cannot run a call: it says so
    assert started.stderr.count("\n") == 1 and "ledger failed: cannot open" in started.stderr
    code, data = status(home)
    assert code == 3
    assert services(home)["brokerd"]["state"] == "running"  # running, yet denying everything
    assert data["ledger"]["state"] == "failed"
    assert "injected by BX_TEST_FAULTS" in data["ledger"]["problem"]
    plain = bxctl(home, "status")
    assert plain.returncode == 3
    line = next(x for x in plain.stdout.splitlines() if x.startswith("ledger "))
    assert line.startswith("ledger failed: cannot open")
    assert "every call is denied audit_unavailable" in line


def _cut(lines: list[bytes]) -> list[bytes]:
    return lines[:1]  # the records brokerd confirmed are gone


def _broken(lines: list[bytes]) -> list[bytes]:
    return [*lines[:-1], lines[-1].replace(b'"kind":"started"', b'"kind":"startex"')]  # rewritten


@pytest.mark.parametrize(
    ("damage", "said"),
    [(_cut, "ledger broken: the ledger ends at byte"), (_broken, "ledger broken: ")],
)
def test_up_on_a_cut_or_broken_ledger_says_so_in_one_line_and_exits_1(
    home: Path, damage: Any, said: str
) -> None:
    init_home(home)
    for _ in range(2):  # each start adds its record: brokerd confirms a head of 2
        assert up(home, "brokerd").returncode == 0
        assert bxctl(home, "down").returncode == 0
    ledger = Home(home).ledger
    ledger.write_bytes(b"".join(damage(ledger.read_bytes().splitlines(keepends=True))))
    started = up(home, "brokerd")
    assert started.returncode == 1
    assert started.stderr.count("\n") == 1 and started.stderr.startswith(f"bxctl: {said}")
    assert "every call is denied audit_unavailable" in started.stderr
    assert started.stderr.endswith("(the box is up)\n")
    code, data = status(home)  # up, so that the owner can look and decide
    assert code == 3 and data["ledger"]["state"] == "broken"


def test_status_without_brokerd_in_the_box_says_nothing_of_the_ledger(home: Path) -> None:
    init_home(home)
    assert up(home, "memoryd").returncode == 0
    code, data = status(home)
    assert code == 0 and data["ledger"] is None


# -- the owner's commands name the service that is down --------------------------------------------


def test_approve_and_pending_name_brokerd_when_it_failed(home: Path) -> None:
    init_home(home)
    take(home, "broker")
    assert up(home, "brokerd").returncode == 1
    for command in (["approve", "abcd2345"], ["deny", "abcd2345"], ["pending"]):
        result = bxctl(home, *command)
        assert result.returncode == 1, command
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr == (
            "bxctl: brokerd is not running (failed: cannot start: exit 78); "
            "see `bxctl logs brokerd`, then `bxctl restart brokerd`\n"
        )


def test_approve_names_brokerd_when_the_owner_stopped_it(home: Path) -> None:
    init_home(home)
    assert up(home, "brokerd", "memoryd").returncode == 0
    report = sync_request(home, "supervisor", SupervisorStop("s1", "brokerd"), timeout=15)
    assert isinstance(report, SupervisorReport)
    result = bxctl(home, "approve", "abcd2345")
    assert result.returncode == 1
    assert "brokerd is not running (stopped); `bxctl restart brokerd` starts it" in result.stderr
    assert "is boxmaker running" not in result.stderr


# -- memory while memoryd is failed ----------------------------------------------------------------


def test_a_memory_call_is_answered_at_once_while_memoryd_is_failed(home: Path) -> None:
    init_home(home)
    take(home, "memory")
    assert up(home, "brokerd", "memoryd").returncode == 1  # memoryd: failed at once
    assert services(home)["memoryd"]["state"] == "failed"
    note = args(action="note", text="remember me")
    started = time.monotonic()
    answer = sync_request(home, "broker", ToolRequest("r1", "s1", "c1", "memory", note), timeout=30)
    took = time.monotonic() - started
    assert isinstance(answer, ToolResponse), answer
    assert isinstance(answer.outcome, Failed), answer.outcome
    assert answer.outcome.message.startswith("memory unavailable: memoryd is failed")
    assert "bxctl logs memoryd" in answer.outcome.message
    assert took < 1.0, took


def test_a_memory_call_reaches_memoryd_again_once_it_runs(home: Path) -> None:
    init_home(home)
    path = take(home, "memory")
    assert up(home, "brokerd", "memoryd").returncode == 1
    path.rmdir()
    assert bxctl(home, "restart", "memoryd").returncode == 0
    note = args(action="note", text="remember me")
    answer = sync_request(home, "broker", ToolRequest("r1", "s1", "c1", "memory", note), timeout=30)
    assert isinstance(answer, ToolResponse) and isinstance(answer.outcome, Done), answer
