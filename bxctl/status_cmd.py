"""`bxctl status` (SPEC §13): each service's state, pid, uptime, restarts, memory and CPU as
the running supervisor reports them; the ledger's state, from brokerd's report and the end of
the ledger (issue 10); the MCP servers, the tokens spent today, and what about the home is
less safe than it should be. In a table, or as JSON for scripts.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed
import typer

from bxcore import report as brokerd_report
from bxcore.config import ConfigError, load_config
from bxcore.home import Home
from bxcore.messages import ServiceState, SupervisorReport
from bxctl import mcp_cmds, tokens_view
from bxctl.box_view import (
    UNSANDBOXED,
    LedgerView,
    ledger_view,
    measure,
    service_json,
    show_ledger,
    show_warnings,
    status_table,
)
from bxctl.console_cmd import console_hint
from bxctl.output import print_json, say
from bxctl.safety import box_warnings, sandbox_report
from bxctl.supervisor_link import running, status_report
from services.brokerd.core.records import parse_line
from services.brokerd.ledger_scan import lines_backwards


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Each service: state, pid, uptime, restarts, memory and CPU; the ledger's state; the
    tokens spent today (and the day's cap); and
    what about the home is less safe than it should be. Exit 3 unless all run and the
    ledger is ok."""
    home: Home = ctx.obj.home
    warnings = box_warnings(home)
    record = running(home)
    if record is None:
        if as_json:
            print_json({"running": False, "services": [], "warnings": warnings})
        else:
            say("not running")
            show_warnings(warnings)
        raise typer.Exit(3)
    report = status_report(record)
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
    if any(info.state is not ServiceState.RUNNING for info in report.services):
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
