"""What the owner's side knows of the MCP servers (SPEC §18.3), read from files only: the
listing brokerd last wrote (`{home}/run/mcp-<name>.json`), the owner's pins
(`{home}/mcp/<name>.pins.json`) and the `mcp` part of brokerd's report. `bxctl mcp list`,
`bxctl status` and the console's Services view all show these rows. Never writes anything.
"""

from __future__ import annotations

import json
from typing import Any

from bxcore.config.file import ConfigError, load_config
from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.mcp_tools import (
    Comparison,
    DefinitionError,
    Pins,
    ToolDef,
    compare,
    parse_pins,
    tool_def,
)
from bxcore.roles import arguments_of, role_of


class NotListed(Exception):
    """brokerd has not listed this server's tools (yet): one line saying what to do."""


class StartError(NotListed):
    """brokerd could not start this server: what it said."""


def listing(home: Home, name: str) -> tuple[ToolDef, ...]:
    """The tools server `name` listed when brokerd last started it; `StartError` when brokerd
    says it could not start it, `NotListed` while there is no listing."""
    path = home.run / f"mcp-{name}.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        tools = tuple(tool_def(entry) for entry in body["tools"])
    except FileNotFoundError:
        problem = _reported(home, name).get("problem")
        if isinstance(problem, str) and problem:
            raise StartError(
                f"brokerd could not start {name}: {problem} (the whole log: {home.mcp_log(name)})"
            ) from None
        raise NotListed(
            f"brokerd has not listed the tools of {name!r}: is it in config.toml and is the box "
            f"up? (`bxctl status`, `bxctl logs brokerd`, {home.mcp_log(name)})"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, DefinitionError) as error:
        raise NotListed(f"{path} cannot be read: {error}") from None
    return tools


def pins(home: Home, name: str) -> Pins | None:
    """The owner's pins of server `name`; None when there are none (or they cannot be read:
    brokerd then pins nothing either)."""
    try:
        return parse_pins(name, home.mcp_pins(name).read_bytes())
    except (OSError, DefinitionError):
        return None


def configured_pins(home: Home) -> dict[str, Pins]:
    """The pins of every `[[mcp]]` server of config.toml that has some, as brokerd reads them
    (the grants' `[match]` keys are checked against these offline, as brokerd checks them)."""
    return {name: found for name in configured(home) if (found := pins(home, name)) is not None}


def comparison(home: Home, name: str) -> Comparison | None:
    """The latest listing against the pins; None while brokerd has listed nothing."""
    try:
        return compare(pins(home, name), listing(home, name))
    except NotListed:
        return None


def configured(home: Home) -> tuple[str, ...]:
    """The `[[mcp]]` names of config.toml; () when it has none or cannot be read."""
    try:
        return tuple(server.name for server in load_config(home.config).mcp)
    except ConfigError:
        return ()


def roles_pinned(pinned: Pins | None) -> dict[str, dict[str, str]]:
    """Each pinned tool's arguments with the role pinned of each (§20; an argument a version 1
    file pinned with none is a target), in the schema's order."""
    if pinned is None:
        return {}
    return {
        name: {
            arg: role_of(pinned.roles_of(name), arg).value
            for arg in arguments_of(tool.input_schema)
        }
        for name, tool in sorted(pinned.tools.items())
    }


def server_rows(home: Home, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each server: its running processes, its tools pinned, those changed or new since the
    owner trusted them (`flagged`: brokerd refuses them until `bxctl mcp trust NAME`), the
    roles pinned of each pinned tool's arguments, and what its start warned of."""
    rows = []
    for name in names:
        pinned = pins(home, name)
        seen = comparison(home, name)
        state = _reported(home, name)
        warned = state.get("warnings")
        rows.append(
            {
                "name": name,
                "pinned": len(pinned.tools) if pinned else 0,
                "changed": list(seen.changed) if seen else [],
                "new": list(seen.new) if seen else [],
                "listed": seen is not None,
                "running": state.get("running", 0),
                "problem": state.get("problem"),
                "flagged": bool(seen and seen.flagged),
                "roles": roles_pinned(pinned),
                "warnings": [w for w in warned if isinstance(w, str)]
                if isinstance(warned, list)
                else [],
            }
        )
    return rows


def _reported(home: Home, name: str) -> dict[str, Any]:
    """What brokerd's report says of server `name` now; {} when nothing."""
    servers = report.read(home).get("mcp")
    found = servers.get(name) if isinstance(servers, dict) else None
    return found if isinstance(found, dict) else {}


def flag_line(row: dict[str, Any]) -> str | None:
    """What `bxctl status` says of a flagged server (`server_rows`): tools never trusted are
    new, not changed; None when nothing is flagged."""
    if not row["flagged"]:
        return None
    name, changed, new = row["name"], row["changed"], row["new"]
    trust = f"`bxctl mcp trust {name}`"
    if not changed and not row["pinned"]:
        return f"MCP server {name}: {len(new)} tools not trusted yet: none is offered until {trust}"
    said = [f"changed since the owner trusted them: {', '.join(changed)}"] if changed else []
    said += [f"new: {', '.join(new)}"] if new else []
    return f"MCP server {name}: tools {'; '.join(said)}: refused until {trust}"


def short_state(row: dict[str, Any]) -> str:
    """One server's state in a few words, for `bxctl mcp list`."""
    if row["problem"]:
        return "failed (below)"
    if not row["listed"]:
        return "not listed yet"
    if row["changed"]:
        return "CHANGED: trust again"
    if row["new"]:
        return "new: trust" if row["pinned"] else "not trusted yet"
    return "ok"
