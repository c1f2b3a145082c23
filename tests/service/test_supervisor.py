"""`bxctl up | down | restart | status | logs` with a real supervisor, real brokerd, memoryd and
loopd, and tiny misbehaving daemons (tests/support/quitter.py, stubborn.py) (SPEC §13).

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

from bxcore.home.layout import SERVICES
from bxcore.wire.messages import Ping, Pong, SupervisorReport, SupervisorStop
from bxctl.supervisor import pidfile
from bxctl.supervisor.logs import Follower, RotatingLog, rotated, tail
from tests.support.box import (
    DAWDLER,
    QUITTER,
    REPO,
    STUBBORN,
    THREE,
    box_home,
    bxctl,
    env,
    processes_of,
    up,
    wait_until,
)
from tests.support.daemons import MAIN_SOCKET, free_port, init_home, sync_request


@pytest.fixture
def home(short_tmp: Path) -> Iterator[Path]:
    with box_home(short_tmp) as home:
        yield home


def status(home: Path) -> dict[str, Any]:
    result = bxctl(home, "status", "--json")
    assert result.returncode in (0, 3), result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def services(home: Path) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in status(home)["services"]}


def supervisor_pid(home: Path) -> int:
    record = pidfile.read(home / "run" / "supervisor.pid")
    assert record is not None
    return record.supervisor.pid


def background(home: Path, *args: str) -> subprocess.Popen[str]:
    """`bxctl --home HOME ARGS` running on its own, its output in pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "bxctl", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
    )


# -- up --------------------------------------------------------------------------------------------


def test_up_starts_the_four_services_in_order_each_ready_before_the_next(home: Path) -> None:
    init_home(home)
    result = bxctl(home, "up")  # the default: all four
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines() if "running (pid" in line]
    assert printed == list(SERVICES)
    token = (home / "keys" / "console.token").read_text().strip()
    consoles = [line for line in result.stdout.splitlines() if line.startswith("console:")]
    assert len(consoles) == 1  # printed once, with the token that logs the owner in
    assert consoles[0].endswith(f"/#token={token}") and "http://127.0.0.1:" in consoles[0]
    log = (home / "logs" / "supervisor.log").read_text()
    moves = [line.split("supervisor ", 1)[1] for line in log.splitlines() if " -> " in line]
    assert moves == [
        f"{name}: {move}"
        for name in SERVICES
        for move in ("stopped -> starting on start", "starting -> running on ready")
    ]
    by_name = services(home)
    record = pidfile.read(home / "run" / "supervisor.pid")
    assert record is not None and record.supervisor.alive()
    for name in SERVICES:
        pid = by_name[name]["pid"]
        assert by_name[name]["state"] == "running"
        assert os.getpgid(pid) == pid  # its own process group
        assert record.children[name].pid == pid
        pong = sync_request(home, MAIN_SOCKET[name], Ping("t"))  # gateway: as the owner, CURVE
        assert isinstance(pong, Pong) and pong.pid == pid
    console = status(home)["console"]  # the address only: the token is for `bxctl console`
    assert console.startswith("http://127.0.0.1:") and "token" not in console


def test_services_wait_for_their_turn_and_a_down_meanwhile_calls_them_off(home: Path) -> None:
    """All four interpreters start at once (their imports overlap), but a service does nothing
    the box can see (config, lock, socket, log line) until the one before it is ready."""
    init_home(home)
    starting = background(home, "up", "--service", DAWDLER, "--service", "memoryd")
    try:

        def held() -> bool:
            return any("services.memoryd" in " ".join(p.cmdline()) for p in processes_of(home))

        wait_until(held, 20, "memoryd's process, held until dawdler is ready")
        time.sleep(0.5)  # long enough to import: it still waits
        assert not (home / "run" / "memory.sock").exists()
        assert services(home)["memoryd"]["state"] == "stopped"
        down = bxctl(home, "down")
        assert down.returncode == 0, down.stderr
        _, err = starting.communicate(timeout=30)
        assert starting.returncode == 1, err
        assert "the supervisor stopped" in err
        assert processes_of(home) == []
        assert not (home / "logs" / "memoryd.log").exists()  # not a line: it never started
    finally:
        if starting.poll() is None:
            starting.kill()
            starting.wait()


def test_up_says_when_nothing_answers_where_the_model_should_be(home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    init_home(home, f'[model]\nbase_url = "{url}"\n')
    result = up(home, "memoryd")
    assert result.returncode == 0, result.stderr
    hints = [line for line in result.stdout.splitlines() if line.startswith("model:")]
    assert hints == [
        f"model: nothing answers at {url} (connection refused): the agent's turns will fail "
        "until it does; `bxctl model check` says what to change"
    ]


def test_up_initialises_a_fresh_home_first(home: Path) -> None:
    result = up(home, "memoryd")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"initialised {home}"
    assert (home / "config.toml").exists() and (home / "keys" / "owner.key").exists()


def test_a_second_up_says_it_is_running_and_a_second_supervisor_refuses(home: Path) -> None:
    assert up(home).returncode == 0
    again = up(home)
    assert again.returncode == 0, again.stderr
    assert f"already running (supervisor pid {supervisor_pid(home)})" in again.stdout
    second = subprocess.run(
        [sys.executable, "-m", "bxctl.supervisor.runner", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env(),
    )
    assert second.returncode == 1
    assert second.stderr.count("\n") == 1
    assert "already running" in second.stderr and "supervisor.lock" in second.stderr


def test_a_broken_config_is_one_line_and_nothing_starts(home: Path) -> None:
    init_home(home, "[loop]\nmax_stepz = 3\n")
    result = up(home)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "max_stepz" in result.stderr and "nothing was started" in result.stderr
    assert processes_of(home) == []
    assert not (home / "run" / "supervisor.pid").exists()


def test_an_invalid_grant_is_a_warning_and_the_box_still_starts(home: Path) -> None:
    init_home(home)
    (home / "grants" / "broken.toml").write_text('tool = "read_file"\nmode = "sometimes"\n')
    result = up(home, "memoryd")
    assert result.returncode == 0, result.stderr
    assert "warning: grant broken is invalid and never matches" in result.stderr
    assert services(home)["memoryd"]["state"] == "running"


# -- restarts --------------------------------------------------------------------------------------


def test_a_daemon_killed_with_sigkill_is_restarted_and_status_counts_it(home: Path) -> None:
    assert up(home).returncode == 0
    old = services(home)["memoryd"]["pid"]
    os.kill(old, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        memoryd = services(home)["memoryd"]
        anew = memoryd["pid"] is not None and memoryd["pid"] != old  # None: exited, not counted
        return memoryd if memoryd["state"] == "running" and anew else None

    memoryd = wait_until(restarted, 15, "memoryd restarted")
    assert memoryd["restarts"] == 1 and memoryd["last_exit"] == "signal 9"
    pong = sync_request(home, "memory", Ping("again"))
    assert isinstance(pong, Pong) and pong.pid == memoryd["pid"]
    assert "memoryd exited (signal 9)" in (home / "logs" / "memoryd.log").read_text()


def test_a_daemon_that_exits_at_once_ends_failed_without_restarting_forever(
    home: Path,
) -> None:
    started = time.monotonic()
    result = up(home, QUITTER)
    took = time.monotonic() - started
    assert result.returncode == 1
    assert "quitter failed to start" in result.stderr.splitlines()[-1]
    assert "cannot start (on purpose" in result.stderr  # the last lines of its log
    assert 15.0 < took < 30.0  # backoff 0.5 + 1 + 2 + 4 + 8 s, then failed
    quitter = services(home)["quitter"]
    assert quitter["state"] == "failed" and quitter["restarts"] == 5
    log = home / "logs" / "quitter.log"
    starts = log.read_text().count("started quitter")
    assert starts == 6
    time.sleep(1.5)  # longer than the first backoff: nothing starts it again
    assert log.read_text().count("started quitter") == 6
    assert bxctl(home, "status").returncode == 3


def test_a_daemon_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(
    home: Path,
) -> None:
    assert up(home, STUBBORN).returncode == 0
    assert len(processes_of(home)) >= 3  # the supervisor, stubborn and its helper
    started = time.monotonic()
    result = bxctl(home, "down")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert 5.0 <= took < 10.0
    assert processes_of(home) == []
    log = (home / "logs" / "stubborn.log").read_text()
    assert "still runs after 5 s: SIGKILL to its group" in log


def test_restart_of_one_service_and_of_all_gives_new_processes(home: Path) -> None:
    assert up(home).returncode == 0
    before = {name: s["pid"] for name, s in services(home).items()}
    one = bxctl(home, "restart", "loopd")
    assert one.returncode == 0, one.stderr
    after = {name: s["pid"] for name, s in services(home).items()}
    assert after["loopd"] != before["loopd"]
    assert after["brokerd"] == before["brokerd"] and after["memoryd"] == before["memoryd"]
    assert services(home)["loopd"]["restarts"] == 0  # the owner's restart is not a crash
    every = bxctl(home, "restart")
    assert every.returncode == 0, every.stderr
    again = services(home)
    assert all(again[n]["state"] == "running" and again[n]["pid"] != after[n] for n in THREE)
    unknown = bxctl(home, "restart", "nosuch")
    assert unknown.returncode == 1 and "no service 'nosuch'" in unknown.stderr


# -- status ----------------------------------------------------------------------------------------


def test_status_json_and_exit_3_when_a_service_or_the_box_is_not_running(home: Path) -> None:
    result = bxctl(home, "status", "--json")
    assert result.returncode == 3
    assert json.loads(result.stdout) == {"running": False, "services": [], "warnings": []}
    assert up(home).returncode == 0
    result = bxctl(home, "status", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["running"] is True and data["supervisor"] == supervisor_pid(home)
    assert data["sandbox"] == "bwrap" and data["unsandboxed"] is False
    assert data["console"] is None  # no gatewayd in this box
    assert data["warnings"] == []  # the running box made nothing open to others (issue 9)
    tokens = data["tokens"]  # issue 16: loopd's count for the machine's day, no cap set
    assert (tokens["tokens"], tokens["max_per_day"], len(tokens["day"])) == (0, 0, 10)
    for item in data["services"]:
        assert item["state"] == "running" and item["restarts"] == 0
        assert item["rss_bytes"] > 1_000_000 and item["cpu_percent"] >= 0.0
        assert item["uptime_s"] >= 0.0
    plain = bxctl(home, "status")
    assert plain.returncode == 0
    assert plain.stdout.splitlines()[1].split()[:3] == ["SERVICE", "STATE", "PID"]
    assert f"tokens today ({tokens['day']}): 0" in plain.stdout
    # The owner's stop of one service: it stays stopped, and status exits 3.
    report = sync_request(home, "supervisor", SupervisorStop("s1", "loopd"), timeout=15)
    assert isinstance(report, SupervisorReport)
    time.sleep(0.7)  # longer than a first backoff
    loopd = services(home)["loopd"]
    assert loopd["state"] == "stopped" and loopd["pid"] is None
    assert bxctl(home, "status").returncode == 3
    assert status(home)["tokens"] is None  # loopd does not run: no figures, no failure


def test_status_says_unsandboxed_when_the_sandbox_mode_is_none(home: Path) -> None:
    init_home(home, '[sandbox]\nmode = "none"\n')
    assert up(home, "memoryd").returncode == 0
    result = bxctl(home, "status")
    assert "UNSANDBOXED" in result.stdout and "sandbox none" in result.stdout
    assert status(home)["unsandboxed"] is True


# -- down, and what a dead supervisor leaves -------------------------------------------------------


def test_down_stops_everything_and_leaves_no_process(home: Path) -> None:
    assert up(home).returncode == 0
    pids = [supervisor_pid(home), *(s["pid"] for s in services(home).values())]
    result = bxctl(home, "down")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "stopped"
    assert not any(psutil.pid_exists(pid) and _named(pid, home) for pid in pids)
    assert processes_of(home) == []
    assert not (home / "run" / "supervisor.pid").exists()
    again = bxctl(home, "down")
    assert (again.returncode, again.stdout.strip()) == (0, "not running")
    assert bxctl(home, "status").returncode == 3


def _named(pid: int, home: Path) -> bool:
    try:
        return any(str(home) in arg for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def test_a_stale_pid_file_whose_pid_was_reused_is_recognised(home: Path) -> None:
    init_home(home)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        real = pidfile.Proc.of(other.pid)
        assert real is not None
        reused = pidfile.Proc(other.pid, real.started - 1000.0)  # a killed supervisor's pid
        endpoint = f"ipc://{home}/run/supervisor.sock"
        (home / "run").mkdir(exist_ok=True)
        stale = pidfile.BoxRecord(reused, endpoint, {"brokerd": reused})
        pidfile.write(home / "run" / "supervisor.pid", stale)
        result = bxctl(home, "status")
        assert (result.returncode, result.stdout.strip()) == (
            3,
            "not running; start it with `bxctl up`",
        )
        started = up(home, "memoryd")
        assert started.returncode == 0, started.stderr
        assert "already running" not in started.stdout
        assert supervisor_pid(home) != other.pid
        assert other.poll() is None  # the process that reused the pid was left alone
    finally:
        other.kill()
        other.wait()


def test_the_next_up_stops_what_a_killed_supervisor_left_running(home: Path) -> None:
    assert up(home, "memoryd").returncode == 0
    orphan = services(home)["memoryd"]["pid"]
    os.kill(supervisor_pid(home), signal.SIGKILL)
    assert psutil.pid_exists(orphan)  # its own session: the supervisor's death spared it
    assert bxctl(home, "status").returncode == 3
    result = up(home, "memoryd")
    assert result.returncode == 0, result.stderr
    assert not (psutil.pid_exists(orphan) and _named(orphan, home))
    assert services(home)["memoryd"]["pid"] != orphan


def test_up_in_the_foreground_serves_until_sigterm(home: Path) -> None:
    process = background(home, "up", "--foreground", "--service", "memoryd")
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Ctrl-C stops the box" in line:
                break
        assert any(line.startswith("memoryd    running") for line in lines), lines
        assert services(home)["memoryd"]["state"] == "running"
        assert bxctl(home, "up").stdout.startswith("already running")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
        assert process.returncode == 0, err
        assert out.strip().endswith("stopped")
        assert processes_of(home) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- logs ------------------------------------------------------------------------------------------


def test_logs_prints_the_last_lines_of_one_log_or_of_all_and_follows(home: Path) -> None:
    assert up(home, "brokerd", "memoryd").returncode == 0
    lines = (home / "logs" / "memoryd.log").read_text().splitlines()
    one = bxctl(home, "logs", "memoryd", "-n", "2")
    assert one.returncode == 0 and one.stdout.splitlines() == lines[-2:]
    every = bxctl(home, "logs", "-n", "1")
    prefixes = [line.split(" | ")[0].strip() for line in every.stdout.splitlines()]
    assert prefixes == ["brokerd", "memoryd", "supervisor"]
    missing = bxctl(home, "logs", "loopd")
    assert missing.returncode == 1 and "no log for loopd" in missing.stderr
    follow = subprocess.Popen(
        [sys.executable, "-m", "bxctl", "--home", str(home), "logs", "memoryd", "-f", "-n", "1"],
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline().rstrip("\n") == lines[-1]  # it follows from here on
        assert bxctl(home, "restart", "memoryd").returncode == 0
        seen = [follow.stdout.readline() for _ in range(2)]
        assert "stopping memoryd: SIGTERM" in seen[0], seen
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=10) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_a_log_rotates_by_size_without_splitting_lines(tmp_path: Path) -> None:
    path = tmp_path / "svc.log"
    log = RotatingLog(path, max_bytes=1000, keep=3)
    follower = Follower(path)
    followed: list[str] = []
    for n in range(200):
        log.write(f"line {n:04d} ".encode() + b"x" * 20)
        log.write(b"\n")
        followed += follower.read()
    log.close()
    followed += follower.read()
    files = [path, *(rotated(path, i) for i in (1, 2, 3))]
    assert all(f.exists() for f in files) and not rotated(path, 4).exists()
    assert all(f.stat().st_size <= 1000 for f in files)
    kept = [line for f in reversed(files) for line in f.read_text().splitlines()]
    assert kept == [f"line {n:04d} " + "x" * 20 for n in range(200 - len(kept), 200)]
    assert followed == [f"line {n:04d} " + "x" * 20 for n in range(200)]  # across rotations
    current = len(path.read_text().splitlines())
    assert tail(path, current + 2) == kept[-(current + 2) :]  # reaches into .1
