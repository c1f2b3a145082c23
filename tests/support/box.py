"""`bxctl` against a home of its own, for the supervisor's tests: `up` as the owner runs it,
the other commands in the test's process (`tests.support.cli`).

`box_home` yields a fresh home and, whatever the test did, runs `bxctl down` and then kills
any process whose command line still names the home, failing the test if one was left.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil  # type: ignore[import-untyped, unused-ignore]

from tests.support import cli
from tests.support.cli import Completed

REPO = Path(__file__).resolve().parents[2]
THREE = ("brokerd", "memoryd", "loopd")  # gatewayd is not here yet
QUITTER = "quitter=tests.support.quitter:quitter"
STUBBORN = "stubborn=tests.support.stubborn:stubborn"
DAWDLER = "dawdler=tests.support.dawdler:dawdler"
ESCAPER = "escaper=tests.support.escaper:escaper"

T = TypeVar("T")


def env() -> dict[str, str]:
    """The environment for bxctl: test daemons importable from the supervisor's children."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", "BX_HOME": ""}


def bxctl(home: Path, *args: str, timeout: float = 60.0) -> Completed:
    """In this process unless the command needs its own (`tests.support.cli`)."""
    return cli.bxctl(home, *args, env=env(), cwd=REPO, timeout=timeout)


def up(home: Path, *services: str, timeout: float = 60.0) -> Completed:
    """`bxctl up` supervising `services` (default: brokerd, memoryd, loopd)."""
    flags = [arg for name in (services or THREE) for arg in ("--service", name)]
    return bxctl(home, "up", *flags, timeout=timeout)


def processes_of(home: Path) -> list[psutil.Process]:
    """Every process (but this one) whose command line names `home`."""
    found = []
    needle = str(home)
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["pid"] != os.getpid() and any(needle in arg for arg in cmdline):
            found.append(process)
    return found


def cmdline_of(process: psutil.Process) -> list[str]:
    """`process`'s command line, or [] once it has exited (a zombie has none)."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def kill_all(home: Path) -> list[str]:
    """SIGKILL every process that names `home`; their command lines."""
    left = processes_of(home)
    names = []
    for process in left:
        with contextlib.suppress(psutil.Error):
            names.append(" ".join(process.cmdline()))
            process.kill()
    psutil.wait_procs(left, timeout=5)
    return names


def wait_until(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll `probe` until it returns something other than None or False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


@contextlib.contextmanager
def box_home(root: Path) -> Iterator[Path]:
    home = root / "h"
    try:
        yield home
    finally:
        bxctl(home, "down")  # in this process: bounded by its own waits
        leaked = kill_all(home)
        assert not leaked, f"processes outlived `bxctl down`: {leaked}"
