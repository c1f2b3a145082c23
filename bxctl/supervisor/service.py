"""One supervised service (SPEC §13), and what the supervisor does to one service's processes:
its output copied into its log, the `ping` that says it is ready, its stop (SIGTERM to its
process group, the grace, then SIGKILL, all of it even when cancelled), and the sweep of what
exited services left running outside their groups. When each is done is `bxctl.supervisor.runner`'s
to say, by `bxctl.supervisor.lifecycle`'s table.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Collection
from typing import Any

import anyio
import anyio.abc
import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed
import zmq
import zmq.asyncio

from bxcore import curve, process_tree
from bxcore.client import AskFailed, Client, Secure
from bxcore.clock import rfc3339
from bxcore.config.file import Config
from bxcore.errors import SETUP_ERROR_EXIT
from bxcore.home.layout import SOCKETS, Home
from bxcore.wire.asking import Patience
from bxcore.wire.messages import Ping, Pong, ServiceInfo, ServiceState
from bxctl.supervisor.lifecycle import ServiceLife
from bxctl.supervisor.logs import RotatingLog
from bxctl.supervisor.specs import ServiceSpec

PROBE_TRY_S = 1.0  # one ping's wait for a service that is starting, before a fresh socket
PROBE_RECONNECT_MS = 5  # how often a probe tries to connect to a service not yet bound
LEFTOVER_GRACE_S = 1.0  # what a service left running gets this long after SIGTERM, then KILL


def _eager(secure: Secure | None) -> Secure:
    """A probe's socket set-up: it tries to connect every PROBE_RECONNECT_MS, never backing
    off as other sockets do (`bxcore.router.tune`), and carries CURVE's keys (`secure`)."""

    def set_up(socket: zmq.Socket[Any]) -> None:
        socket.setsockopt(zmq.RECONNECT_IVL, PROBE_RECONNECT_MS)
        socket.setsockopt(zmq.RECONNECT_IVL_MAX, 0)  # 0: no backoff
        if secure is not None:
            secure(socket)

    return set_up


def _curve_client(spec: ServiceSpec, home: Home) -> Secure | None:
    if spec.curve_server is None:
        return None
    owner = curve.load_pair(home.keys, "owner")
    server = curve.load_public(home.keys, spec.curve_server)
    return lambda socket: curve.connect_curve(socket, owner, server)


def describe_exit(code: int) -> str:
    if code == SETUP_ERROR_EXIT:
        return f"cannot start: exit {code}"
    return f"signal {-code}" if code < 0 else f"exit {code}"


async def _terminate_all(processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM each process, wait up to `grace` for them all to end, then SIGKILL the rest."""
    for process in processes:
        process_tree.signal_(process, signal.SIGTERM)
    with anyio.move_on_after(grace):
        while process_tree.alive(processes):
            await anyio.sleep(0.02)
    for process in process_tree.alive(processes):
        process_tree.signal_(process, signal.SIGKILL)


class Service:
    """One supervised service: its life, its process (when it has one) and its log."""

    def __init__(self, spec: ServiceSpec, log_file: RotatingLog) -> None:
        self.spec = spec
        self.log = log_file
        self.life = ServiceLife()
        self.process: anyio.abc.Process | None = None
        self.generation = 0
        self.terminate_asked = False
        self.last_exit: str | None = None
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        pid = f"pid {self.process.pid}" if self.process is not None else "no process"
        return f"Service({self.spec.name}, {self.life!r}, {pid})"

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, states: Collection[ServiceState]) -> None:
        while self.life.state not in states:
            await self._changed.wait()

    async def pump(self, process: anyio.abc.Process, drained: anyio.Event) -> None:
        """Copy the child's output into its log, which rotates by size as it grows."""
        assert process.stdout is not None
        try:
            async for chunk in process.stdout:
                self.log.write(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            drained.set()

    async def terminate(self, process: anyio.abc.Process, grace: float) -> None:
        """SIGTERM to the group, the grace, then SIGKILL: all of it, even when cancelled."""
        with anyio.CancelScope(shield=True):
            self.log.note(f"stopping {self.spec.name}: SIGTERM to its process group")
            process_tree.signal_group(process.pid, signal.SIGTERM)
            with anyio.move_on_after(grace):
                await process.wait()
            if process.returncode is None:
                self.log.note(
                    f"{self.spec.name} still runs after {grace:g} s: SIGKILL to its group"
                )
                process_tree.signal_group(process.pid, signal.SIGKILL)

    def info(self, now: float, wall: int) -> ServiceInfo:
        """What the supervisor's report says of it; `now` on the supervisor's clock is `wall`
        (`bxcore.clock.now_ms`)."""
        life = self.life
        since = rfc3339(max(0, wall - int((now - life.since) * 1000)))
        pid = self.process.pid if self.process is not None else None
        return ServiceInfo(self.spec.name, life.state, life.restarts, since, pid, self.last_exit)

    async def answers_ping(
        self,
        context: zmq.asyncio.Context,
        config: Config,
        home: Home,
        *,
        pid: int,
        generation: int,
        deadline: float,
        clock: Callable[[], float],
    ) -> bool:
        """`ping` the service's socket until its pong from the very process `pid` (True) or
        the deadline (False; at once when its CURVE keys cannot be read, as its log says)."""
        spec = self.spec
        if spec.socket in SOCKETS:
            endpoint = config.sockets.endpoint(spec.socket, home)
        else:
            endpoint = home.endpoint(spec.socket)
        try:
            secure = _curve_client(spec, home)
        except curve.KeyFileError as error:
            self.log.note(f"cannot probe {spec.name}: {error}")
            return False
        secured = _eager(secure)
        client = Client(context, endpoint, socket=spec.socket, name=spec.name, secure=secured)
        try:
            tries = 0
            while (left := deadline - clock()) > 0:
                tries += 1
                # The ping waits in the socket's queue until the service binds, and goes out
                # within PROBE_RECONNECT_MS (bench startup: a nap between short tries cost
                # 30-40 ms a service). A try unanswered in a second starts on a fresh socket.
                with contextlib.suppress(AskFailed):
                    ping = Ping(f"ready-{generation}-{tries}")
                    wait = Patience(1, min(left, PROBE_TRY_S), "a fresh socket each try")
                    pong = await client.ask(ping, patience=wait)
                    if isinstance(pong, Pong) and pong.pid == pid:
                        return True
                await anyio.sleep(0.02)  # a quick failure (a bad answer, another pong): no spin
        finally:
            client.close()
        return False


async def stop_leftovers(
    leftovers: Callable[[], list[psutil.Process]], service: Service | None
) -> None:
    """Stop what exited services left running, and reap it: every process `leftovers` gives
    (our children that are no service's process: the subreaper adopted them), with all it
    started; then look again, for what their deaths handed to us in turn. `service`: the one
    that just exited, named in its log."""
    for _ in range(process_tree.LOOKS):
        found = leftovers()
        if not found:
            return
        living = process_tree.alive(found)  # the others only wait to be reaped
        if living and service is not None:
            pids = ", ".join(str(p.pid) for p in living)
            service.log.note(f"stopping what {service.spec.name} left running: {pids}")
        trees = [d for p in living for d in process_tree.descendants(p.pid)]
        await _terminate_all([*living, *trees], LEFTOVER_GRACE_S)
        with anyio.move_on_after(LEFTOVER_GRACE_S):
            while not all([process_tree.reap(p.pid) for p in found]):
                await anyio.sleep(0.01)
