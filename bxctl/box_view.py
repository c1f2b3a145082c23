"""How bxctl shows the box (SPEC §13): the services settling during `up`, and `status`'s
table with psutil's figures (uptime, RSS, CPU) (the ledger's line is `ledger_view`'s), as rich
output on a terminal and plain lines when piped. It only prints; it never asks the
supervisor anything.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import typer

from bxcore.console_link import Served, console_served
from bxcore.home.layout import Home
from bxcore.visible import visible
from bxcore.wire.messages import ServiceInfo, ServiceState, SupervisorReport
from bxctl.console_cmd import console_line, moved_line
from bxctl.output import fail, is_terminal, say, table
from bxctl.supervisor.logs import tail

LOG_LINES_ON_FAILURE = 12
RUNNING = ServiceState.RUNNING
FAILED = ServiceState.FAILED
UNSANDBOXED = 'UNSANDBOXED: [sandbox] mode = "none": tools run without confinement'


def warn(text: str) -> None:
    typer.secho(f"bxctl: warning: {text}", err=True, fg="yellow" if is_terminal() else None)


class StartView:
    """What `up` shows while the services start: one line a service as it settles (and a
    spinner on a terminal)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[ServiceState, int]] = {}
        self._status: Any = None
        if is_terminal():
            from rich.console import Console

            self._status = Console(highlight=False).status("starting the box…")
            self._status.start()

    def __repr__(self) -> str:
        return f"StartView({len(self._seen)} services seen)"

    def update(self, report: SupervisorReport) -> bool:
        """Show what changed; True once every service runs or has failed."""
        for info in report.services:
            key = (info.state, info.restarts)
            if self._seen.get(info.name) == key:
                continue
            self._seen[info.name] = key
            if info.state is RUNNING:
                self._line(f"{info.name:<10} running (pid {info.pid})", "green")
            elif info.state is FAILED:
                self._line(f"{info.name:<10} failed ({info.last_exit})", "red")
            elif info.state is ServiceState.BACKOFF:
                self._line(f"{info.name:<10} exited ({info.last_exit}); restarting", "yellow")
            elif info.state is ServiceState.STARTING and self._status is not None:
                self._status.update(f"starting {info.name}…")
        return all(info.state in (RUNNING, FAILED) for info in report.services)

    def _line(self, text: str, style: str) -> None:
        if self._status is not None:
            self._status.console.print(text, style=style, markup=False)
        else:
            typer.echo(text)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def show_started(home: Home, report: SupervisorReport, *, fatal: bool) -> None:
    failed = [info for info in report.services if info.state is FAILED]
    for info in failed:
        typer.echo(f"--- the last lines of {home.log(info.name)} ---", err=True)
        for line in tail(home.log(info.name), LOG_LINES_ON_FAILURE):
            typer.echo(f"    {visible(line)}", err=True)
    if report.sandbox == "none":
        say(UNSANDBOXED, style="red")
    served = console_served(home, report.services)
    if served is not None:
        show_moved(served)
        say(console_line(home, served))
    if failed:
        names = ", ".join(info.name for info in failed)
        message = (
            f"{names} failed to start; the other services run. See `bxctl logs "
            f"{failed[0].name}`, fix it, then `bxctl restart {failed[0].name}` (or `bxctl down`)"
        )
        if fatal:
            fail(message)
        warn(message)


def show_moved(served: Served) -> None:
    """The yellow line saying the console is not on config.toml's port, when it is not."""
    moved = moved_line(served)
    if moved is not None:
        say(moved, style="yellow")


def measure(pids: list[int]) -> dict[int, tuple[float, int, float]]:
    """Each live pid's uptime (s), RSS (bytes) and CPU (%, over a tenth of a second)."""
    import psutil  # type: ignore[import-untyped, unused-ignore]

    processes = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            process.cpu_percent(None)
            processes[pid] = process
    time.sleep(0.1)
    usage = {}
    for pid, process in processes.items():
        with contextlib.suppress(psutil.Error), process.oneshot():
            uptime = max(0.0, time.time() - process.create_time())
            usage[pid] = (uptime, int(process.memory_info().rss), process.cpu_percent(None))
    return usage


def service_json(info: ServiceInfo, usage: tuple[float, int, float] | None) -> dict[str, Any]:
    uptime, rss, cpu = usage if usage is not None else (None, None, None)
    return {
        "name": info.name,
        "state": info.state.value,
        "pid": info.pid,
        "since": info.since,
        "uptime_s": None if uptime is None else round(uptime, 1),
        "restarts": info.restarts,
        "rss_bytes": rss,
        "cpu_percent": cpu,
        "last_exit": info.last_exit,
    }


def show_warnings(warnings: list[str]) -> None:
    """`status`'s warnings (bxctl.safety): one yellow line each, after the table."""
    for line in warnings:
        say(f"warning: {line}", style="yellow")


def status_table(services: list[dict[str, Any]]) -> None:
    rows = []
    styles = {}
    for index, item in enumerate(services):
        rows.append(
            [
                item["name"],
                item["state"],
                item["pid"] or "-",
                _duration(item["uptime_s"]),
                item["restarts"],
                "-" if item["rss_bytes"] is None else f"{item['rss_bytes'] / 2**20:.1f} MiB",
                "-" if item["cpu_percent"] is None else f"{item['cpu_percent']:.1f}%",
                item["last_exit"] or "",
            ]
        )
        if item["state"] != RUNNING:
            styles[index] = "red" if item["state"] == FAILED else "yellow"
    columns = ["SERVICE", "STATE", "PID", "UPTIME", "RESTARTS", "RSS", "CPU", "LAST EXIT"]
    table(columns, rows, styles=styles)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
