"""Sandboxes a killed brokerd left waiting forever, found and ended by the next one.

When brokerd holds a sandbox (root mode, or a shell's cgroup: `child.Hold`), bwrap's setup
process waits on an eventfd until bwrap itself has been released. If brokerd is killed in
that window (a SIGKILL, the OOM killer), bwrap dies with it (`--die-with-parent`), and its
setup process, which binds its own lifetime to bwrap's only later, waits for ever: outside
every group brokerd knows, adopted by init or the supervisor. It runs nothing: no tool has
started. So each bwrap brokerd starts carries a mark of its home as its `argv[0]` (`mark`),
which its setup process shares (a fork), and a brokerd's start ends what its home's marks
still name (`sweep`): one brokerd a home runs at a time, so none of them is in use.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from pathlib import Path


def mark(home: Path) -> str:
    """The `argv[0]` of every bwrap brokerd starts for `home` (only a digest of its path:
    `ps` shows it to every user)."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return f"bwrap [boxmaker {digest}]"


def sweep(name: str) -> list[int]:
    """SIGKILL every process whose `argv[0]` is `name`; the pids it signalled."""
    wanted = name.encode() + b"\0"
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read(len(wanted)) != wanted:
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
    return killed
