"""Stopping a process together with everything it started, wherever that went (issue 10).

A sandbox runs in a session of its own, and so does the shell its toolkit starts: a kill of
one process group misses the rest. Here a tree is found by parentage (psutil, through
/proc), frozen with SIGSTOP while it is looked at again (a stopped process cannot fork), then
killed whole. A process counts as gone once it has ended, zombie or reaped: who reaps it is
its parent's business. Never signals a process it did not find in the tree it was given, and
checks each one's start time before signalling it (psutil), so a reused pid is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable

import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed

LOOKS = 5  # how many times a frozen tree is looked at again for what it forked meanwhile
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of `pid` (children first); [] when `pid` is gone."""
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if not gone(p)]
    except psutil.Error:
        return []


def children(pid: int) -> list[psutil.Process]:
    """The direct children of `pid` (ended ones too: they wait to be reaped)."""
    try:
        return list(psutil.Process(pid).children())
    except psutil.Error:
        return []


def freeze(pid: int) -> list[psutil.Process]:
    """SIGSTOP every descendant of `pid`, looking again until nothing new appears: what is
    returned can no longer fork, so one SIGKILL each ends the whole tree."""
    found: dict[int, psutil.Process] = {}
    for _ in range(LOOKS):
        new = [p for p in descendants(pid) if p.pid not in found]
        if not new:
            break
        for process in new:
            signal_(process, signal.SIGSTOP)
            found[process.pid] = process
    return list(found.values())


def kill_tree(pid: int) -> list[psutil.Process]:
    """SIGKILL `pid`'s process group (it leads one) and every descendant of `pid`, whatever
    their group or session. `pid` itself is its parent's to reap. Returns the descendants,
    to wait for with `wait_gone` or `alive`."""
    tree = freeze(pid)
    signal_group(pid, signal.SIGKILL)
    for process in tree:
        signal_(process, signal.SIGKILL)
    return tree


def signal_group(pgid: int, number: signal.Signals) -> None:
    """Signal process group `pgid`; nothing when it is gone or not ours to signal."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, number)


def signal_(process: psutil.Process, number: signal.Signals) -> None:
    """Signal `process` if it is still the process psutil found (same pid, same start)."""
    with contextlib.suppress(psutil.Error):
        process.send_signal(number)


def gone(process: psutil.Process) -> bool:
    """True once `process` has ended (a zombie has: it only waits to be reaped)."""
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:  # NoSuchProcess, or a pid reused by another (psutil checks it)
        return True


def alive(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if not gone(p)]


def wait_gone(processes: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has ended, at most `timeout` s; those still alive."""
    left = alive(processes)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = alive(left)
    return left


def become_subreaper() -> bool:
    """Linux's PR_SET_CHILD_SUBREAPER: a descendant whose parent dies becomes this process's
    child, not init's, so that it can be found, stopped and reaped here. False if refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def reap(pid: int) -> bool:
    """Reap our child `pid` if it has ended; True when it is no longer ours to reap."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done != 0
