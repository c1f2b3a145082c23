"""`bxctl up | down | restart | status | logs` (SPEC §13): the owner's side of the supervisor.

`up` checks the config and the grants before anything starts, then runs the supervisor
detached (or in this process with `--foreground`) and waits until every service answers.
The others ask the running supervisor on its socket, named by `{home}/run/supervisor.pid`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import anyio
import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed
import typer

from bxcore import report as brokerd_report
from bxcore import runlock
from bxcore.config import Config, ConfigError, load_config
from bxcore.home import SERVICES, Home, HomeError
from bxcore.messages import (
    Error,
    ServiceState,
    SupervisorReport,
    SupervisorRestart,
    SupervisorStatus,
    SupervisorStop,
)
from bxcore.visible import visible
from bxctl import mcp_cmds, model_reach, pidfile, tokens_view
from bxctl.box_view import (
    UNSANDBOXED,
    LedgerView,
    StartView,
    ledger_view,
    measure,
    service_json,
    show_ledger,
    show_started,
    show_warnings,
    status_table,
    warn,
)
from bxctl.console_cmd import console_hint
from bxctl.demo import prepare as prepare_demo
from bxctl.init import init_home
from bxctl.logs import Follower, rotate_if_over, rotated, tail
from bxctl.output import fail, print_json, say
from bxctl.pidfile import GRACE_S, Box
from bxctl.safety import box_warnings, sandbox_report
from bxctl.specs import ServiceSpec, parse_specs
from bxctl.supervisor import Supervisor, SupervisorError
from bxctl.supervisor import main as supervisor_main
from bxctl.supervisor_link import NoAnswer, ask, request_id
from services.brokerd.core.records import parse_line
from services.brokerd.grants_folder import read_folder
from services.brokerd.ledger_scan import lines_backwards

UP_TIMEOUT_S = 180.0  # a service may take 10 s to answer, and back off five times
RUNNING = ServiceState.RUNNING


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


def _running(home: Home) -> pidfile.BoxRecord | None:
    return pidfile.running(home.pidfile("supervisor"))


def _report(record: pidfile.BoxRecord, timeout: float = 5.0) -> SupervisorReport:
    try:
        report = ask(record.endpoint, SupervisorStatus(request_id()), timeout)
    except NoAnswer as error:
        fail(f"{error} (its pid is {record.supervisor.pid})")
    if not isinstance(report, SupervisorReport):
        fail(f"the supervisor answered {type(report).__name__}: {report}")
    return report


# -- up ----------------------------------------------------------------------------------------


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
    for grant in read_folder(home.grants).invalid:
        warn(f"grant {grant.id} is invalid and never matches: {grant.problem}")
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
    home = _home(ctx)
    if demo:
        prepare_demo(home)
    config = _check_home(home)
    try:
        specs = parse_specs(service or [])
    except ValueError as error:
        fail(str(error), code=2)
    record = _running(home)
    if record is not None:
        _already_running(record)
        return
    if foreground:
        _up_foreground(home, config, specs)
    else:
        _up_detached(home, config, service or [])


def _already_running(record: pidfile.BoxRecord) -> None:
    report = _report(record)
    say(f"already running (supervisor pid {report.pid})")
    if report.console:
        say(f"console: {console_hint(report.console)}")
    _next_steps()


def _next_steps() -> None:
    say('talk to the agent: bxctl chat "hello"   (bxctl --help for the rest)')


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
                record = _running(home)
                if record is not None:  # another `up` won the race
                    _already_running(record)
                    return
                last = tail(log_path, 1)
                fail(f"the supervisor stopped: {last[0] if last else 'see ' + str(log_path)}")
            with contextlib.suppress(NoAnswer):
                answer = ask(endpoint, SupervisorStatus(request_id()), 0.5)
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
    hint = model.hint(0.2) if model is not None else None
    if hint is not None:
        say(hint, style="yellow")
    _next_steps()


def _up_foreground(home: Home, config: Config, specs: Sequence[ServiceSpec]) -> None:
    try:
        supervisor = Supervisor(home, config, specs)
        box = Box.open(home, supervisor.endpoint)
    except (SupervisorError, runlock.AlreadyRunning, HomeError) as error:
        fail(str(error))
    supervisor.on_child = box.child
    rotate_if_over(home.log("supervisor"))
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
        answer = ask(record.endpoint, SupervisorStop(request_id()), 5.0)
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
    record = _running(home)
    if record is None:
        fail("the box is not running; start it with `bxctl up`")
    try:
        answer = ask(record.endpoint, SupervisorRestart(request_id(), service), UP_TIMEOUT_S)
    except NoAnswer as error:
        fail(str(error))
    if isinstance(answer, Error):
        fail(answer.message)
    assert isinstance(answer, SupervisorReport)
    for info in answer.services:
        if service is None or info.name == service:
            style = "green" if info.state is RUNNING else "red"
            say(f"{info.name:<10} {info.state} (pid {info.pid or '-'})", style=style)
    show_started(home, answer, fatal=True)


# -- status ------------------------------------------------------------------------------------


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Each service: state, pid, uptime, restarts, memory and CPU; the ledger's state; the
    tokens spent today (and the day's cap); and
    what about the home is less safe than it should be. Exit 3 unless all run and the
    ledger is ok."""
    home = _home(ctx)
    warnings = box_warnings(home)
    record = _running(home)
    if record is None:
        if as_json:
            print_json({"running": False, "services": [], "warnings": warnings})
        else:
            say("not running")
            show_warnings(warnings)
        raise typer.Exit(3)
    report = _report(record)
    usage = measure([info.pid for info in report.services if info.pid is not None])
    services = [service_json(info, usage.get(info.pid or 0)) for info in report.services]
    unsandboxed = report.sandbox == "none"
    ledger = _ledger(home, report)
    mcp = mcp_cmds.server_rows(home) if _has_mcp(home) else []
    tokens = tokens_view.today(home, report.services)
    if as_json:
        print_json(
            {
                "running": True,
                "mcp": mcp,
                "supervisor": report.pid,
                "sandbox": report.sandbox,
                "unsandboxed": unsandboxed,
                "tools": sandbox_report(home),
                "console": report.console,
                "services": services,
                "ledger": None if ledger is None else ledger.json(),
                "tokens": tokens_view.tokens_json(tokens),
                "warnings": warnings,
            }
        )
    else:
        say(f"supervisor pid {report.pid}, sandbox {report.sandbox}{_tools(home)}")
        if unsandboxed:
            say(UNSANDBOXED, style="red")
        status_table(services)
        show_ledger(ledger)
        if tokens is not None:
            text, style = tokens_view.tokens_line(tokens)
            say(text, style=style)
        for row in mcp:
            if row["flagged"]:
                changed = ", ".join([*row["changed"], *row["new"]])
                say(
                    f"MCP server {row['name']}: tools changed or new since the owner trusted "
                    f"them ({changed}): refused until `bxctl mcp trust {row['name']}`",
                    style="red",
                )
            elif row["problem"]:
                say(f"MCP server {row['name']}: {row['problem']}", style="red")
        if report.console:
            say(f"console: {console_hint(report.console)}")
        show_warnings(warnings)
    if any(info.state is not RUNNING for info in report.services):
        raise typer.Exit(3)
    if ledger is not None and ledger.bad:
        raise typer.Exit(3)


def _has_mcp(home: Home) -> bool:
    try:
        return bool(load_config(home.config).mcp)
    except ConfigError:
        return False


#: A report older than brokerd's start by more than this is a former brokerd's. A restart
#: comes at least 0.5 s (the first backoff) after the exit, so the two cannot be confused.
STALE_S = 0.25


def _ledger(home: Home, report: SupervisorReport) -> LedgerView | None:
    """The ledger's state as brokerd last reported it, if this brokerd did (`bxcore.report`)."""
    brokerd = next((info for info in report.services if info.name == "brokerd"), None)
    fresh = False
    if brokerd is not None and brokerd.pid is not None:
        with contextlib.suppress(OSError, psutil.Error):
            written = (home.run / brokerd_report.NAME).stat().st_mtime
            fresh = written >= psutil.Process(brokerd.pid).create_time() - STALE_S
    view = ledger_view(brokerd_report.read(home).get("ledger"), brokerd, fresh=fresh)
    if view is not None and view.state == "ok":
        view = replace(view, seq=newest_seq(home.ledger) or view.seq)  # the report's is old
    return view


def newest_seq(ledger: Path) -> int | None:
    """The seq of the ledger's last whole record, read from its end (never the whole file);
    None when there is none or it cannot be read."""
    with contextlib.suppress(OSError), open(ledger, "rb") as f:
        for line in lines_backwards(f, os.fstat(f.fileno()).st_size):
            record = parse_line(line)
            seq = record.get("seq") if isinstance(record, dict) else None
            if isinstance(seq, int) and not isinstance(seq, bool):
                return seq
    return None


def _tools(home: Home) -> str:
    """`, tools run as nobody, shell memory bounded by a cgroup`, from brokerd's report."""
    report = sandbox_report(home)
    if report is None or report.get("mode") != "bwrap" or report.get("problem"):
        return ""
    user = str(report.get("user", "?"))
    try:
        name = pwd.getpwuid(int(user.split(":")[0])).pw_name
    except (KeyError, ValueError):
        name = user
    memory = "bounded by a cgroup" if report.get("memory") else "bounded per process"
    return f", tools run as {name}, shell memory {memory}"


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
