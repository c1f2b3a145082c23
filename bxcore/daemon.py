"""What every daemon does the same way (SPEC §15): `--home`, config, the run lock, logging to
standard error, a ZeroMQ context, and a clean stop on SIGTERM or SIGINT.

`run_daemon(name, serve)` returns only when the daemon has stopped: 0 after a signal; with
one line on standard error when it could not start, 78 (`SETUP_ERROR_EXIT`) when only the
owner can mend it (a bad config, a key missing, a socket path taken: the supervisor does not
retry it) and 1 otherwise (another instance, a store that cannot be opened, …).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

# anyio imports its asyncio backend on the first `anyio.run`. Imported here, it is loaded
# while a held daemon waits for its turn (`START_GATE`), not after: 30-50 ms off each
# service's start, one after another (bench startup).
import anyio._backends._asyncio
import zmq
import zmq.asyncio

from bxcore.config.file import CURVE_SOCKETS, Config, ConfigError, load_config
from bxcore.curve import KeyFileError
from bxcore.errors import SETUP_ERROR_EXIT, SetupError, StartError, one_line
from bxcore.home import runlock
from bxcore.home.layout import SOCKETS, Home, HomeError

__all__ = [
    "SETUP_ERROR_EXIT",
    "START_GATE",
    "Context",
    "Serve",
    "SetupError",
    "StartError",
    "run_daemon",
]

#: Set to "stdin" by a supervisor that starts the daemon early (`bxctl.supervisor.runner`): the
#: daemon imports what it needs, then waits for one byte on standard input before it reads its
#: config or binds a socket, so the supervisor keeps SPEC §13's order while the imports of all
#: four overlap. End of file instead (the supervisor gone, or the start called off): exit 0.
START_GATE = "BX_START_GATE"

#: How long the ZeroMQ context may take to end. Every socket is closed with LINGER 0 first, so
#: it takes milliseconds; past this a socket was left open somewhere (a bug), and the daemon
#: says so and exits rather than hang with nothing logged (issue 10).
DESTROY_LIMIT_S = 5.0


@dataclass(frozen=True)
class Context:
    """What a daemon's `serve` is given."""

    name: str
    home: Home
    config: Config
    zmq: zmq.asyncio.Context

    def endpoint(self, socket: str) -> str:
        """The endpoint of `socket`: the config's override or ipc in the run folder."""
        assert socket in SOCKETS
        endpoint = self.config.sockets.endpoint(socket, self.home)
        if endpoint.startswith("tcp://") and socket not in CURVE_SOCKETS:
            raise SetupError(
                f"[sockets] {socket}: tcp:// needs CURVE, which only admin and gateway have"
            )
        return endpoint


Serve = Callable[[Context], Awaitable[None]]


def run_daemon(name: str, serve: Serve, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=name, description=f"boxmaker's {name}")
    parser.add_argument("--home", metavar="DIR", help="the home folder (else $BX_HOME)")
    options = parser.parse_args(argv)
    if not _let_go():
        return 0
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
    )
    try:
        home = Home.resolve(options.home, os.environ)
        config = load_config(home.config)
        home.ensure_run()
        lock = runlock.take(home.lock(name), name)
    except (HomeError, ConfigError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return SETUP_ERROR_EXIT
    except (runlock.AlreadyRunning, OSError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    if home.run_note:
        logging.getLogger(name).info("%s", home.run_note)
    try:
        anyio.run(_main, name, home, config, serve)
    except BaseExceptionGroup as group:  # a task group's wrapping of one start error
        reason = _start_error(group)
        if reason is None:
            raise
        print(f"{name}: {one_line(reason)}", file=sys.stderr)
        return _exit_status(reason)
    except (StartError, KeyFileError, OSError) as error:
        print(f"{name}: {one_line(error)}", file=sys.stderr)
        return _exit_status(error)
    finally:
        lock.release()
    return 0


def _let_go() -> bool:
    """False when a supervisor held this start (`START_GATE`) and called it off."""
    if os.environ.pop(START_GATE, None) != "stdin":
        return True
    try:
        return os.read(0, 1) == b"g"
    except OSError:
        return False


def _exit_status(reason: BaseException) -> int:
    """78 for what only the owner can mend (the supervisor does not retry it), else 1."""
    return SETUP_ERROR_EXIT if isinstance(reason, SetupError | KeyFileError) else 1


def _start_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first error in `group` that is a reason not to start, if any."""
    matched = group.subgroup(lambda e: isinstance(e, StartError | KeyFileError | OSError))
    if matched is None:
        return None
    leaf: BaseException = matched
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


async def _main(name: str, home: Home, config: Config, serve: Serve) -> None:
    ctx = zmq.asyncio.Context()
    log = logging.getLogger(name)
    try:
        async with anyio.create_task_group() as tasks:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for number in signals:
                        log.info("stopping on %s", signal.Signals(number).name)
                        tasks.cancel_scope.cancel()
                        return

            tasks.start_soon(stop_on_signal)
            await serve(Context(name, home, config, ctx))
            tasks.cancel_scope.cancel()
    finally:
        _destroy(ctx, log)
        log.info("stopped")


def _destroy(ctx: zmq.asyncio.Context, log: logging.Logger) -> None:
    """Close every socket (LINGER 0) and end the context; never wait for it for long."""
    watchdog = threading.Timer(DESTROY_LIMIT_S, _stuck, args=(log,))
    watchdog.daemon = True
    watchdog.start()
    try:
        ctx.destroy(linger=0)
    finally:
        watchdog.cancel()


def _stuck(log: logging.Logger) -> None:
    log.error("ZeroMQ did not close in %g s (a socket was left open): exiting", DESTROY_LIMIT_S)
    logging.shutdown()
    os._exit(1)
