"""Grants checked against the tools they name (SPEC §5.1, §18.5; issue 23): each `[match]` key
of an MCP grant must be an argument of its tool's pinned inputSchema, of a type its values
can equal, else the grant is invalid; and an invalid **deny** grant whose tool is known denies
that whole tool until it is mended (fail closed), for every session.

`check` takes what `parse_grant` made of every file and the owner's pins, and gives what a
decision uses: the valid grants, the invalid ones with why, and the tools the invalid denies
block. brokerd makes it when the grants or the pins change, never per decision; bxctl runs
the same check offline. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from bxcore import mcp_tools
from bxcore.frozen import frozen
from bxcore.mcp_tools import Pins, ToolDef
from services.brokerd.core.grants import Grant, GrantSet, InvalidGrant, MatchValue, Mode

NO_BLOCKS: Mapping[str, InvalidGrant] = MappingProxyType({})


@frozen
class CheckedGrants:
    """The grants as a decision sees them. `blocked`: a tool name or server pattern → the
    invalid deny grant (the smallest id) that denies every call of it. `unchecked`: (id, why)
    of the MCP grants whose `[match]` cannot be checked yet (their tool is not pinned); they
    stay valid, and are checked once the pins exist. `found`: the grants this check made
    invalid (the parser found the rest), for brokerd's log."""

    valid: tuple[Grant, ...]
    invalid: tuple[InvalidGrant, ...]
    blocked: Mapping[str, InvalidGrant]
    unchecked: tuple[tuple[str, str], ...]
    found: tuple[InvalidGrant, ...]

    def __repr__(self) -> str:
        return (
            f"CheckedGrants({len(self.valid)} valid, {len(self.invalid)} invalid, "
            f"blocked {sorted(self.blocked)})"
        )


@frozen
class Fit:
    """How a grant's `[match]` fits its tool: `problem` when it does not (the grant is
    invalid), `unchecked` when it cannot be told yet; both None: it fits, or has none."""

    problem: str | None = None
    unchecked: str | None = None


FITS = Fit()


def check(grants: GrantSet, pins: Mapping[str, Pins]) -> CheckedGrants:
    """`grants` checked against `pins` (server → what the owner trusted of it)."""
    valid: list[Grant] = []
    found: list[InvalidGrant] = []
    unchecked: list[tuple[str, str]] = []
    for grant in grants.valid:
        fitted = fit(grant, pins)
        if fitted.problem is not None:
            denies = (grant.tool,) if grant.mode is Mode.DENY else ()
            found.append(InvalidGrant(grant.id, grant.sha256, fitted.problem, denies))
            continue
        if fitted.unchecked is not None:
            unchecked.append((grant.id, fitted.unchecked))
        valid.append(grant)
    invalid = sorted([*grants.invalid, *found], key=lambda g: g.id)
    return CheckedGrants(
        tuple(valid), tuple(invalid), _blocked(invalid), tuple(unchecked), tuple(found)
    )


def _blocked(invalid: Sequence[InvalidGrant]) -> Mapping[str, InvalidGrant]:
    blocked: dict[str, InvalidGrant] = {}
    for grant in invalid:  # by id: the smallest names what it blocks
        for tool in grant.denies:
            blocked.setdefault(tool, grant)
    return MappingProxyType(blocked) if blocked else NO_BLOCKS


def blocking(tool: str, blocked: Mapping[str, InvalidGrant]) -> InvalidGrant | None:
    """The invalid deny grant that denies every call of `tool`: one naming it, or, for an
    MCP tool, its server's pattern."""
    found = blocked.get(tool)
    if found is not None or mcp_tools.split_name(tool) is None:
        return found
    covering = [g for name, g in blocked.items() if mcp_tools.pattern_covers(name, tool)]
    return min(covering, key=lambda g: g.id) if covering else None


# --- a grant's [match] against the pinned schema -----------------------------------------------


def fit(grant: Grant, pins: Mapping[str, Pins]) -> Fit:
    """Whether every `[match]` key of `grant` is an argument of its tool's pinned inputSchema
    (for a server pattern: of at least one of the server's pinned tools) of a type its values
    can equal: JSON Schema's `properties`, and `type` where the schema says one."""
    if not grant.match:
        return FITS
    pattern = mcp_tools.pattern_of(grant.tool)
    server, tool = pattern or mcp_tools.split_name(grant.tool) or ("", "")
    pinned = pins.get(server)
    if pinned is None:
        return Fit(unchecked=f"{server} has no pins yet; checked once `bxctl mcp trust {server}`")
    if pattern is not None:
        tools = [t for name, t in pinned.tools.items() if name.startswith(tool)]
        if not tools:
            return Fit(unchecked=f"no pinned tool of {server} starts with {tool!r} yet")
    elif (one := pinned.tools.get(tool)) is not None:
        tools = [one]
    else:
        return Fit(unchecked=f"{tool} is not a pinned tool of {server}; checked once it is")
    for key, values in grant.match:
        scope = None if pattern is None else server + (f" starting with {tool!r}" if tool else "")
        problem = _key_problem(grant.tool, key, values, tools, scope)
        if problem is not None:
            return Fit(problem=f"match.{key}: {problem}")
    return FITS


def _key_problem(
    name: str, key: str, values: tuple[MatchValue, ...], tools: list[ToolDef], server: str | None
) -> str | None:
    """Why `key` fits none of `tools`; None when it fits one. `server`: for a pattern."""
    having = [(tool, arguments[key]) for tool in tools if key in (arguments := _arguments(tool))]
    if not having:
        if server is not None:
            return f"no pinned tool of {server} has an argument {key!r}"
        known = ", ".join(sorted(_arguments(tools[0]))) or "none"
        return f"{name} has no argument {key!r} (its arguments: {known})"
    misfits = [_misfit(key, values, schema) for _, schema in having]
    if any(misfit is None for misfit in misfits):
        return None
    first = misfits[0]
    if server is not None:
        return f"no pinned tool of {server} takes it so that it can match: {first}"
    return first


def _arguments(tool: ToolDef) -> Mapping[str, Any]:
    properties = tool.input_schema.get("properties")
    return properties if isinstance(properties, Mapping) else {}


def _misfit(key: str, values: tuple[MatchValue, ...], schema: Any) -> str | None:
    """Why some value can never equal the argument `key` of `schema` (`[match]` compares
    strings and numbers only); None when each can, or the schema does not say its type."""
    types = _types(schema)
    if types is None:
        return None
    for value in values:
        wanted = {"string"} if isinstance(value, str) else {"number", "integer"}
        if not wanted & types:
            takes = " or ".join(sorted(types)) or "nothing"
            shown = f'"{value}"' if isinstance(value, str) else str(value)
            return f"the argument {key!r} is of type {takes}, so {shown} can never match it"
    return None


def _types(schema: Any) -> set[str] | None:
    """The JSON types `schema` allows, from `type`, or from every branch of an `anyOf` or
    `oneOf` (as `x: str | None` is written); None when it does not say."""
    if not isinstance(schema, Mapping):
        return None
    given = schema.get("type")
    if isinstance(given, str):
        return {given}
    if isinstance(given, list) and all(isinstance(t, str) for t in given):
        return set(given)
    for union in ("anyOf", "oneOf"):
        branches = schema.get(union)
        if isinstance(branches, list) and branches:
            found: set[str] = set()
            for branch in branches:
                types = _types(branch)
                if types is None:
                    return None
                found |= types
            return found
    return None


# --- in words ------------------------------------------------------------------------------


def denies_said(grant: InvalidGrant) -> str:
    """What an invalid deny does, in words; "" for any other invalid grant."""
    if not grant.denies:
        return ""
    return f"being a deny, it denies every call of {_tools_said(grant.denies)} until it is mended"


def said(grant: InvalidGrant, tool: str | None = None) -> str:
    """One line for brokerd's log, `bxctl up` and `explain`: the grant, why, and what it does
    (to every tool it names, or to the one `tool` a call is of)."""
    if not grant.denies:
        return f"grant {grant.id} is invalid and never matches: {grant.problem}"
    tools = _tools_said(grant.denies) if tool is None else tool
    return (
        f"grant {grant.id} is invalid ({grant.problem}) and, being a deny, denies every call "
        f"of {tools} until it is mended"
    )


def _tools_said(tools: tuple[str, ...]) -> str:
    return " and ".join(
        mcp_tools.pattern_said(tool) if mcp_tools.pattern_of(tool) else tool for tool in tools
    )
