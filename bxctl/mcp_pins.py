"""The owner's side of pinning (SPEC §18.3, §20): what brokerd last listed of a server (read by
`bxcore.mcp_state`), shown whole with every hidden character made visible and flagged, each
argument with the role it would be pinned with, and the pins file `bxctl mcp trust` writes
(`bxcore.mcp_trust`). No socket: the files are the owner's.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass

from bxcore.mcp_state import NotListed, comparison, listing, pins
from bxcore.mcp_tools import ToolDef
from bxcore.mcp_trust import Source, State, ToolPlan, trust
from bxcore.roles import MEANING
from bxcore.visible import reasons, visible

__all__ = [
    "NotListed", "comparison", "listing", "pins", "roles_lines", "show_tool", "shown", "trust",
]  # fmt: skip

STATES = {
    State.UNCHANGED: "pinned, unchanged",
    State.NEW: "NEW: never trusted",
    State.CHANGED: "CHANGED since the owner trusted it",
    State.ROLES_CHANGED: (
        "ROLES CHANGED since you trusted it: its pinned roles hold until you trust it again"
    ),
}
SOURCES = {
    Source.PROPOSED: "proposed",
    Source.KEPT: "as you confirmed it",
    Source.YOURS: "yours, now",
}


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


def roles_lines(entry: ToolPlan) -> list[str]:
    """Each argument of a tool with the role it would be pinned with, where the role comes
    from, what it means (§20), and how to change it."""
    name = visible(entry.tool.name)
    if not entry.roles:
        return ["  arguments: none"]
    lines = [f"  arguments (change a role: --role {name}.ARG=target|content|code):"]
    for choice in entry.roles:
        said = SOURCES[choice.source]
        if choice.was is not None:
            said += f"; pinned now as {choice.was.value}"
        lines.append(
            f"    {visible(choice.argument)}: {choice.role.value} ({said}): {MEANING[choice.role]}"
        )
    return lines
