"""`bxctl up` (SPEC §13): checks the config and the grants before anything starts, then runs the
supervisor detached (or in this process with `--foreground`) and waits until every service
answers, showing each as it comes up; then asks brokerd whether its ledger can be written, and
fails with one line when it cannot (cut, broken, failed, or on a full disk, issue 28): the box
stays up, so that the owner can look and mend it (`bxctl audit verify`, `bxctl audit accept`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import anyio
import typer

from bxcore.config.file import Config, ConfigError, load_config
from bxcore.console_link import console_served
from bxcore.home import runlock
from bxcore.home.layout import Home, HomeError
from bxcore.wire.asking import Patience
from bxcore.wire.messages import ServiceState, SupervisorReport, SupervisorStatus
from bxctl import model_reach
from bxctl.box_view import StartView, show_moved, show_started, warn
from bxctl.console_cmd import console_hint
from bxctl.demo import prepare as prepare_demo
from bxctl.grant_cmds import checked_grants
from bxctl.init import init_home
from bxctl.ledger_link import ask_ledger
from bxctl.ledger_view import LedgerView, ledger_view
from bxctl.output import fail, invocation, say
from bxctl.supervisor import pidfile
from bxctl.supervisor.link import NoAnswer, ask, request_id, running, status_report
from bxctl.supervisor.logs import rotate_if_over, tail
from bxctl.supervisor.pidfile import Box
from bxctl.supervisor.runner import Supervisor, SupervisorError, endpoint_of
from bxctl.supervisor.runner import main as supervisor_main
from bxctl.supervisor.specs import ServiceSpec, parse_specs
from services.brokerd.core.grant_check import said

UP_TIMEOUT_S = 180.0  # a service may take 10 s to answer, and back off five times
POLL = Patience(1, 0.5, "`up` asks again every 20 ms until the box runs; a quick look each time")
LOAD_WAIT_S = 10.0  # how long `up` waits for brokerd to read its ledger (an index: at once)


def _check_home(home: Home) -> Config:
    """`bxctl init` on a fresh home; the config, which must be good; the grants, warned of."""
    try:
        made = init_home(home)
    except HomeError as error:
        fail(str(error))
    if made:
        say(f"initialised {home.root}")
    try:
        config = load_config(home.config)
    except ConfigError as error:
        fail(f"{error}; nothing was started")
    for grant in checked_grants(home).invalid:
        warn(said(grant))
    return config


def up(
    ctx: typer.Context,
    foreground: Annotated[
        bool, typer.Option("--foreground", help="Supervise in this process until Ctrl-C.")
    ] = False,
    service: Annotated[
        list[str] | None,
        typer.Option("--service", hidden=True, help="For tests: NAME or NAME=MODULE:SOCKET."),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option("--demo", help="A demo box: the bundled scripted model and a workspace."),
    ] = False,
) -> None:
    """Start the box: brokerd, memoryd, loopd and gatewayd, supervised."""
    home: Home = ctx.obj.home
    if demo:
        prepare_demo(home)
    config = _check_home(home)
    try:
        specs = parse_specs(service or [])
    except ValueError as error:
        fail(str(error), code=2)
    record = running(home)
    if record is not None:
        _already_running(home, record)
        return
    if foreground:
        _up_foreground(home, config, specs)
    else:
        _up_detached(home, config, service or [])


def _already_running(home: Home, record: pidfile.BoxRecord) -> None:
    report = status_report(record)
    say(f"already running (supervisor pid {report.pid})")
    served = console_served(home, report.services)
    if served is not None:
        show_moved(served)
        say(console_hint(served))
    _next_steps()


def _next_steps() -> None:
    bxctl = invocation()
    say(f'talk to the agent: {bxctl} chat "hello"   ({bxctl} --help for the rest)')


def _fork_supervisor(home: Home, service_args: Sequence[str], log_path: Path) -> int:
    """Start the supervisor in the background and return its pid.

    It is forked, not started afresh: this process has imported most of what it needs, which
    saves a fifth of `bxctl up`'s time (bench startup). Nothing here has made a thread or a
    ZeroMQ context yet, so the fork is safe; the child leaves the terminal's session."""
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1
    try:
        os.setsid()  # not stopped by the terminal's Ctrl-C or hang-up
        os.chdir(home.root)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        argv = ["--home", str(home.root)]
        for text in service_args:
            argv += ["--service", text]
        code = supervisor_main(argv)
    except BaseException:  # the child must never return into the CLI
        traceback.print_exc()
    finally:
        os._exit(code)


def _up_detached(home: Home, config: Config, service_args: Sequence[str]) -> None:
    log_path = home.log("supervisor")
    rotate_if_over(log_path)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = _fork_supervisor(home, service_args, log_path)
    model = model_reach.reach(config.model)  # after the fork: a thread must not be forked
    endpoint = config.sockets.endpoint("supervisor", home)
    deadline = time.monotonic() + UP_TIMEOUT_S
    view = StartView()
    report: SupervisorReport | None = None
    try:
        while True:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):  # the supervisor stopped
                view.close()
                record = running(home)
                if record is not None:  # another `up` won the race
                    _already_running(home, record)
                    return
                last = tail(log_path, 1)
                fail(f"the supervisor stopped: {last[0] if last else 'see ' + str(log_path)}")
            with contextlib.suppress(NoAnswer):
                answer = ask(endpoint, SupervisorStatus(request_id()), POLL)
                if isinstance(answer, SupervisorReport):
                    report = answer
                    if view.update(report):
                        break
            if time.monotonic() > deadline:
                fail(f"the box did not start in {UP_TIMEOUT_S:g} s; see `bxctl status`")
            time.sleep(0.02)
    finally:
        view.close()
    assert report is not None
    show_started(home, report, fatal=True)
    check_ledger(home, report, fatal=True)
    hint = model.hint(0.2) if model is not None else None
    if hint is not None:
        say(hint, style="yellow")
    _next_steps()


def check_ledger(home: Home, report: SupervisorReport, *, fatal: bool) -> None:
    """A box whose ledger cannot be written runs no call: say so in one line, and fail (exit
    1) when `fatal`. Waits a while for a ledger being read; one still loading is said."""
    brokerd = next((info for info in report.services if info.name == "brokerd"), None)
    if brokerd is None or brokerd.state is not ServiceState.RUNNING:
        return
    deadline = time.monotonic() + LOAD_WAIT_S
    view: LedgerView | None = None
    while view is None or (view.state == "loading" and time.monotonic() < deadline):
        if view is not None:
            time.sleep(0.05)
        view = ledger_view(ask_ledger(home), brokerd, home.audit)
    assert view is not None
    problem = view.up_problem()
    if problem is not None:
        line = f"{problem} (the box is up)"
        if fatal:
            fail(line)
        warn(line)
    elif view.state != "ok":
        say(view.line()[0], style="yellow")


def _up_foreground(home: Home, config: Config, specs: Sequence[ServiceSpec]) -> None:
    try:
        box = Box.open(home, endpoint_of(home, config))
        supervisor = Supervisor(home, config, specs, on_child=box.child)
    except (SupervisorError, runlock.AlreadyRunning, HomeError) as error:
        fail(str(error))
    rotate_if_over(home.log("supervisor"))
    # made 0600 first, as the detached supervisor's log is: FileHandler would follow the umask
    os.close(os.open(home.log("supervisor"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    handler = logging.FileHandler(home.log("supervisor"))
    handler.setFormatter(logging.Formatter("%(asctime)s supervisor %(message)s"))
    logger = logging.getLogger("supervisor")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def watch() -> None:
        view = StartView()
        try:
            while not view.update(report := supervisor.report("up")):
                await anyio.sleep(0.1)
        finally:
            view.close()
        show_started(home, report, fatal=False)
        await anyio.to_thread.run_sync(lambda: check_ledger(home, report, fatal=False))
        say("running in the foreground: Ctrl-C stops the box")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            await supervisor.run()
            tasks.cancel_scope.cancel()

    try:
        anyio.run(main)
    except SupervisorError as error:
        fail(str(error))
    finally:
        box.close()
        logger.removeHandler(handler)
        handler.close()
    say("stopped")
