"""What trusting an MCP server pins (SPEC §18.3, §20): each listed tool's definition and the
role of each of its arguments, as the owner confirms them. `bxctl mcp trust` and the console's
Services view both show `plan` and pin it with `trust`: one path, no second copy to drift.

A role is proposed from the schema (`bxcore.roles.propose`), or kept as the owner pinned it
when the tool's inputSchema is the one pinned, or given now by the owner (`--role TOOL.ARG=ROLE`,
the console's choice). A tool whose roles differ from its pins is changed as a changed
definition is: it is pinned again only when the owner trusts it again. Pure but `trust` and
`pin`, which read and write the pins file.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from bxcore.frozen import frozen
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home
from bxcore.mcp_state import pins as pins_of
from bxcore.mcp_tools import Pins, ToolDef, render_pins
from bxcore.roles import MEANING, Role, arguments_of, propose, role_of

ROLES_SAID = ", ".join(role.value for role in Role)


class Source(enum.StrEnum):
    """Where an argument's role comes from."""

    PROPOSED = "proposed"  # read from the schema: the owner has not confirmed it yet
    KEPT = "kept"  # pinned by the owner earlier, for this same inputSchema
    YOURS = "yours"  # given by the owner now


class State(enum.StrEnum):
    """A listed tool against the pins, roles included."""

    UNCHANGED = "unchanged"
    NEW = "new"  # never trusted
    CHANGED = "changed"  # its definition is not the one pinned (a rug pull, an update)
    ROLES_CHANGED = "roles changed"  # its definition is pinned, some role is not


@frozen
class ArgumentRole:
    """One argument's role as it would be pinned, where it comes from, and the role it is
    pinned with now when that differs (`was`)."""

    argument: str
    role: Role
    source: Source
    was: Role | None = None


@frozen
class ToolPlan:
    """One listed tool as trusting would pin it."""

    tool: ToolDef
    state: State
    roles: tuple[ArgumentRole, ...]

    def role_map(self) -> dict[str, Role]:
        return {choice.argument: choice.role for choice in self.roles}


class RoleError(Exception):
    """A role the owner gave that names no listed tool, no argument of it, or no role: one
    line."""


Given = Mapping[str, Mapping[str, Role]]  # tool → argument → the role the owner gives now


def plan(
    pins: Pins | None, tools: tuple[ToolDef, ...], given: Given | None = None
) -> tuple[ToolPlan, ...]:
    """What trusting `tools` would pin against `pins`, with the owner's roles `given` (already
    checked by `parse_role` or `check_given`)."""
    given = given or {}
    return tuple(_plan_one(pins, tool, given.get(tool.name, {})) for tool in tools)


def _plan_one(pins: Pins | None, tool: ToolDef, given: Mapping[str, Role]) -> ToolPlan:
    pinned = None if pins is None else pins.tools.get(tool.name)
    pinned_roles = {} if pins is None or pinned is None else dict(pins.roles_of(tool.name))
    same_schema = pinned is not None and pinned.schema_json == tool.schema_json
    proposed = propose(tool.input_schema)
    choices = []
    for argument in arguments_of(tool.input_schema):
        if argument in given:
            role, source = given[argument], Source.YOURS
        elif same_schema and argument in pinned_roles:
            role, source = pinned_roles[argument], Source.KEPT
        else:
            role, source = proposed[argument], Source.PROPOSED
        was = None
        if pinned is not None:
            before = role_of(pinned_roles, argument)  # a version 1 pin: every one a target
            was = before if before is not role else None
        choices.append(ArgumentRole(argument, role, source, was))
    if pinned is None:
        state = State.NEW
    elif pinned.sha256 != tool.sha256:
        state = State.CHANGED
    elif any(choice.was is not None for choice in choices):
        state = State.ROLES_CHANGED
    else:
        state = State.UNCHANGED
    return ToolPlan(tool, state, tuple(choices))


def parse_role(option: str, tools: tuple[ToolDef, ...]) -> tuple[str, str, Role]:
    """`TOOL.ARG=ROLE` (`--role`) as (tool, argument, role), against the listed `tools`; a
    tool's name may hold dots, so the longest listed name before a dot is the tool."""
    named, sep, said = option.rpartition("=")
    if not sep or "." not in named:
        raise RoleError(f"--role {option!r}: write TOOL.ARG=ROLE, ROLE one of {ROLES_SAID}")
    if said not in Role.__members__.values():
        raise RoleError(f"--role {option!r}: {said!r} is not a role: one of {ROLES_SAID}")
    by_name = {tool.name: tool for tool in tools}
    owners = [n for n in by_name if named.startswith(n + ".")]
    if not owners:
        tool_name = named.split(".", 1)[0]
        known = ", ".join(sorted(by_name)) or "none"
        raise RoleError(f"--role {option!r}: no tool {tool_name!r} is listed (there are: {known})")
    tool = by_name[max(owners, key=len)]
    argument = named[len(tool.name) + 1 :]
    declared = arguments_of(tool.input_schema)
    if argument not in declared:
        has = ", ".join(declared) or "none"
        raise RoleError(
            f"--role {option!r}: the tool {tool.name!r} has no argument {argument!r} "
            f"(it has: {has})"
        )
    return tool.name, argument, Role(said)


def given_of(options: list[str], tools: tuple[ToolDef, ...]) -> dict[str, dict[str, Role]]:
    """Every `--role` option, the last one of an argument standing; `RoleError` at the first
    that is not one."""
    given: dict[str, dict[str, Role]] = {}
    for option in options:
        tool, argument, role = parse_role(option, tools)
        given.setdefault(tool, {})[argument] = role
    return given


def check_given(raw: object, tools: tuple[ToolDef, ...]) -> dict[str, dict[str, Role]]:
    """The console's roles, `{"TOOL": {"ARG": "ROLE"}}`, checked as `--role` is."""
    if not isinstance(raw, Mapping):
        raise RoleError('roles must be an object: {"TOOL": {"ARG": "ROLE"}}')
    options = []
    for tool, roles in raw.items():
        if not isinstance(roles, Mapping):
            raise RoleError(f"the roles of {str(tool)[:64]!r} must be an object")
        options += [f"{tool}.{argument}={role}" for argument, role in roles.items()]
    return given_of(options, tools)


def trust(
    home: Home,
    name: str,
    tools: tuple[ToolDef, ...],
    given: Given | None = None,
    now: datetime | None = None,
) -> Pins:
    """Pin exactly `tools` for server `name`, each argument with the role `plan` gives it
    against the pins now."""
    return pin(home, name, plan(pins_of(home, name), tools, given), now)


def pin(home: Home, name: str, planned: tuple[ToolPlan, ...], now: datetime | None = None) -> Pins:
    """Write the pins of server `name`: exactly the plan the owner was shown."""
    when = (now or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    tools = {entry.tool.name: entry.tool for entry in planned}
    pinned = Pins(name, when, tools, {entry.tool.name: entry.role_map() for entry in planned})
    home.mcp.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(home.mcp_pins(name), render_pins(pinned))
    return pinned


def plan_json(entry: ToolPlan) -> dict[str, Any]:
    """One tool as `bxctl mcp trust --json`, `mcp show --json` and the console give it."""
    return {
        "name": entry.tool.name,
        "sha256": entry.tool.sha256,
        "state": entry.state.value,
        "definition": entry.tool.definition(),
        "roles": [
            {
                "argument": choice.argument,
                "role": choice.role.value,
                "meaning": MEANING[choice.role],
                "source": choice.source.value,
                "was": None if choice.was is None else choice.was.value,
            }
            for choice in entry.roles
        ],
    }
