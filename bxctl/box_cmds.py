"""`bxctl up | down | restart | status | logs` (SPEC §13): the owner's side of the supervisor.

`up` (`bxctl.up_cmd`) starts the box; `status` (`bxctl.status_cmd`) says how it is. The others
are here: they ask the running supervisor on its socket, named by `{home}/run/supervisor.pid`,
or read the services' logs. `register` adds all five to `bxctl`, in that order.
"""

from __future__ import annotations

import contextlib
import time
from typing import Annotated

import typer

from bxcore.home.layout import SERVICES, Home
from bxcore.visible import visible
from bxcore.wire.messages import Error, ServiceState, SupervisorRestart, SupervisorStop
from bxctl.box_view import show_started, warn
from bxctl.output import fail, say
from bxctl.status_cmd import status
from bxctl.supervisor import pidfile
from bxctl.supervisor.link import NoAnswer, ask, request_id, running
from bxctl.supervisor.logs import Follower, rotated, tail
from bxctl.supervisor.pidfile import GRACE_S
from bxctl.up_cmd import up

RUNNING = ServiceState.RUNNING


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


# -- down, restart -----------------------------------------------------------------------------


def down(ctx: typer.Context) -> None:
    """Stop every service (in reverse order) and the supervisor; leave no process behind."""
    home = _home(ctx)
    path = home.pidfile("supervisor")
    record = pidfile.running(path)
    if record is None:
        left = pidfile.sweep(home.root, pidfile.read(path), GRACE_S, strays=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # stale: its supervisor is gone
        say(f"not running (stopped {left} leftover processes)" if left else "not running")
        return
    try:
        answer = ask(record.endpoint, SupervisorStop(request_id()))
        if isinstance(answer, Error):
            warn(f"the supervisor answered: {answer.message}")
    except NoAnswer:
        _signal_supervisor(record)
    # each service: SIGTERM, at most the grace, SIGKILL; then a margin
    wait = (len(record.children) or len(SERVICES)) * (GRACE_S + 1.0) + 5.0
    if not pidfile.wait_gone(record.supervisor, wait):
        warn(f"the supervisor (pid {record.supervisor.pid}) did not stop in {wait:g} s: killed")
        process = record.supervisor.process()
        if process is not None:
            with contextlib.suppress(Exception):
                process.kill()
        pidfile.wait_gone(record.supervisor, 5.0)
    left = pidfile.sweep(home.root, record, GRACE_S, strays=True)
    if left:
        warn(f"stopped {left} process(es) that outlived the supervisor")
    say("stopped")


def _signal_supervisor(record: pidfile.BoxRecord) -> None:
    process = record.supervisor.process()
    if process is not None:
        with contextlib.suppress(Exception):
            process.terminate()  # it stops the services on SIGTERM as on `supervisor_stop`


def restart(
    ctx: typer.Context,
    service: Annotated[
        str | None, typer.Argument(help="One service; all of them (in order) when absent.")
    ] = None,
) -> None:
    """Restart one service, or all of them."""
    home = _home(ctx)
    record = running(home)
    if record is None:
        fail("the box is not running; start it with `bxctl up`")
    try:
        answer = ask(record.endpoint, SupervisorRestart(request_id(), service))
    except NoAnswer as error:
        fail(str(error))
    if isinstance(answer, Error):
        fail(answer.message)
    for info in answer.services:
        if service is None or info.name == service:
            style = "green" if info.state is RUNNING else "red"
            say(f"{info.name:<10} {info.state} (pid {info.pid or '-'})", style=style)
    show_started(home, answer, fatal=True)


# -- logs --------------------------------------------------------------------------------------


def logs(
    ctx: typer.Context,
    service: Annotated[str | None, typer.Argument(help="One service; all when absent.")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Follow until Ctrl-C.")] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", min=0, help="How many lines.")] = 50,
) -> None:
    """The last lines of a service's log (or of every log, each line named), and follow."""
    home = _home(ctx)
    if service is not None:
        try:
            path = home.log(service)
        except ValueError:
            fail(f"not a service name: {service!r}", code=2)
        if not path.exists() and not rotated(path, 1).exists():
            fail(f"no log for {service} yet ({path})")
        paths = {service: path}
    else:
        found = {p.name[: -len(".log")]: p for p in home.logs.glob("*.log")}
        order = [*SERVICES, "supervisor"]
        names = [n for n in order if n in found] + sorted(n for n in found if n not in order)
        paths = {name: found[name] for name in names}
        if not paths:
            if not follow:
                say(f"no logs yet in {home.logs}")
                return
            paths = {name: home.log(name) for name in SERVICES}  # wait for them to appear
    width = max((len(name) for name in paths), default=0)

    def show(name: str, line: str) -> None:
        shown = visible(line)  # a log may quote the model or a tool
        typer.echo(f"{name:<{width}} | {shown}" if service is None else shown)

    followers = {name: Follower(path) for name, path in paths.items()} if follow else {}
    for name, path in paths.items():
        for line in tail(path, lines):
            show(name, line)
    if not follow:
        return
    try:
        while True:
            for name, follower in followers.items():
                for line in follower.read():
                    show(name, line)
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for follower in followers.values():
            follower.close()


def register(app: typer.Typer) -> None:
    """Add these commands to `bxctl`."""
    app.command()(up)
    app.command()(down)
    app.command()(restart)
    app.command()(status)
    app.command()(logs)
