"""What every daemon does the same way (SPEC §15): `--home`, config, the run lock, logging to
standard error, a ZeroMQ context, and a clean stop on SIGTERM or SIGINT.

`run_daemon(name, serve)` returns only when the daemon has stopped: 0 after a signal, 1 with
one line on standard error when it could not start (a bad config, another instance, …).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import zmq
import zmq.asyncio

from bxcore import runlock
from bxcore.config import CURVE_SOCKETS, Config, ConfigError, load_config
from bxcore.curve import KeyFileError
from bxcore.errors import one_line
from bxcore.home import SOCKETS, Home, HomeError


class StartError(Exception):
    """The daemon cannot start; the text is the one line the owner reads."""


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
            raise StartError(
                f"[sockets] {socket}: tcp:// needs CURVE, which only admin and gateway have"
            )
        return endpoint


Serve = Callable[[Context], Awaitable[None]]


def run_daemon(name: str, serve: Serve, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=name, description=f"boxmaker's {name}")
    parser.add_argument("--home", metavar="DIR", help="the home folder (else $BX_HOME)")
    options = parser.parse_args(argv)
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
    except (HomeError, ConfigError, runlock.AlreadyRunning, OSError) as error:
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
        return 1
    except (StartError, KeyFileError, OSError) as error:
        print(f"{name}: {one_line(error)}", file=sys.stderr)
        return 1
    finally:
        lock.release()
    return 0


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
        ctx.destroy(linger=0)
        log.info("stopped")
