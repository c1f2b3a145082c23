"""`bxctl console [--open]` (SPEC §12.1, §13): the console's link with the owner token in its
fragment, printed (or opened in the owner's browser); and the lines `up`, `restart` and
`status` print about it. Every link is where the running gatewayd says it serves the console
(`bxcore.console_link.console_served`), never config.toml's port: that one may be taken.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bxcore.config.file import ConfigError, load_config
from bxcore.console_link import Served, TokenError, console_link, console_served, read_token
from bxcore.home.layout import Home
from bxcore.wire.messages import ServiceState, SupervisorReport
from bxctl.output import fail, print_json, say
from bxctl.supervisor.link import running, status_report


def link(home: Home) -> str:
    """The console's link for this home's running box; `fail` with why when there is none."""
    try:
        if not load_config(home.config).console.enabled:
            fail("the console is off ([console] enabled = false in config.toml)")
    except ConfigError as error:
        fail(str(error))
    record = running(home)
    if record is None:
        fail("the box is not running, so nothing serves the console; start it with `bxctl up`")
    report = status_report(record)
    served = console_served(home, report.services)
    if served is None:
        fail(not_served(report))
    try:
        return console_link(served.host, served.port, read_token(home.console_token))
    except TokenError as error:
        fail(str(error))


def not_served(report: SupervisorReport) -> str:
    """Why a running box serves no console: gatewayd's state, or its silence. Pure."""
    gatewayd = next((info for info in report.services if info.name == "gatewayd"), None)
    if gatewayd is None:
        return "this box runs no gatewayd, so nothing serves the console"
    if gatewayd.state is not ServiceState.RUNNING:
        exited = f": {gatewayd.last_exit}" if gatewayd.last_exit else ""
        return (
            f"gatewayd is not running ({gatewayd.state}{exited}), so nothing serves the console; "
            "see `bxctl logs gatewayd`"
        )
    return "gatewayd runs but has not said where it serves the console; see `bxctl logs gatewayd`"


def console(
    ctx: typer.Context,
    open_: Annotated[
        bool, typer.Option("--open", help="Open the link in your web browser.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """The running console's link, with the owner token (keep it to yourself)."""
    home: Home = ctx.obj.home
    url = link(home)
    if as_json:
        print_json({"url": url})
    else:
        say(url)
    if open_:
        import webbrowser

        if not webbrowser.open(url):
            fail("no web browser could be opened here; open the link above yourself")


def moved_line(served: Served) -> str | None:
    """`console: port 8420 was taken, …` when gatewayd serves on another port; else None."""
    return None if served.moved is None else f"console: {served.moved} (another box or program)"


def console_line(home: Home, served: Served) -> str:
    """What `bxctl up` and `restart` print once the box has started: the address with the
    token, so one click logs in; the bare address (and why) when the token is unreadable."""
    try:
        return f"console: {served.address}#token={read_token(home.console_token)}"
    except TokenError as error:
        return f"console: {served.address}  ({error})"


def console_hint(served: Served) -> str:
    """What `bxctl status` prints: the address, and where the link with the token is."""
    return f"console: {served.address}  (`bxctl console` gives the link that logs you in)"
