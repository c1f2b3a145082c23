"""Real daemons for service and e2e tests: started as processes, ready when they answer
`ping`, always stopped (SIGTERM, then SIGKILL of the whole group) so no test leaks one.

    with running("brokerd", home) as brokerd:
        answer = brokerd.ask(ToolRequest(...))            # over its real broker socket
        answer = brokerd.ask(PendingQuery("p1"), socket="admin")   # as the owner, CURVE
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bxcore import curve
from bxcore.client import Secure, SyncClient, Unreachable
from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.wire.asking import Patience
from bxcore.wire.messages import Ping, Pong
from services.brokerd.sandbox import leftovers

#: The socket each daemon answers ping on.
MAIN_SOCKET = {"brokerd": "broker", "memoryd": "memory", "loopd": "loop", "gatewayd": "gateway"}
CURVE_SERVER = {"admin": "brokerd", "gateway": "gatewayd"}


def sync_request(home: Path, socket: str, message: Any, *, timeout: float = 10.0) -> Any:
    """One request, one try (as the owner on a CURVE socket); the answer that carries its id."""
    endpoint = Home(home).endpoint(socket)
    with SyncClient(endpoint, socket=socket, name=socket, secure=as_owner(home, socket)) as client:
        try:
            return client.ask(message, patience=Patience(1, timeout, "a test's one try"))
        except Unreachable:
            raise TimeoutError(f"no answer on {socket} in {timeout} s to {message!r}") from None


def as_owner(home: Path, socket: str) -> Secure | None:
    """What makes a client the owner on a CURVE socket; None on the others."""
    if socket not in CURVE_SERVER:
        return None
    keys = Home(home).keys
    owner = curve.load_pair(keys, "owner")
    server = curve.load_public(keys, CURVE_SERVER[socket])
    return lambda dealer: curve.connect_curve(dealer, owner, server)


class Daemon:
    def __init__(self, name: str, home: Path, process: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.home = home
        self.process = process
        self.log = log

    def __repr__(self) -> str:
        return f"Daemon({self.name} pid {self.process.pid}, home {self.home})"

    @property
    def pid(self) -> int:
        return self.process.pid

    def ask(self, message: Any, *, socket: str | None = None, timeout: float = 10.0) -> Any:
        return sync_request(self.home, socket or MAIN_SOCKET[self.name], message, timeout=timeout)

    def wait_ready(self, deadline_s: float = 15.0) -> Pong:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited {self.process.returncode}:\n{self.output()}"
                )
            with contextlib.suppress(TimeoutError):
                pong = self.ask(Ping("ready"), timeout=0.2)
                assert isinstance(pong, Pong), pong
                if self.name == "brokerd":  # it answers ping at once, then loads its ledger
                    self._wait_loaded(deadline)
                return pong
        raise TimeoutError(f"{self.name} did not answer ping in {deadline_s} s:\n{self.output()}")

    def _wait_loaded(self, deadline: float) -> None:
        """Until this brokerd has reported its ledger loaded (ok, failed or broken): it says
        `loading` before it binds its sockets, so once it answers, no older report is left."""
        while time.monotonic() < deadline:
            ledger = report.read(Home(self.home)).get("ledger") or {}
            if ledger.get("state") not in (None, "loading"):
                return
            time.sleep(0.01)
        raise TimeoutError(f"brokerd did not load its ledger:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed, nothing is closed. A sandbox setup a
        killed brokerd leaves waiting is ended, as its next start would (`leftovers`)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.name == "brokerd":
            leftovers.sweep(leftovers.mark(self.home))

    def stop(self, grace_s: float = 5.0) -> int:
        """SIGTERM, then SIGKILL to the group after `grace_s`; the exit status."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # anything the daemon left behind
        return self.process.returncode


def start(
    name: str, home: Path, env: Mapping[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Daemon:
    """Start `name` as a real process, in its own process group, logging to a file; `prefix`:
    a program that sets the process up and execs the rest (`unshare …`), so that the pid is
    the daemon's."""
    log = home / f"test-{name}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", f"services.{name}", "--home", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Daemon(name, home, process, log)


@contextlib.contextmanager
def running(
    name: str, home: Path, env: Mapping[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[Daemon]:
    daemon = start(name, home, env, prefix)
    try:
        daemon.wait_ready()
        yield daemon
    finally:
        daemon.stop()


def init_home(home: Path, config: str = "") -> Path:
    """A fresh home from `bxctl init`, with `config` as its config.toml. Unless `config` says
    otherwise, the console listens on a free port of its own: tests run side by side."""
    from bxctl.init import init_home as init

    init(Home(home))
    if "[console]" not in config:
        config += f"\n[console]\nport = {free_port()}\n"
    (home / "config.toml").write_text(config)
    return home


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses now, below the kernel's ephemeral range (so
    no outgoing connection takes it before gatewayd binds it)."""
    while True:
        port = random.randrange(10_000, 32_000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def tool_owned(*paths: Path) -> None:
    """Give `paths`, and everything in them, to the user tools run as when the tests run as
    root (`[sandbox] user`, nobody): brokerd never runs a tool as root, so a folder a test's
    grant lets a tool write to must be that user's."""
    if os.geteuid() != 0:
        return
    nobody = pwd.getpwnam("nobody")
    for path in paths:
        for each in (path, *path.rglob("*")):
            os.lchown(each, nobody.pw_uid, nobody.pw_gid)
