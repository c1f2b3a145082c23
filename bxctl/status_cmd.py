"""`bxctl status` (SPEC §13): each service's state, pid, uptime, restarts, memory and CPU as
the running supervisor reports them; the ledger's state, asked of brokerd now, with the end of
the ledger (issues 10, 28); each of the home's disks that is full; the MCP servers, the tokens
spent today, and what about the home is less safe than it should be. In a table, or as JSON
for scripts.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from bxcore import matrix_report, mcp_state
from bxcore.config.file import ConfigError, load_config
from bxcore.console_link import console_served
from bxcore.home import disk
from bxcore.home.layout import Home
from bxcore.wire.messages import ServiceState, SupervisorReport
from bxctl import mcp_cmds, tokens_view
from bxctl.box_view import (
    UNSANDBOXED,
    measure,
    service_json,
    show_moved,
    show_warnings,
    status_table,
)
from bxctl.console_cmd import console_hint
from bxctl.ledger_link import ask_ledger
from bxctl.ledger_view import LedgerView, disk_json, disk_lines, ledger_view
from bxctl.output import invocation, print_json, say
from bxctl.safety import box_warnings, sandbox_report
from bxctl.supervisor.link import running, status_report
from services.brokerd.core.records import parse_line
from services.brokerd.face import lines_backwards


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Each service: state, pid, uptime, restarts, memory and CPU; the ledger's state; the
    tokens spent today (and the day's cap); and
    what about the home is less safe than it should be. Exit 3 unless all run, the ledger is
    ok and no disk of the home's is full."""
    home: Home = ctx.obj.home
    warnings = box_warnings(home)
    record = running(home)
    if record is None:
        if as_json:
            print_json({"running": False, "services": [], "warnings": warnings})
        else:
            say(f"not running; start it with `{invocation()} up`")
            show_warnings(warnings)
        raise typer.Exit(3)
    report = status_report(record)
    usage = measure([info.pid for info in report.services if info.pid is not None])
    services = [service_json(info, usage.get(info.pid or 0)) for info in report.services]
    unsandboxed = report.sandbox == "none"
    ledger = _ledger(home, report)
    disks = home_disks(home)
    mcp = mcp_cmds.server_rows(home) if _has_mcp(home) else []
    tokens = tokens_view.today(home, report.services)
    served = console_served(home, report.services)
    matrix = _matrix(home, report) if _has_matrix(home) else None
    if as_json:
        print_json(
            {
                "running": True,
                "mcp": mcp,
                "supervisor": report.pid,
                "sandbox": report.sandbox,
                "unsandboxed": unsandboxed,
                "tools": sandbox_report(home),
                "console": None if served is None else served.address,
                "services": services,
                "ledger": None if ledger is None else ledger.json(),
                "disks": disk_json(disks),
                "tokens": tokens_view.tokens_json(tokens),
                "matrix": _matrix_json(home, matrix),
                "warnings": warnings,
            }
        )
    else:
        say(f"supervisor pid {report.pid}, sandbox {report.sandbox}{_tools(home)}")
        if unsandboxed:
            say(UNSANDBOXED, style="red")
        status_table(services)
        if ledger is not None:
            said, look = ledger.line()
            say(said, style=look)
        for line in disk_lines(disks):
            say(line, style="red")
        if tokens is not None:
            text, style = tokens_view.tokens_line(tokens)
            say(text, style=style)
        for row in mcp:
            flagged = mcp_state.flag_line(row)
            if flagged is not None:
                say(flagged, style="red")
            elif row["problem"]:
                say(f"MCP server {row['name']}: {row['problem']}", style="red")
            for warning in row["warnings"]:
                say(f"MCP server {row['name']} {warning}", style="yellow")
        if matrix is not None:
            say(matrix[0], style=matrix[1] or None)
        if served is not None:
            show_moved(served)
            say(console_hint(served))
        show_warnings(warnings)
    if any(info.state is not ServiceState.RUNNING for info in report.services):
        raise typer.Exit(3)
    if ledger is not None and ledger.bad:
        raise typer.Exit(3)
    if any(place.full for place in disks):
        raise typer.Exit(3)


def home_disks(home: Home) -> list[disk.Disk]:
    """The disks the box writes on, each with what it keeps there and the room left."""
    return disk.places(
        [
            ("the ledger", home.audit),
            ("the session labels", home.state_broker),
            ("the histories", home.sessions),
            ("memory", home.memory_db.parent),
            ("the logs", home.logs),
        ]
    )


GATEWAYD_DOWN = "matrix: gatewayd is not running"


def _matrix(home: Home, report: SupervisorReport) -> tuple[str, str] | None:
    """The phone channel's line, while gatewayd runs (a report it left behind says nothing)."""
    gatewayd = next((info for info in report.services if info.name == "gatewayd"), None)
    if gatewayd is None:
        return None
    if gatewayd.state is not ServiceState.RUNNING:
        return GATEWAYD_DOWN, "yellow"
    return matrix_report.read_line(home)


def _matrix_json(home: Home, line: tuple[str, str] | None) -> dict[str, Any] | None:
    """What gatewayd reported of the channel, while it runs; else None."""
    if line is None or line[0] == GATEWAYD_DOWN:
        return None
    return matrix_report.read(home)


def _has_matrix(home: Home) -> bool:
    try:
        return load_config(home.config).matrix is not None
    except ConfigError:
        return False


def _has_mcp(home: Home) -> bool:
    try:
        return bool(load_config(home.config).mcp)
    except ConfigError:
        return False


def _ledger(home: Home, report: SupervisorReport) -> LedgerView | None:
    """The ledger's state as brokerd says it now (`ledger_link`), with the seq of the ledger's
    last record (brokerd's may be a few records behind by the time it is printed)."""
    brokerd = next((info for info in report.services if info.name == "brokerd"), None)
    running = brokerd is not None and brokerd.state is ServiceState.RUNNING
    answer = ask_ledger(home) if running else None
    view = ledger_view(answer, brokerd, home.audit)
    if view is not None and view.state == "ok":
        view = replace(view, seq=newest_seq(home.ledger) or view.seq)
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
