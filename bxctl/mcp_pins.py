"""The owner's side of pinning (SPEC §18.3): what brokerd last listed of a server (read by
`bxcore.mcp_state`), shown whole with every hidden character made visible and flagged, and
the pins file `bxctl mcp trust` writes. No socket: the files are the owner's.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime

from bxcore.atomic import write_atomically
from bxcore.home import Home
from bxcore.mcp_state import NotListed, comparison, listing, pins
from bxcore.mcp_tools import Pins, ToolDef, render_pins
from bxcore.roles import propose
from bxcore.visible import reasons, visible

__all__ = ["NotListed", "comparison", "listing", "pins", "show_tool", "shown", "trust"]


def trust(home: Home, name: str, tools: tuple[ToolDef, ...], now: datetime | None = None) -> Pins:
    """Pin exactly `tools` (what the owner was shown) for server `name`, each with the roles
    its arguments are proposed (§20)."""
    when = (now or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    roles = {tool.name: propose(tool.input_schema) for tool in tools}
    pinned = Pins(name, when, {tool.name: tool for tool in tools}, roles)
    home.mcp.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(home.mcp_pins(name), render_pins(pinned))
    return pinned


@dataclass(frozen=True, slots=True)
class Shown:
    """One text as the owner reads it, and the hidden characters it held."""

    text: str
    hidden: tuple[str, ...]  # e.g. "U+202E RIGHT-TO-LEFT OVERRIDE"


def shown(text: str) -> Shown:
    """`text` with controls, bidi and invisible characters as escapes (`bxcore.visible`),
    newlines kept; and each such character named once, so the owner is told."""
    found: list[str] = []
    for char, reason in zip(text, reasons(text, newlines=True), strict=True):
        if reason is not None:
            label = f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"
            if label not in found:
                found.append(label)
    return Shown(visible(text, newlines=True), tuple(found))


def show_tool(tool: ToolDef) -> tuple[str, tuple[str, ...]]:
    """A tool's whole definition as the owner reads it before trusting it, and the hidden
    characters found anywhere in it."""
    description = shown(tool.description)
    schema = shown(json.dumps(tool.input_schema, ensure_ascii=False, indent=2, sort_keys=True))
    hint = tool.read_only_hint
    lines = [
        f"tool {visible(tool.name)}  sha256 {tool.sha256[:16]}…",
        "  readOnlyHint: "
        + ("not given" if hint is None else str(hint).lower())
        + " (what the server says; never trusted: the grant's kind decides)",
        "  description:",
        *("    " + line for line in description.text.splitlines() or [""]),
        "  inputSchema:",
        *("    " + line for line in schema.text.splitlines()),
    ]
    if tool.annotations:
        notes = shown(json.dumps(tool.annotations, ensure_ascii=False, sort_keys=True))
        lines += ["  annotations: " + notes.text]
    hidden = tuple(dict.fromkeys(description.hidden + schema.hidden))
    return "\n".join(lines), hidden
