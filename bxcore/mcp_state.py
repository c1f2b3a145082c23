"""What the owner's side knows of the MCP servers (SPEC §18.3), read from files only: the
listing brokerd last wrote (`{home}/run/mcp-<name>.json`), the owner's pins
(`{home}/mcp/<name>.pins.json`) and the `mcp` part of brokerd's report. `bxctl mcp list`,
`bxctl status` and the console's Services view all show these rows. Never writes anything.
"""

from __future__ import annotations

import json
from typing import Any

from bxcore import report
from bxcore.config import ConfigError, load_config
from bxcore.home import Home
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


def listing(home: Home, name: str) -> tuple[ToolDef, ...]:
    """The tools server `name` listed when brokerd last started it."""
    path = home.run / f"mcp-{name}.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        tools = tuple(tool_def(entry) for entry in body["tools"])
    except FileNotFoundError:
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
    owner trusted them (`flagged`: brokerd refuses them until `bxctl mcp trust NAME`), and
    the roles pinned of each pinned tool's arguments."""
    running = report.read(home).get("mcp") or {}
    rows = []
    for name in names:
        pinned = pins(home, name)
        seen = comparison(home, name)
        state = running.get(name) if isinstance(running, dict) else None
        state = state if isinstance(state, dict) else {}
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
            }
        )
    return rows
