"""Grant files (SPEC §5.1, §18.5; a shell's `write`, issue 15): one TOML file a grant in
`{home}/grants/`, parsed strictly.

`parse_grant` is pure: a file's id and bytes in, a `Grant` or an `InvalidGrant` (with why, in
one line) out. An invalid grant never matches anything; one that reads as a deny of a known
tool says which (`InvalidGrant.denies`), for it then denies that whole tool (fail closed:
`services.brokerd.core.grant_check`). Reading the folder is the shell's
(`services.brokerd.grants_folder`).
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import math
import re
import tomllib
from typing import Any

from bxcore import mcp_tools
from bxcore.frozen import frozen
from bxcore.ids import valid_grant_id
from bxcore.labels import DataClass
from bxcore.owner_toml import TableError, load_table
from bxcore.tools import BROKERED, Match, Mount
from services.brokerd.core.args import inside, valid_host_pattern, valid_path

MAX_GRANT_BYTES = 64 * 1024
_KEYS = ("tool", "mode", "path", "host", "class", "untrusted", "note", "write", "kind", "match")
_MCP_ONLY = ("kind", "match")
GLOB = "glob:"
MAX_MATCH_KEYS = 32
MAX_MATCH_VALUES = 64
#: Every sandbox has a /proc and a /dev of its own (brokerd keeps its own things there).
SANDBOX_OWN = ("/proc", "/dev")


class Mode(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class McpKind(enum.StrEnum):
    """What an MCP tool does, as the owner says (§18.5); the server's hints are never trusted.
    It decides the flow and ask checks only: whatever the kind, a result raises the session
    (issue 23: a reader granted as a sink must not launder what it read)."""

    SOURCE = "source"  # reads: no flow check, never asked for being untrusted
    SINK = "sink"  # writes or sends: the flow check and, when untrusted, the owner
    BOTH = "both"

    @property
    def sink(self) -> bool:
        return self is not McpKind.SOURCE


#: What each kind means, in the owner's words (`bxctl grant check`, `bxctl mcp show`).
KINDS_SAID = (
    ("source", "its result raises the session by the grant's class and untrusted"),
    (
        "sink",
        "the flow check (the session's class must be at most the grant's) and, in an "
        "untrusted session, the owner's approval of each call",
    ),
    ("both", "both (the default)"),
)
#: And what holds whatever the kind (issue 23).
RESULTS_SAID = (
    "whatever the kind, every result raises the session by the grant's class and untrusted, "
    "a sink's too, an empty or failed one too: a reader granted as a sink launders nothing"
)


#: One allowed value of a `[match]` key: an exact JSON string or number, or `glob:` pattern.
MatchValue = str | int | float


@frozen
class Grant:
    id: str
    tool: str
    mode: Mode
    path: str | None
    host: str | None
    class_: DataClass
    untrusted: bool
    note: str
    sha256: str
    kind: McpKind | None = None  # MCP grants only (§18.5)
    match: tuple[tuple[str, tuple[MatchValue, ...]], ...] = ()  # argument → allowed values
    write: bool = True  # shell only: False binds its folder read-only (issue 15)

    def __repr__(self) -> str:
        scope = self.path or self.host or "*"
        read_only = "" if self.write else ", read-only"
        return f"Grant({self.id}: {self.mode} {self.tool} {scope}, {self.class_}{read_only})"

    @property
    def mcp(self) -> bool:
        return self.kind is not None

    @property
    def pattern(self) -> tuple[str, str] | None:
        """(server, prefix) of a grant of every tool of a server whose name starts with
        `prefix` (`mcp__<server>__<prefix>*`; `mcp__<server>__*`: the prefix is empty)."""
        return mcp_tools.pattern_of(self.tool) if self.mcp else None

    def covers(self, tool: str) -> bool:
        """Whether this grant names `tool`: exactly, or by its pattern."""
        if self.pattern is not None:
            return mcp_tools.pattern_covers(self.tool, tool)
        return self.tool == tool

    def holds(self, arguments: Any) -> bool:
        """Every `[match]` key holds for the call's arguments (a JSON object, §18.5)."""
        if not self.match:
            return True
        if not isinstance(arguments, dict):
            return False
        return all(
            key in arguments and any(_allows(v, arguments[key]) for v in values)
            for key, values in self.match
        )


def _allows(allowed: MatchValue, value: Any) -> bool:
    """An exact string or number (a boolean is neither: JSON `true` is not `1`), or a glob
    pattern for a string. `fnmatchcase`: no case folding, `*` crosses `/` (said in docs)."""
    if isinstance(value, bool):
        return False
    if isinstance(allowed, str):
        if not isinstance(value, str):
            return False
        if allowed.startswith(GLOB):
            return fnmatch.fnmatchcase(value, allowed[len(GLOB) :])
        return value == allowed
    return isinstance(value, int | float) and value == allowed


@frozen
class InvalidGrant:
    """A grant file that is no grant, and why. `denies`: the tools (names, or server
    patterns) it names when it reads as a deny: being invalid, it denies every call of them
    until it is mended, rather than none (fail closed, issue 23)."""

    id: str
    sha256: str
    problem: str
    denies: tuple[str, ...] = ()


@frozen
class GrantSet:
    valid: tuple[Grant, ...] = ()
    invalid: tuple[InvalidGrant, ...] = ()


def takes_write(tool: str) -> bool:
    """Whether a grant of `tool` takes `write`: a tool that runs in its folder (shell)."""
    spec = BROKERED.get(tool)
    return spec is not None and spec.mount is Mount.WORKDIR


def valid_id(grant_id: str) -> bool:
    return valid_grant_id(grant_id)


def parse_grant(grant_id: str, data: bytes) -> Grant | InvalidGrant:
    """One grant file's bytes, strictly: anything wrong makes the whole grant invalid."""
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        return _parse(grant_id, data, sha256)
    except _Invalid as problem:
        return InvalidGrant(grant_id, sha256, str(problem), denies_named(data))


def known_tool(tool: str) -> bool:
    """A built-in tool's name, an MCP tool's (`mcp__<server>__<tool>`) or a server pattern."""
    return tool in BROKERED or _mcp_tool(tool)


def denies_named(data: bytes) -> tuple[str, ...]:
    """The known tools a grant file that is invalid denies, as far as it can be read: its
    `tool` when its `mode` is a deny (`"deny"`, in any case or spacing); for a file that is not even
    TOML, every `tool = "…"` line before its first table, when a `mode = "deny"` line is
    there too (docs/grants.md says why a broken file fails closed)."""
    text = data[: MAX_GRANT_BYTES + 1].decode("utf-8", "replace")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return _scanned(text)
    tool, mode = table.get("tool"), table.get("mode")
    if not isinstance(tool, str) or not isinstance(mode, str) or mode.strip().lower() != Mode.DENY:
        return ()
    return (tool,) if known_tool(tool) else ()


_TOOL_LINE = re.compile(r"""\s*["']?tool["']?\s*=\s*(["'])([^"'\\]*)\1\s*(#.*)?""")
_DENY_LINE = re.compile(r"""\s*["']?mode["']?\s*=\s*(["'])\s*deny\s*\1\s*(#.*)?""", re.I)


def _scanned(text: str) -> tuple[str, ...]:
    """The line scan of a file TOML cannot read (`denies_named`)."""
    tools: list[str] = []
    deny = False
    for line in text.splitlines():
        if line.lstrip().startswith("["):
            break  # a table: what follows is no longer the grant's own keys
        if _DENY_LINE.fullmatch(line):
            deny = True
        elif (found := _TOOL_LINE.fullmatch(line)) and known_tool(found[2]):
            tools.append(found[2])
    return tuple(dict.fromkeys(tools)) if deny else ()


class _Invalid(Exception):
    pass


def _parse(grant_id: str, data: bytes, sha256: str) -> Grant:
    if not valid_id(grant_id):
        raise _Invalid(
            f"the file name {grant_id!r} is not a grant id (a-z 0-9 -, at most 64, "
            "not starting with -)"
        )
    try:
        table = load_table(data, MAX_GRANT_BYTES, _KEYS)
    except TableError as error:
        raise _Invalid(str(error)) from None
    tool = _text(table, "tool", required=True)
    is_mcp = _mcp_tool(tool)
    if not is_mcp and tool not in BROKERED:
        raise _Invalid(
            f"tool: {tool!r} is not one of {', '.join(BROKERED)}, mcp__SERVER__TOOL "
            "or a pattern mcp__SERVER__* or mcp__SERVER__PREFIX*"
        )
    mode_text = _text(table, "mode", required=True)
    if mode_text not in Mode.__members__.values():
        raise _Invalid(f'mode: expected "allow", "ask" or "deny", got {mode_text!r}')
    if is_mcp:
        return _parse_mcp(grant_id, table, tool, Mode(mode_text), sha256)
    spec = BROKERED[tool]
    for key in _MCP_ONLY:
        if key in table:
            raise _Invalid(f"{key}: only a grant of an MCP tool takes {key}")
    if "write" in table and not takes_write(tool):
        raise _Invalid("write: only a shell grant takes write (its folder's binding)")
    write = table.get("write", True)
    if type(write) is not bool:
        raise _Invalid(f"write: expected true or false, got {_shown(write)}")
    path = _text(table, "path")
    host = _text(table, "host")
    wanted = spec.grant_key
    for key, value in (("path", path), ("host", host)):
        if value is not None and key != wanted:
            raise _Invalid(f"{key}: a {tool} grant takes no {key}")
    if wanted == "path":
        if path is None:
            raise _Invalid(f"path: missing; a {tool} grant names the folder or file it covers")
        if not valid_path(path):
            raise _Invalid(
                f"path: {path!r} is not a valid path (absolute, no trailing /, no . or ..)"
            )
        for own in SANDBOX_OWN:
            if inside(own, path):
                raise _Invalid(f"path: {own} is every sandbox's own; a grant cannot name it")
    if wanted == "host":
        if host is None:
            raise _Invalid(f"host: missing; a {tool} grant names a host like en.wikipedia.org")
        if not valid_host_pattern(host):
            raise _Invalid(f"host: {host!r} is not a host name or a *.base pattern")
    class_, untrusted, note = _common(table, untrusted_default=spec.match is Match.HOST)
    mode = Mode(mode_text)
    return Grant(grant_id, tool, mode, path, host, class_, untrusted, note, sha256, write=write)


def _common(table: dict[str, Any], *, untrusted_default: bool) -> tuple[DataClass, bool, str]:
    """`class`, `untrusted` and `note`, which every grant takes."""
    class_text = _text(table, "class") or DataClass.PRIVATE.value
    if class_text not in DataClass.__members__.values():
        raise _Invalid(f'class: expected "public", "private" or "secret", got {class_text!r}')
    untrusted = table.get("untrusted", untrusted_default)
    if type(untrusted) is not bool:
        raise _Invalid(f"untrusted: expected true or false, got {_shown(untrusted)}")
    return DataClass(class_text), untrusted, _text(table, "note") or ""


def _mcp_tool(tool: str) -> bool:
    """`mcp__<server>__<tool>` as the model sees it, or a pattern, `mcp__<server>__*` (§18.5)
    or `mcp__<server>__<prefix>*` (issue 27)."""
    if not tool.startswith(mcp_tools.PREFIX):
        return False
    if tool.endswith("*"):
        return mcp_tools.pattern_of(tool) is not None
    return (
        mcp_tools.split_name(tool) is not None and mcp_tools.MODEL_NAME.fullmatch(tool) is not None
    )


def _parse_mcp(grant_id: str, table: dict[str, Any], tool: str, mode: Mode, sha256: str) -> Grant:
    for key in ("path", "host"):
        if key in table:
            raise _Invalid(f"{key}: an MCP grant takes no {key}; its server's [[mcp]] entry does")
    if "write" in table:
        raise _Invalid("write: only a shell grant takes write (its folder's binding)")
    kind_text = _text(table, "kind") or McpKind.BOTH.value
    if kind_text not in McpKind.__members__.values():
        raise _Invalid(f'kind: expected "source", "sink" or "both", got {kind_text!r}')
    match = _match(table.get("match", {}))
    class_, untrusted, note = _common(table, untrusted_default=True)
    return Grant(
        grant_id, tool, mode, None, None, class_, untrusted, note, sha256, McpKind(kind_text), match
    )


def _match(table: Any) -> tuple[tuple[str, tuple[MatchValue, ...]], ...]:
    """`[match]`: argument name → a value or an array of values (§18.5)."""
    if not isinstance(table, dict):
        raise _Invalid(f"match: expected a table of argument = value(s), got {_shown(table)}")
    if len(table) > MAX_MATCH_KEYS:
        raise _Invalid(f"match: more than {MAX_MATCH_KEYS} keys")
    out: list[tuple[str, tuple[MatchValue, ...]]] = []
    for key, given in sorted(table.items()):
        values = given if isinstance(given, list) else [given]
        if not values or len(values) > MAX_MATCH_VALUES:
            raise _Invalid(f"match.{key}: expected 1 to {MAX_MATCH_VALUES} values")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise _Invalid(
                    f"match.{key}: expected a string, a number or a glob: pattern, "
                    f"got {_shown(value)}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise _Invalid(f"match.{key}: {_shown(value)} is not a JSON number")
            if isinstance(value, str) and value == GLOB:
                raise _Invalid(f"match.{key}: an empty glob: pattern")
        out.append((key, tuple(values)))
    return tuple(out)


def _text(table: dict[str, Any], key: str, *, required: bool = False) -> Any:
    value = table.get(key)
    if value is None:
        if required:
            raise _Invalid(f"{key}: missing")
        return None
    if type(value) is not str:
        raise _Invalid(f"{key}: expected a string, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
