"""The supervisor's hold on a home (`Box`): the lock `{home}/run/supervisor.lock` and the pid
file `{home}/run/supervisor.pid`, which names it and its children by pid *and* start time
(psutil's `create_time`), so the file of a killed supervisor is known stale even when its pid
was reused. Only the supervisor writes the file (whole, by rename); bxctl and the next
supervisor read it, and stop only processes whose identity still matches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed

from bxcore import process_tree
from bxcore.home import runlock
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home

#: create_time is computed from clock ticks (1/100 s) since boot: the same process always
#: gives the same value, and a reused pid cannot start within the same tick.
SAME_START = 0.02
GRACE_S = 5.0  # SIGTERM to a group, then this long, then SIGKILL (§13)

log = logging.getLogger("supervisor")


@dataclass(frozen=True)
class Proc:
    """One process, by pid and start time."""

    pid: int
    started: float

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        """The identity of the live process `pid`, or None when there is none."""
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def process(self) -> psutil.Process | None:
        """The live process this names; None when it ended, or the pid is someone else's."""
        try:
            process = psutil.Process(self.pid)
            if abs(process.create_time() - self.started) > SAME_START:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def alive(self) -> bool:
        return self.process() is not None

    def json(self) -> dict[str, Any]:
        return {"pid": self.pid, "started": self.started}


@dataclass(frozen=True)
class BoxRecord:
    """What the pid file says: the supervisor, and each child it is running now."""

    supervisor: Proc
    endpoint: str  # where it answers `supervisor_status`
    children: dict[str, Proc] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        return {
            "supervisor": self.supervisor.json(),
            "endpoint": self.endpoint,
            "children": {name: proc.json() for name, proc in sorted(self.children.items())},
        }


def read(path: Path) -> BoxRecord | None:
    """The record in `path`; None when there is none or it cannot be read (a torn write)."""
    try:
        data = json.loads(path.read_bytes())
        supervisor = _proc(data["supervisor"])
        endpoint = data["endpoint"]
        if not isinstance(endpoint, str):
            raise ValueError("bad endpoint")
        children = {str(k): _proc(v) for k, v in data.get("children", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return BoxRecord(supervisor, endpoint, children)


def _proc(data: Any) -> Proc:
    pid, started = data["pid"], data["started"]
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError("bad pid")
    if not isinstance(started, int | float) or isinstance(started, bool):
        raise ValueError("bad start time")
    return Proc(pid, float(started))


def write(path: Path, record: BoxRecord) -> None:
    """Replace `path` with `record`, whole: a reader sees the old file or the new one."""
    data = json.dumps(record.json(), sort_keys=True).encode() + b"\n"
    write_atomically(path, data, durable=False)  # a pid file need not survive a crash


def running(path: Path) -> BoxRecord | None:
    """The record when its supervisor is alive; None when none runs (or the file is stale)."""
    record = read(path)
    if record is None or not record.supervisor.alive():
        return None
    return record


def stop_groups(leaders: list[psutil.Process], grace: float) -> None:
    """SIGTERM each leader's process group, wait `grace`, then SIGKILL the groups."""
    groups = [p.pid for p in leaders]
    for pgid in groups:
        process_tree.signal_group(pgid, signal.SIGTERM)
    psutil.wait_procs(leaders, timeout=grace)
    for pgid in groups:
        process_tree.signal_group(pgid, signal.SIGKILL)


def box_processes(root: Path) -> list[psutil.Process]:
    """The processes the supervisor of home `root` starts (itself and every service):
    `<python> -m <module> --home <root> …`, bxctl's own commands excepted."""
    found = []
    me = os.getpid()
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["pid"] == me or len(cmdline) < 5:
            continue
        if cmdline[1] == "-m" and cmdline[2] != "bxctl" and cmdline[3:5] == ["--home", str(root)]:
            found.append(process)
    return found


def sweep(root: Path, record: BoxRecord | None, grace: float, *, strays: bool) -> int:
    """Stop what is left of a box whose supervisor is gone: the children `record` names (if
    their identity still matches) and, with `strays`, any process started for home `root`
    (`box_processes`). Returns how many processes were stopped."""
    named = (record.children if record else {}).values()
    leaders = [p for p in (c.process() for c in named) if p is not None]
    others = [p for p in box_processes(root) if p.pid not in {q.pid for q in leaders}]
    return _stop(leaders, others if strays else [], grace)


def _stop(leaders: list[psutil.Process], strays: list[psutil.Process], grace: float) -> int:
    if not leaders and not strays:
        return 0
    # What they started outside their groups (a sandbox in a session of its own) is found
    # now, while they still parent it, and killed once they are gone (issue 10).
    trees = [p for root in (*leaders, *strays) for p in process_tree.descendants(root.pid)]
    stop_groups(leaders, grace)
    for process in strays:  # each started in its own group by a supervisor
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _gone, alive = psutil.wait_procs(strays, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=1.0)
    for process in process_tree.alive(trees):
        process_tree.signal_(process, signal.SIGKILL)
    process_tree.wait_gone(trees, 1.0)
    return len(leaders) + len(strays)


def wait_gone(proc: Proc, timeout: float) -> bool:
    """Wait until `proc` has ended; False when it still runs after `timeout`."""
    deadline = time.monotonic() + timeout
    while proc.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class Box:
    """A supervisor's hold on its home: the lock `{home}/run/supervisor.lock` for its whole
    life, and the pid file naming it and its children."""

    def __init__(self, home: Home, lock: runlock.RunLock, record: BoxRecord) -> None:
        self.home = home
        self._lock = lock
        self.record = record

    def __repr__(self) -> str:
        return f"Box({self.home.root}, {self.record.supervisor}, {self._lock!r})"

    @classmethod
    def open(cls, home: Home, endpoint: str) -> Box:
        """Take the lock (or raise `runlock.AlreadyRunning`), stop what a killed supervisor
        left running, and write the pid file."""
        home.ensure_run()
        lock = runlock.take(home.lock("supervisor"), "the supervisor")
        try:
            previous = read(home.pidfile("supervisor"))
            if previous is not None and previous.children:
                left = sweep(home.root, previous, GRACE_S, strays=False)
                if left:
                    log.warning("stopped %d process(es) a killed supervisor left running", left)
            me = Proc.of(os.getpid())
            assert me is not None
            record = BoxRecord(me, endpoint)
            write(home.pidfile("supervisor"), record)
        except BaseException:
            lock.release()
            raise
        return cls(home, lock, record)

    def child(self, name: str, pid: int | None) -> None:
        """Record (or forget) `name`'s process in the pid file."""
        children = dict(self.record.children)
        proc = Proc.of(pid) if pid is not None else None
        if proc is None:
            children.pop(name, None)
        else:
            children[name] = proc
        self.record = replace(self.record, children=children)
        with contextlib.suppress(OSError):
            write(self.home.pidfile("supervisor"), self.record)

    def close(self) -> None:
        path = self.home.pidfile("supervisor")
        current = read(path)
        if current is not None and current.supervisor == self.record.supervisor:
            with contextlib.suppress(OSError):
                path.unlink()
        self._lock.release()
