"""Service processes started before their turn (SPEC §13's order, with the imports overlapped).

Most of a Python daemon's start is importing its modules. The supervisor starts every
service's interpreter at once, each held (`bxcore.daemon.START_GATE`) before it reads its
config, takes its lock or binds a socket; then lets them go one by one, each once the one
before it answers `ping`, as §13 orders. What a held process has done is invisible to the
box: it only imported code. A restart starts a process the same way and lets it go at once.

The hold is the process's standard input: one byte lets it go; end of file (the start called
off, or the supervisor gone, which closes the pipe) makes it exit 0 without starting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc

from bxcore import process_tree
from bxcore.daemon import START_GATE


async def open_held(
    argv: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str]
) -> anyio.abc.Process:
    """Start `argv` in a process group of its own, held until `let_go`; OSError when it
    cannot be started."""
    return await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**env, START_GATE: "stdin"},
        start_new_session=True,  # its own process group: stopped as a whole
    )


async def let_go(process: anyio.abc.Process) -> None:
    """Let a held process start. One that already exited is left to its watcher."""
    assert process.stdin is not None
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await process.stdin.send(b"g")
    with contextlib.suppress(OSError):
        await process.stdin.aclose()


async def call_off(process: anyio.abc.Process, grace: float) -> None:
    """End a held process that will not be let go: end of file, then SIGKILL to its group
    after `grace`; reaped either way. Shielded: it runs while the box is stopping."""
    with anyio.CancelScope(shield=True):
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            await process.stdin.aclose()
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            process_tree.signal_group(process.pid, signal.SIGKILL)
        await process.aclose()
