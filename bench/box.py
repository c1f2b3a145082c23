"""Real daemons for the benchmarks: a fresh home, started processes, a sync client.

A bench's home never takes the console's default port (8420, SPEC §12.1): another box on the
machine may hold it, so each home is given a free one (issue 28).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import Ping
from bxctl.init import init_home
from tests.support.daemons import free_port


def fresh_home(folder: Path, config: str = "") -> Home:
    """A new home in `folder` with `config`, and a free console port unless it names one."""
    home = Home(folder / "home")
    init_home(home)
    home.config.write_text(with_free_console(config))
    return home


def with_free_console(config: str) -> str:
    """`config` with `[console] port` set to a free port, unless it has a `[console]` table."""
    if re.search(r"^\s*\[console\]", config, re.MULTILINE):
        return config
    return f"{config.rstrip()}\n[console]\nport = {free_port()}\n".lstrip()


@contextlib.contextmanager
def daemon(name: str, home: Home, socket: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", f"services.{name}", "--home", str(home.root)],
        stdout=subprocess.DEVNULL,
        stderr=open(home.root / f"{name}.log", "ab"),  # noqa: SIM115 - closed with the process
        start_new_session=True,
    )
    try:
        wait_ready(home, socket)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_ready(home: Home, socket: str, deadline_s: float = 15.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(TimeoutError):
            request(connect(home, socket), Ping("ready"), timeout_ms=200)
            return
    raise TimeoutError(f"{socket} did not answer in {deadline_s} s")


def connect(home: Home, socket: str) -> zmq.Socket[bytes]:
    return dealer(home.endpoint(socket))


def dealer(endpoint: str) -> zmq.Socket[bytes]:
    """A client socket at `endpoint`, of a service or of a floor alike."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def request(dealer: zmq.Socket[bytes], message: Any, timeout_ms: int = 30_000) -> Any:
    dealer.send(wire.encode(message))
    if not dealer.poll(timeout_ms):
        dealer.close(linger=0)
        raise TimeoutError("no answer")
    return wire.decode(dealer.recv())


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
