"""MCP tools as data (SPEC §18.3, §18.4): a tool's definition, its canonical hash, the name the
model sees (`mcp__<server>__<tool>`) and the pins file `{home}/mcp/<name>.pins.json`.

brokerd, loopd and bxctl all read these, so they live in bxcore. Pure: no I/O, no clock; the
pins file's bytes in and out (`parse_pins`, `render_pins`), never the file itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bxcore import strict_json
from bxcore.config.mcp import valid_server_name
from bxcore.frozen import frozen
from bxcore.roles import Role, roles_problem

PREFIX = "mcp__"
#: The names OpenAI's and Anthropic's APIs take for a tool (§18.4).
MODEL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
CHANGED = "the tool's definition changed since the owner trusted it"
MAX_PINS_BYTES = 8 * 1024 * 1024
MAX_TOOLS = 512
PINS_VERSION = 2  # 2: each tool's argument roles (§20); a version 1 file reads with none
READABLE_VERSIONS = (1, 2)

_CANONICAL = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, sort_keys=True, allow_nan=False
)

JsonObject = Mapping[str, Any]


def canonical(value: object) -> str:
    """JSON with sorted keys, compact, not escaped to ASCII: one text for one value."""
    return _CANONICAL.encode(value)


def model_name(server: str, tool: str) -> str | None:
    """`mcp__<server>__<tool>`, or None when it would not fit `^[a-zA-Z0-9_-]{1,64}$`."""
    name = f"{PREFIX}{server}__{tool}"
    return name if MODEL_NAME.fullmatch(name) else None


def split_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of an MCP tool's model name, or None for any other name. A server name
    has no `_` (§18.1), so the first `__` after the prefix ends it."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX) :].partition("__")
    if not sep or not tool or not valid_server_name(server):
        return None
    return server, tool


def pattern_of(name: str) -> tuple[str, str] | None:
    """(server, prefix) of a grant's tool pattern — `mcp__<server>__<prefix>*`: every tool of
    the server whose name starts with `prefix` (issue 27), `mcp__<server>__*` every tool of
    it — or None when `name` is no pattern. Only a last `*` is a wildcard, and the name the
    pattern would make must fit the model's names (§18.4)."""
    if not name.endswith("*") or not name.startswith(PREFIX):
        return None
    server, sep, prefix = name[len(PREFIX) : -1].partition("__")
    if not sep or not valid_server_name(server) or "*" in prefix:
        return None
    if MODEL_NAME.fullmatch(f"{PREFIX}{server}__{prefix}x") is None:
        return None
    return server, prefix


def pattern_covers(pattern: str, tool: str) -> bool:
    """Whether the grant pattern `pattern` covers the MCP tool the model calls `tool`."""
    named, covered = pattern_of(pattern), split_name(tool)
    return (
        named is not None
        and covered is not None
        and covered[0] == named[0]
        and covered[1].startswith(named[1])
    )


def pattern_said(pattern: str) -> str:
    """A pattern in the owner's words."""
    named = pattern_of(pattern)
    assert named is not None, pattern
    server, prefix = named
    if not prefix:
        return f"{pattern} (every tool of the server {server})"
    return f"{pattern} (every tool of the server {server} whose name starts with {prefix})"


@dataclass(frozen=True, slots=True)  # not @frozen: two fields are computed (__post_init__)
class ToolDef:
    """One tool as a server lists it: what the owner reads and what is pinned.

    `input_schema` and `annotations` are JSON as the server sent them; `sha256` (the hash of
    `canonical_json()`) and `schema_json` (the canonical inputSchema, which its validator is
    kept under) are computed once, here: they are asked at every decision and call."""

    name: str
    description: str
    input_schema: JsonObject
    annotations: JsonObject | None = None
    sha256: str = field(init=False, repr=False, compare=False)
    schema_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()
        object.__setattr__(self, "sha256", digest)
        object.__setattr__(self, "schema_json", canonical(self.input_schema))

    def definition(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.annotations is not None:
            out["annotations"] = self.annotations
        return out

    def canonical_json(self) -> str:
        return canonical(self.definition())

    @property
    def read_only_hint(self) -> bool | None:
        """What the server says of itself: shown to the owner, never trusted (§18.5)."""
        hint = (self.annotations or {}).get("readOnlyHint")
        return hint if isinstance(hint, bool) else None


class DefinitionError(Exception):
    """A tool definition (from a server, or in a pins file) that is not one: one line."""


def tool_def(obj: Any) -> ToolDef:
    """A definition from its JSON form: the four keys §18.3 pins (`name`, `description`,
    `inputSchema`, `annotations`). Other keys a server sends (`title`, `outputSchema`, `_meta`)
    are not pinned: nothing of them reaches the model."""
    if not isinstance(obj, Mapping):
        raise DefinitionError("a tool definition must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise DefinitionError("a tool definition needs a name")
    description = obj.get("description")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise DefinitionError(f"{name!r}: the description must be text")
    schema = obj.get("inputSchema")
    if not isinstance(schema, Mapping):
        raise DefinitionError(f"{name!r}: the inputSchema must be a JSON object")
    annotations = obj.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise DefinitionError(f"{name!r}: the annotations must be a JSON object")
    try:  # a value JSON cannot carry (NaN, a set) is no definition
        canonical(obj.get("inputSchema"))
        canonical(annotations)
    except (TypeError, ValueError) as error:
        raise DefinitionError(f"{name!r}: not JSON: {error}") from None
    return ToolDef(
        name, description, dict(schema), None if annotations is None else dict(annotations)
    )


# --- pins ---------------------------------------------------------------------------------


Roles = Mapping[str, Role]  # an MCP tool's argument → its role (§20)
NO_ROLES: Roles = MappingProxyType({})


@frozen
class Pins:
    """What the owner trusted of one server: each tool's definition as they saw it, and the
    role of each of its arguments as they confirmed it (an argument with none: a target)."""

    server: str
    trusted_at: str  # RFC 3339, as the caller's clock gave it
    tools: Mapping[str, ToolDef]
    roles: Mapping[str, Roles] | None = None  # by tool name; None: none pinned

    def roles_of(self, tool: str) -> Roles:
        return NO_ROLES if self.roles is None else self.roles.get(tool, NO_ROLES)

    def hash_of(self, tool: str) -> str | None:
        found = self.tools.get(tool)
        return None if found is None else found.sha256


def render_pins(pins: Pins) -> bytes:
    """The pins file's bytes: sorted, indented JSON (written by `bxctl mcp trust`, read by
    brokerd and loopd; not for editing by hand: a changed definition no longer matches its
    stored hash)."""
    body = {
        "version": PINS_VERSION,
        "server": pins.server,
        "trusted_at": pins.trusted_at,
        "tools": {
            name: {
                "sha256": tool.sha256,
                "definition": tool.definition(),
                "roles": {arg: role.value for arg, role in sorted(pins.roles_of(name).items())},
            }
            for name, tool in sorted(pins.tools.items())
        },
    }
    return (json.dumps(body, ensure_ascii=False, sort_keys=True, indent=1) + "\n").encode()


def parse_pins(server: str, data: bytes) -> Pins:
    """A pins file, strictly: every tool's stored hash must be its definition's, and its roles
    must name its own arguments, so a file edited by hand (or damaged) pins nothing
    (`DefinitionError`). A version 1 file (before roles) pins its tools with no roles: every
    argument a target until the owner trusts the server again."""
    if len(data) > MAX_PINS_BYTES:
        raise DefinitionError(f"the pins file is larger than {MAX_PINS_BYTES} bytes")
    try:
        body = strict_json.loads(data)
    except strict_json.StrictJsonError as error:
        raise DefinitionError(f"the pins file is not JSON: {error}") from None
    if not isinstance(body, dict) or set(body) != {"version", "server", "trusted_at", "tools"}:
        raise DefinitionError(
            "the pins file does not have the keys version, server, trusted_at, tools"
        )
    if body["version"] not in READABLE_VERSIONS or body["server"] != server:
        raise DefinitionError(f"the pins file is not version {PINS_VERSION} of server {server!r}")
    if not isinstance(body["trusted_at"], str) or not isinstance(body["tools"], dict):
        raise DefinitionError("the pins file's trusted_at or tools has the wrong type")
    if len(body["tools"]) > MAX_TOOLS:
        raise DefinitionError(f"the pins file holds more than {MAX_TOOLS} tools")
    keys = {"sha256", "definition"} | ({"roles"} if body["version"] >= 2 else set())
    tools: dict[str, ToolDef] = {}
    roles: dict[str, Roles] = {}
    for name, entry in body["tools"].items():
        if not isinstance(entry, dict) or set(entry) != keys:
            raise DefinitionError(f"pinned tool {name!r}: expected {', '.join(sorted(keys))}")
        tool = tool_def(entry["definition"])
        if tool.name != name or tool.sha256 != entry["sha256"]:
            raise DefinitionError(f"pinned tool {name!r}: its hash is not its definition's")
        tools[name] = tool
        given = entry.get("roles", {})
        problem = (
            roles_problem(tool.input_schema, given)
            if isinstance(given, dict)
            else "the roles are not an object"
        )
        if problem is not None:
            raise DefinitionError(f"pinned tool {name!r}: {problem}")
        roles[name] = {arg: Role(role) for arg, role in given.items()}
    return Pins(server, body["trusted_at"], tools, roles)


# --- what a listing says against the pins ---------------------------------------------------


@frozen
class Comparison:
    """A server's listing against its pins (§18.3)."""

    same: tuple[str, ...]  # pinned and unchanged: offered and decided
    changed: tuple[str, ...]  # pinned, but listed with another definition: a rug pull
    new: tuple[str, ...]  # listed, never pinned
    gone: tuple[str, ...]  # pinned, no longer listed

    @property
    def flagged(self) -> bool:
        """Something the owner should look at (`bxctl mcp list`, `status`)."""
        return bool(self.changed or self.new)


def compare(pins: Pins | None, listed: Iterable[ToolDef]) -> Comparison:
    pinned = dict(pins.tools) if pins is not None else {}
    now = {tool.name: tool for tool in listed}
    same = sorted(n for n, t in now.items() if n in pinned and pinned[n].sha256 == t.sha256)
    changed = sorted(n for n, t in now.items() if n in pinned and pinned[n].sha256 != t.sha256)
    new = sorted(n for n in now if n not in pinned)
    gone = sorted(n for n in pinned if n not in now)
    return Comparison(tuple(same), tuple(changed), tuple(new), tuple(gone))


# --- what brokerd may decide -----------------------------------------------------------------


@frozen
class Catalog:
    """The MCP tools as brokerd decides them (§18.3, §18.4), by model name: `tools` are pinned
    and unchanged (offered, decidable); `changed` were last listed new or changed (a rug pull:
    `unknown_tool` with the `CHANGED` detail). Anything else is no tool at all. `pinned`: each
    server's pins whole, changed tools too, which the grants' `[match]` keys are checked
    against (`services.brokerd.core.grant_check`), as `bxctl` checks them offline."""

    tools: Mapping[str, ToolDef]
    changed: frozenset[str] = frozenset()
    pinned: Mapping[str, Pins] | None = None  # a default must be hashable: None is no pins

    @property
    def pins(self) -> Mapping[str, Pins]:
        return self.pinned or NO_PINS

    def roles_of(self, tool: str) -> Roles:
        """The pinned roles of the tool the model calls `tool` (§20)."""
        split = split_name(tool)
        pins = None if split is None else self.pins.get(split[0])
        return NO_ROLES if pins is None or split is None else pins.roles_of(split[1])

    def __repr__(self) -> str:
        return f"Catalog({len(self.tools)} tools, {len(self.changed)} changed)"


NO_PINS: Mapping[str, Pins] = MappingProxyType({})
NO_TOOLS = Catalog({})


def build_catalog(
    pins: Mapping[str, Pins], listings: Mapping[str, Comparison]
) -> tuple[Catalog, tuple[str, ...]]:
    """The catalog from each server's pins and, where it has been listed, its comparison; and
    the tools left out because their model name would not fit (for a log line, §18.4)."""
    tools: dict[str, ToolDef] = {}
    changed: set[str] = set()
    left_out: list[str] = []
    for server, pinned in sorted(pins.items()):
        listing = listings.get(server)
        refused = set(listing.changed) if listing is not None else set()
        for tool_name, tool in sorted(pinned.tools.items()):
            name = model_name(server, tool_name)
            if name is None:
                left_out.append(f"{server}/{tool_name}")
            elif tool_name in refused:
                changed.add(name)
            else:
                tools[name] = tool
    for server, listing in sorted(listings.items()):
        for tool_name in listing.new:
            name = model_name(server, tool_name)
            if name is not None:
                changed.add(name)
    return Catalog(tools, frozenset(changed), MappingProxyType(dict(pins))), tuple(left_out)
