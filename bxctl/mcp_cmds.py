"""`bxctl mcp list | show NAME | trust NAME` (SPEC §13, §18.3): the MCP servers of config.toml,
their tools as brokerd last listed them against the owner's pins, and pinning them.

`trust` shows every tool whole — description and schema, hidden characters made visible and
flagged, each argument's role (§20) — and pins exactly what it showed, after a yes (or `--yes`,
for scripts); `--role TOOL.ARG=ROLE` sets a role instead of the proposed one.
"""

from __future__ import annotations

import shlex
import textwrap
from typing import Annotated, Any

import typer

from bxcore import mcp_state, mcp_trust
from bxcore.config.file import ConfigError, load_config
from bxcore.config.mcp import McpServer
from bxcore.home.layout import Home
from bxcore.mcp_tools import ToolDef
from bxctl import mcp_add, mcp_pins, mcp_wait
from bxctl.output import fail, is_terminal, print_json, say, table
from services.brokerd.core.grants import KINDS_SAID, RESULTS_SAID

app = typer.Typer(help="MCP servers: their tools, and what the owner trusts.", no_args_is_help=True)

app.command("add")(mcp_add.add)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


def _servers(home: Home) -> dict[str, McpServer]:
    try:
        return {server.name: server for server in load_config(home.config).mcp}
    except ConfigError as error:
        fail(str(error))


def _server(home: Home, name: str) -> McpServer:
    servers = _servers(home)
    if name not in servers:
        known = ", ".join(servers) or "none"
        fail(f"no [[mcp]] entry named {name!r} in {home.config} (there are: {known})")
    return servers[name]


def _listed(home: Home, name: str) -> tuple[ToolDef, ...]:
    """The tools brokerd last listed for the `[[mcp]]` entry `name` (waited for while brokerd
    starts it); one line and exit 1 when there is no such entry or no listing."""
    server = _server(home, name)
    try:
        return mcp_wait.listing(home, server, lambda line: typer.echo(line, err=True))
    except mcp_pins.NotListed as error:
        fail(str(error))


def server_rows(home: Home) -> list[dict[str, Any]]:
    """Each server of config.toml: pinned tools, and those listed changed or new (flagged)."""
    return mcp_state.server_rows(home, tuple(_servers(home)))


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The servers, their processes, their tools pinned, changed or new, and the roles pinned
    of each tool's arguments."""
    home = _home(ctx)
    rows = server_rows(home)
    if as_json:
        print_json(rows)
        return
    if not rows:
        say(f"no [[mcp]] entries in {home.config}; docs/mcp.md says how to add one")
        return
    cells = [
        [row["name"], row["running"], row["pinned"], len(row["changed"]), len(row["new"]),
         mcp_state.short_state(row)]
        for row in rows
    ]  # fmt: skip
    table(["server", "running", "pinned", "changed", "new", "state"], cells)
    for row in rows:
        for note in _notes(row):
            for line in textwrap.wrap(note, WIDTH, subsequent_indent="    "):
                say(line)
    pinned = [(row["name"], tool, roles) for row in rows for tool, roles in row["roles"].items()]
    if pinned:
        say("")
        say("the roles pinned of each tool's arguments (`bxctl mcp show NAME` says what each is):")
    for server, tool, roles in pinned:
        said = ", ".join(f"{argument} {role}" for argument, role in roles.items()) or "none"
        for line in textwrap.wrap(f"  {server}/{tool}: {said}", WIDTH, subsequent_indent="    "):
            say(line)


WIDTH = 100  # `bxctl mcp list` fits it


def _notes(row: dict[str, Any]) -> list[str]:
    """What `mcp list` says below its table of one server: its problem, the tools to trust,
    its paths' warnings."""
    name = row["name"]
    notes = [f"{name}: {row['problem']}"] if row["problem"] else []
    if row["changed"]:
        notes.append(f"{name}: changed since trusted: {', '.join(row['changed'])}")
    if row["new"]:
        notes.append(f"{name}: new: {', '.join(row['new'])}")
    if row["flagged"]:
        notes.append(
            f"{name}: read them with `bxctl mcp show {name}`, then `bxctl mcp trust {name}`"
        )
    notes += [f"{name} {warning}" for warning in row["warnings"]]
    return notes


@app.command("show")
def show(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Every tool the server lists, whole, with its arguments' roles and what changed since
    the owner trusted it."""
    home = _home(ctx)
    tools = _listed(home, name)
    planned = mcp_trust.plan(mcp_pins.pins(home, name), tools)
    if as_json:
        print_json([_tool_json(entry) for entry in planned])
        return
    _show_all(name, planned)


def _tool_json(entry: mcp_trust.ToolPlan) -> dict[str, Any]:
    shown = mcp_trust.plan_json(entry)
    shown["pinned"] = entry.state is mcp_trust.State.UNCHANGED
    shown["hidden"] = list(mcp_pins.show_tool(entry.tool)[1])
    return shown


def _show_all(name: str, planned: tuple[mcp_trust.ToolPlan, ...]) -> int:
    flagged = 0
    for entry in planned:
        text, hidden = mcp_pins.show_tool(entry.tool)
        lines = [*text.splitlines(), *mcp_pins.roles_lines(entry)]
        for line in [*lines, f"  state: {mcp_pins.STATES[entry.state]}"]:
            say(line)
        if hidden:
            flagged += 1
            say("  WARNING: hidden characters: " + "; ".join(hidden), style="bold red")
        say("")
    say(f"A grant of a tool of {name} says its kind (`--kind`; the hint above is not trusted):")
    for kind, meaning in KINDS_SAID:
        say(f"  {kind}: {meaning}")
    say(f"  {RESULTS_SAID}")
    return flagged


RoleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--role",
        metavar="TOOL.ARG=ROLE",
        help="The role of one argument (target, content or code), instead of the proposed one; "
        "repeatable.",
    ),
]


@app.command("trust")
def trust(
    ctx: typer.Context,
    name: str,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask: the owner has read the tools already.")
    ] = False,
    role: RoleOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show every tool of the server whole, with each argument's role, and on yes pin exactly
    those definitions and roles."""
    home = _home(ctx)
    tools = _listed(home, name)
    try:
        given = mcp_trust.given_of(role or [], tools)
    except mcp_trust.RoleError as error:
        fail(str(error), 2)
    planned = mcp_trust.plan(mcp_pins.pins(home, name), tools, given)
    if as_json:
        _trust_json(home, name, planned, yes, role)
        return
    flagged = _show_all(name, planned)
    if flagged:
        say(f"{flagged} tool(s) hold hidden characters: read them closely.", style="bold red")
    if not yes:
        if not is_terminal():
            again = " ".join(shlex.quote(arg) for arg in [name, "--yes", *_roles_again(role)])
            fail(f"trusting changes what the agent may call: run `bxctl mcp trust {again}`")
        if not typer.confirm(f"Trust these {len(tools)} tools of {name}?", default=False):
            fail("nothing was changed")
    pinned = mcp_trust.pin(home, name, planned)
    say(f"pinned {len(pinned.tools)} tools of {name} in {home.mcp_pins(name)}")


def _roles_again(options: list[str] | None) -> list[str]:
    return [word for option in options or [] for word in ("--role", option)]


def _trust_json(
    home: Home,
    name: str,
    planned: tuple[mcp_trust.ToolPlan, ...],
    yes: bool,
    roles: list[str] | None,
) -> None:
    """`trust --json`: what is (or would be) pinned; never asks, so nothing without --yes."""
    if yes:
        mcp_trust.pin(home, name, planned)
    path = str(home.mcp_pins(name))
    print_json({"server": name, "pinned": yes, "file": path,
                "tools": [_tool_json(entry) for entry in planned]})  # fmt: skip
    if not yes:
        again = " ".join(shlex.quote(a) for a in [name, "--json", "--yes", *_roles_again(roles)])
        fail(f"nothing was pinned: run `bxctl mcp trust {again}` to pin these")
