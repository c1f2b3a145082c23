"""The supervisor (SPEC §13): starts a home's services in order, each in its own process group,
restarts them as `bxctl.supervisor.lifecycle`'s table says, and answers `supervisor_status`,
`_restart` and `_stop` on the `supervisor` socket. `python -m bxctl.supervisor.runner --home
DIR` (what `bxctl up` starts, detached), or `Supervisor.run` inside `bxctl up --foreground`. No
child outlives it: every stop is SIGTERM to the group, the grace, then SIGKILL, in a shielded
scope; and as a child subreaper it adopts whatever a service's processes leave behind outside
its group (a sandbox in a session of its own), and stops and reaps it before it calls the
service exited. Each state change is also written to `{run}/services.json`
(`bxcore.service_states`). What is done to one service's processes (its log, its probe, its
stop, its leftovers) is `bxctl.supervisor.service`'s; when it is done is decided here."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.abc
import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed
import zmq
import zmq.asyncio

from bxcore import process_tree, service_states
from bxcore.clock import now_ms
from bxcore.config.file import Config, ConfigError, load_config
from bxcore.console_link import console_served
from bxcore.errors import SETUP_ERROR_EXIT, SetupError, one_line
from bxcore.home import runlock
from bxcore.home.layout import Home, HomeError
from bxcore.router import Router
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire.messages import (
    Error,
    ErrorCode,
    ServiceState,
    SupervisorReport,
    SupervisorRestart,
    SupervisorStatus,
    SupervisorStop,
)
from bxcore.wire.sockets import SupervisorAnswer, SupervisorRequest
from bxctl.supervisor import held
from bxctl.supervisor.lifecycle import POLICY, Action, Event, Policy, step
from bxctl.supervisor.logs import RotatingLog
from bxctl.supervisor.pidfile import GRACE_S, Box
from bxctl.supervisor.service import LEFTOVER_GRACE_S, Service, describe_exit, stop_leftovers
from bxctl.supervisor.specs import ServiceSpec, parse_specs

log = logging.getLogger("supervisor")

READY_S = 10.0  # a service must answer `ping` this soon after it starts (§13)
SETTLED = frozenset({ServiceState.RUNNING, ServiceState.FAILED, ServiceState.STOPPED})
REFUSAL = Refusal(
    "{type} is not answered on the supervisor socket", ErrorCode.WRONG_SOCKET, anonymous="?"
)


def endpoint_of(home: Home, config: Config) -> str:
    """The supervisor's socket; only ipc://, since it has no CURVE."""
    endpoint = config.sockets.endpoint("supervisor", home)
    if not endpoint.startswith("ipc://"):
        raise SupervisorError("[sockets] supervisor: only ipc:// (it has no CURVE)")
    return endpoint


class SupervisorError(Exception):
    """The supervisor cannot start; the text is one line."""


class Supervisor:
    """The services of one home, and the socket the owner asks about them."""

    def __init__(
        self,
        home: Home,
        config: Config,
        specs: Sequence[ServiceSpec],
        *,
        on_child: Callable[[str, int | None], None] = lambda name, pid: None,
        policy: Policy = POLICY,
        grace: float = GRACE_S,
        ready_timeout: float = READY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self.config = config
        self.endpoint = endpoint_of(home, config)
        self.services = {s.name: Service(s, RotatingLog(home.log(s.name))) for s in specs}
        self.on_child = on_child  # the pid file's record of each child
        self._policy = policy
        self._grace = grace
        self._ready_timeout = ready_timeout
        self._clock = clock
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._closing = False
        self._stop = anyio.Event()
        self._starting: anyio.CancelScope | None = None  # made in `run`: needs the loop
        self._owner = anyio.Lock()  # one owner's request at a time
        self._tasks: anyio.abc.TaskGroup | None = None
        self._zmq: zmq.asyncio.Context | None = None
        self._adopts = False  # a child subreaper: what a service leaves behind is ours
        self._children = anyio.Lock()  # a spawn and a sweep of leftovers, never both at once
        self._held: dict[str, anyio.abc.Process] = {}  # started, waiting for their turn

    def __repr__(self) -> str:
        state = "closing" if self._closing else "serving"
        return f"Supervisor({self.home.root}, {state}, {list(self.services.values())!r})"

    # -- the life of the box -------------------------------------------------------------------

    async def run(self) -> None:
        """Start the services in order and serve until SIGTERM, SIGINT, SIGHUP or a stop."""
        self._zmq = zmq.asyncio.Context()
        self._starting = anyio.CancelScope()
        self._adopts = process_tree.become_subreaper()
        try:
            try:
                router = Router(self._zmq, self.endpoint, self.routes, service="supervisor")
            except SetupError as error:
                raise SupervisorError(str(error)) from None
            try:
                self.home.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as error:
                raise SupervisorError(f"cannot create the logs folder: {one_line(error)}") from None
            log.info("supervising %s at %s", ", ".join(self.services), self.home.root)
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                tasks.start_soon(router.serve)
                tasks.start_soon(self._stop_on_signal)
                try:
                    with self._starting:
                        await self.start_all()
                    await self._stop.wait()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.stop_all()
                    tasks.cancel_scope.cancel()
        finally:
            for service in self.services.values():  # only after a bug: never leave one behind
                if service.process is not None and service.process.returncode is None:
                    process_tree.signal_group(service.process.pid, signal.SIGKILL)
                service.log.close()
            with anyio.CancelScope(shield=True):
                await self._stop_leftovers(None)
            service_states.remove(self.home.run, os.getpid())
            self._zmq.destroy(linger=0)
            log.info("stopped")

    def request_stop(self) -> None:
        """Stop every service in reverse order, then end `run`."""
        self._closing = True
        if self._starting is not None:
            self._starting.cancel()
        self._stop.set()

    async def _stop_on_signal(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for number in signals:
                log.info("stopping on %s", signal.Signals(number).name)
                self.request_stop()

    async def start_all(self) -> None:
        """Start each service once the one before it runs (or has failed): brokerd first.
        Their processes are all started at once, held until their turn (`bxctl.supervisor.held`)."""
        async with self._owner:  # the owner's restarts wait until the box is up
            try:
                for service in self.services.values():
                    async with self._children:
                        with contextlib.suppress(OSError):  # its turn will say why
                            self._held[service.spec.name] = await held.open_held(
                                service.spec.argv(self.home), self.home.root, self._env
                            )
                for service in self.services.values():
                    self.apply(service, Event.START)
                    await service.wait_for(SETTLED)
            finally:
                while self._held:  # the start called off before their turn
                    await held.call_off(self._held.popitem()[1], LEFTOVER_GRACE_S)

    async def stop_all(self) -> None:
        self._closing = True
        for service in reversed(self.services.values()):
            self.apply(service, Event.STOP)
            with anyio.move_on_after(self._grace + 5.0):
                await service.wait_for({ServiceState.STOPPED})

    async def restart(self, name: str | None) -> None:
        """The owner's restart: one service, or all (stopped in reverse, started in order)."""
        if name is not None:
            self.apply(self.services[name], Event.RESTART)
            await self.services[name].wait_for(SETTLED)
            return
        for service in reversed(self.services.values()):
            self.apply(service, Event.STOP)
            await service.wait_for({ServiceState.STOPPED})
        for service in self.services.values():
            self.apply(service, Event.RESTART)
            await service.wait_for(SETTLED)

    async def stop(self, name: str) -> None:
        """The owner's stop of one service: it stays stopped until the owner restarts it."""
        self.apply(self.services[name], Event.STOP)
        await self.services[name].wait_for({ServiceState.STOPPED})

    # -- the table, and the I/O it asks for ----------------------------------------------------

    def apply(self, service: Service, event: Event) -> None:
        """Move `service` by the table, and do what the table says. Never awaits."""
        if self._closing and event in (Event.START, Event.RESTART):
            return
        before = service.life
        service.life, action = step(before, event, self._clock(), self._policy)
        if service.life.state is not before.state:
            log.info(
                "%s: %s -> %s on %s", service.spec.name, before.state, service.life.state, event
            )
            if service.life.state is ServiceState.FAILED and event is Event.CANNOT_START:
                service.log.note(
                    f"{service.spec.name} failed: it cannot start until its setup is mended "
                    f"(see the line above); not restarting it"
                )
            elif service.life.state is ServiceState.FAILED:
                service.log.note(
                    f"{service.spec.name} failed: more than {self._policy.max_restarts} "
                    f"restarts in {self._policy.window:g} s; not restarting it"
                )
            self._publish_states()
        if action is Action.SPAWN:
            service.generation += 1
            service.terminate_asked = False
            self._spawn(self._run_process, service, service.generation)
        elif action is Action.TERMINATE:
            if service.process is not None:
                self._spawn(service.terminate, service.process, self._grace)
            else:
                service.terminate_asked = True  # it is being started: stop it once it is
        elif action is Action.WAIT:
            assert service.life.retry_at is not None
            service.log.note(f"restarting in {service.life.backoff:g} s")
            self._spawn(self._wake, service, service.life.retry_at)
        service.notify()

    def _spawn(self, function: Callable[..., Any], *args: Any) -> None:
        assert self._tasks is not None, "apply() before run()"
        self._tasks.start_soon(function, *args)

    def _publish_states(self) -> None:
        """Write every service's state to `{run}/services.json`, for brokerd (best effort)."""
        entries = {
            name: service_states.Entry(service.life.state.value, service.last_exit)
            for name, service in self.services.items()
        }
        service_states.write(self.home.run, service_states.Snapshot(os.getpid(), entries))

    async def _run_process(self, service: Service, generation: int) -> None:
        spec = service.spec
        async with self._children:  # a sweep must not take it for a leftover before it is known
            process = self._held.pop(spec.name, None)
            try:
                if process is None:
                    process = await held.open_held(spec.argv(self.home), self.home.root, self._env)
            except OSError as error:
                service.last_exit = f"cannot start: {one_line(error)}"
                service.log.note(service.last_exit)
                self.apply(service, Event.EXITED)
                return
            service.process = process
        self.on_child(spec.name, process.pid)
        service.log.note(f"started {spec.name} (pid {process.pid})")
        await held.let_go(process)
        if service.terminate_asked:
            self._spawn(service.terminate, process, self._grace)
        try:
            async with anyio.create_task_group() as watch:
                drained = anyio.Event()
                watch.start_soon(service.pump, process, drained)
                watch.start_soon(self._probe, service, process, generation)
                code = await process.wait()
                # Whatever it left in its group.
                process_tree.signal_group(process.pid, signal.SIGKILL)
                with anyio.move_on_after(1.0):
                    await drained.wait()
                watch.cancel_scope.cancel()
        finally:
            if process.returncode is None:  # cancelled by a bug: never leave it running
                process_tree.signal_group(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await process.aclose()
                service.process = None
                await self._stop_leftovers(service)
        service.last_exit = describe_exit(code)
        self.on_child(spec.name, None)
        service.log.note(f"{spec.name} exited ({service.last_exit})")
        self.apply(service, Event.CANNOT_START if code == SETUP_ERROR_EXIT else Event.EXITED)

    async def _probe(self, service: Service, process: anyio.abc.Process, generation: int) -> None:
        """`ping` the service's socket until its pong (from this very process) or the deadline."""
        deadline = self._clock() + self._ready_timeout
        assert self._zmq is not None
        ready = await service.answers_ping(
            self._zmq,
            self.config,
            self.home,
            pid=process.pid,
            generation=generation,
            deadline=deadline,
            clock=self._clock,
        )
        if service.generation == generation and process.returncode is None:
            if ready:
                self.apply(service, Event.READY)
            else:
                name = service.spec.name
                service.log.note(f"{name} did not answer ping in {self._ready_timeout:g} s")
                self.apply(service, Event.NOT_READY)

    async def _stop_leftovers(self, service: Service | None) -> None:
        """`bxctl.supervisor.service.stop_leftovers`, as a child subreaper only (else nothing is
        ours), and never while a service's process is being started."""
        if not self._adopts:
            return
        async with self._children:
            await stop_leftovers(self._leftovers, service)

    def _leftovers(self) -> list[psutil.Process]:
        """Our children that are no service's process: adopted from an exited service."""
        ours = {s.process.pid for s in self.services.values() if s.process is not None}
        ours |= {process.pid for process in self._held.values()}
        return [p for p in process_tree.children(os.getpid()) if p.pid not in ours]

    async def _wake(self, service: Service, at: float) -> None:
        await anyio.sleep(max(0.0, at - self._clock()))
        self.apply(service, Event.BACKOFF_OVER)

    # -- the socket ----------------------------------------------------------------------------

    @property
    def routes(self) -> Routes[SupervisorAnswer]:
        """The supervisor socket's table."""
        return Routes(
            SupervisorRequest,
            REFUSAL,
            Route(SupervisorStatus, self._status),
            Route(SupervisorRestart, self._restart_asked),
            Route(SupervisorStop, self._stop_asked),
        )

    async def _status(self, message: SupervisorStatus) -> SupervisorReport:
        return self.report(message.id)

    async def _restart_asked(self, message: SupervisorRestart) -> SupervisorReport | Error:
        refused = self._refused(message.id, message.service)
        if refused is not None:
            return refused
        async with self._owner:
            await self.restart(message.service)
        return self.report(message.id)

    async def _stop_asked(self, message: SupervisorStop) -> SupervisorReport | Error:
        if message.service is None:
            self.request_stop()  # again while stopping: the same answer
            return self.report(message.id)
        refused = self._refused(message.id, message.service)
        if refused is not None:
            return refused
        async with self._owner:
            await self.stop(message.service)
        return self.report(message.id)

    def _refused(self, request_id: str, service: str | None) -> Error | None:
        """Why the owner's restart or stop of `service` (None: all) cannot be done now."""
        if service is not None and service not in self.services:
            known = ", ".join(self.services)
            return Error(request_id, ErrorCode.BAD_MESSAGE, f"no service {service!r} ({known})")
        if self._closing:
            return Error(request_id, ErrorCode.UNAVAILABLE, "the box is stopping")
        return None

    def report(self, request_id: str) -> SupervisorReport:
        now, wall = self._clock(), now_ms()
        infos = [service.info(now, wall) for service in self.services.values()]
        served = console_served(self.home, infos)
        address = served.address if served is not None else None
        return SupervisorReport(
            request_id, os.getpid(), self.config.sandbox.mode, tuple(infos), address
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bxctl.supervisor.runner", description=__doc__)
    parser.add_argument("--home", metavar="DIR", help="the home folder (else $BX_HOME)")
    parser.add_argument(
        "--service",
        action="append",
        default=[],
        metavar="SPEC",
        help="a service to supervise, in order (default: the four); NAME=MODULE:SOCKET for tests",
    )
    options = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s supervisor %(message)s"
    )
    try:
        home = Home.resolve(options.home, os.environ)
        config = load_config(home.config)
        box = Box.open(home, endpoint_of(home, config))
        supervisor = Supervisor(home, config, parse_specs(options.service), on_child=box.child)
    except (HomeError, ConfigError, runlock.AlreadyRunning, SupervisorError, ValueError) as error:
        print(f"supervisor: {one_line(error)}", file=sys.stderr)
        return 1
    except OSError as error:  # the run folder or the lock file
        print(f"supervisor: {one_line(error)}", file=sys.stderr)
        return 1
    try:
        anyio.run(supervisor.run)
    except SupervisorError as error:
        print(f"supervisor: {error}", file=sys.stderr)
        return 1
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
