"""The `[[mcp]]` entries of `config.toml` (SPEC §18.1): one MCP server each, parsed strictly.

Pure: no I/O. `bxcore.config.file` hands each entry's table to `parse_mcp_entries`; every problem is
one `ConfigError` line naming the entry (by its name, else its place) and the key. The keys are
a table (`MCP_KEYS`) like the sections', so docs/configuration.md lists them too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bxcore.config.keys import (
    BOOLEAN,
    Check,
    Key,
    Kind,
    host_name,
    seconds,
    show,
    table_values,
)

MAX_SERVERS = 32
_NAME = re.compile(r"[a-z0-9-]{1,24}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Variables brokerd sets itself for every server (§18.1): an entry may not set them.
SET_BY_BROKERD = ("PATH", "HOME", "LANG")
#: Every sandbox has a /proc and a /dev of its own (as for grants, §5.1).
SANDBOX_OWN = ("/proc", "/dev")
REQUIRED = None  # the default of a key every entry must give
#: Programs that fetch the server from a registry at each start, which its sandbox (no
#: network) cannot do: `bxctl mcp add` installs the package once instead.
FETCHERS = ("npx", "uvx")
START_S = 10.0  # initialize and tools/list must answer within this (§18.2), by default


def valid_server_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def _path_ok(path: str) -> bool:
    """SPEC §4.4's `valid_path`, restated here (bxcore never imports brokerd)."""
    if not path.startswith("/") or "\0" in path or len(path.encode("utf-8", "replace")) > 4096:
        return False
    if path == "/":
        return True
    return all(part not in ("", ".", "..") for part in path[1:].split("/"))


def _inside(base: str, path: str) -> bool:
    rest = path[len(base) :]
    return path.startswith(base) and (base == "/" or rest == "" or rest.startswith("/"))


def _name(value: str) -> str | None:
    if valid_server_name(value):
        return None
    return f"expected 1 to 24 of a-z 0-9 -, got {show(value)}"


def _command(value: list[Any]) -> str | None:
    if not value:
        return "expected at least the program to run"
    if len(value) > 256:
        return "more than 256 arguments"
    for arg in value:
        if not isinstance(arg, str):
            return f"{show(arg)}: expected a string"
        if "\0" in arg:
            return "an argument contains a NUL character"
    program = value[0]
    absolute = program.startswith("/") and _path_ok(program)
    bare = program != "" and "/" not in program and program not in (".", "..")
    if not (absolute or bare):
        return f"{show(program)}: the program must be an absolute path or a name on PATH"
    return None


def _env(value: dict[str, Any]) -> str | None:
    for name, text in value.items():
        if _ENV_NAME.fullmatch(name) is None:
            return f"{show(name)}: expected an environment variable name"
        if name in SET_BY_BROKERD:
            return f"{name}: brokerd sets {', '.join(SET_BY_BROKERD)} itself"
        if not isinstance(text, str) or "\0" in text:
            return f"{name}: expected a string without NUL, got {show(text)}"
    return None


def _paths(value: list[Any]) -> str | None:
    if len(value) > 64:
        return "more than 64 paths"
    for path in value:
        if not isinstance(path, str) or not _path_ok(path):
            return f"{show(path)}: expected an absolute path without a trailing /, . or .."
        for own in SANDBOX_OWN:
            if _inside(own, path):
                return f"{show(path)}: {own} is every sandbox's own"
        if path == "/":
            return '"/": a server may not see the whole machine'
    return None


def _host_pattern(value: str) -> bool:
    return host_name(value) or (value.startswith("*.") and host_name(value[2:]))


def _hosts(value: list[Any]) -> str | None:
    if len(value) > 64:
        return "more than 64 hosts"
    for host in value:
        if not isinstance(host, str) or not _host_pattern(host):
            return f"{show(host)}: expected a host name such as api.example.com, or *.base"
    return None


PATHS = Check("absolute paths, not /, /proc or /dev", _paths)
MCP_KEYS: tuple[Key, ...] = (
    Key("mcp", "name", Kind.STRING, REQUIRED, Check("1 to 24 of a-z 0-9 -, unique", _name),
        "The server's name: its tools are offered as mcp__NAME__TOOL. Required."),
    Key("mcp", "command", Kind.LIST, REQUIRED,
        Check("argv: the program (absolute, or a name on PATH or in the box's own venv) and "
              "its arguments; not npx or uvx", _command),
        "The server's command line; it speaks MCP on standard input and output. Required. "
        "`bxctl mcp add` writes it from a README's (docs/mcp.md)."),
    Key("mcp", "env", Kind.TABLE, MappingProxyType({}),
        Check("variable = text; not PATH, HOME or LANG, which brokerd sets", _env),
        "Exactly the environment the server gets, besides PATH, HOME and LANG."),
    Key("mcp", "paths", Kind.LIST, (), PATHS,
        "Host paths bound read-write into the server's sandbox."),
    Key("mcp", "ro_paths", Kind.LIST, (), PATHS,
        "Host paths bound read-only into the server's sandbox."),
    Key("mcp", "hosts", Kind.LIST, (), Check("host names, or *.base patterns", _hosts),
        "Hosts the server may reach (HTTPS on port 443, through its own CONNECT proxy, as "
        "HTTPS_PROXY); none by default: no network at all."),
    Key("mcp", "per_session", Kind.BOOLEAN, True, BOOLEAN,
        "One server process per session (true), so nothing it holds reaches another "
        "session; false: one process shared by all."),
    Key("mcp", "idle_s", Kind.NUMBER, 300.0, seconds(0, 86_400.0),
        "A server process unused this many seconds is stopped."),
    Key("mcp", "timeout_s", Kind.NUMBER, 60.0, seconds(0, 86_400.0),
        "Seconds one call may take; a server that takes longer is stopped and the call is "
        "answered error."),
    Key("mcp", "start_s", Kind.NUMBER, START_S, seconds(0, 600.0),
        "Seconds a starting server has to answer initialize and tools/list; one that does not "
        "is stopped and its error shown (`bxctl mcp list`)."),
)  # fmt: skip
_BY_NAME = {key.name: key for key in MCP_KEYS}


@dataclass(frozen=True)
class McpServer:
    """One `[[mcp]]` entry (§18.1)."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    paths: tuple[str, ...] = ()
    ro_paths: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    per_session: bool = True
    idle_s: float = 300.0
    timeout_s: float = 60.0
    start_s: float = START_S


class EntryError(Exception):
    """One entry's problem, without the file's name (the caller adds it)."""


def parse_mcp_entries(value: Any, check: Any) -> tuple[McpServer, ...]:
    """The `mcp` array of tables. `check(key, value, where)` is `bxcore.config.file`'s typed key
    check (raising its `ConfigError`); problems of the entries as a whole raise
    `EntryError`, whose text starts `[[mcp]] ...`."""
    if not isinstance(value, list):
        raise EntryError(f"[mcp]: expected [[mcp]] entries (an array of tables), got {show(value)}")
    if len(value) > MAX_SERVERS:
        raise EntryError(f"[[mcp]]: more than {MAX_SERVERS} servers")
    servers: list[McpServer] = []
    seen: set[str] = set()
    for at, body in enumerate(value, 1):
        where = _where(body, at)
        if not isinstance(body, dict):
            raise EntryError(f"{where}: expected a table, got {show(body)}")
        values = table_values(body, _BY_NAME.get, where, check, EntryError)
        for key in MCP_KEYS:
            if key.default is REQUIRED and key.attr not in values:
                raise EntryError(f"{where} {key.name}: missing (every [[mcp]] entry names it)")
        fetched = _fetched(values["name"], values["command"])
        if fetched is not None:
            raise EntryError(f"{where} command: {fetched}")
        both = set(values.get("paths", ())) & set(values.get("ro_paths", ()))
        if both:
            raise EntryError(f"{where} ro_paths: {show(sorted(both)[0])} is also in paths")
        if values["name"] in seen:
            raise EntryError(f"{where} name: another [[mcp]] entry has this name")
        seen.add(values["name"])
        servers.append(McpServer(**values))
    return tuple(servers)


def _fetched(name: str, command: tuple[str, ...]) -> str | None:
    """What to run instead of a command that would fetch its server at each start."""
    program = command[0].rsplit("/", 1)[-1]
    if program not in FETCHERS:
        return None
    said = shlex.join(["bxctl", "mcp", "add", name, "--", *command])
    return (
        f"{program} fetches the server at each start, and its sandbox has no network: remove "
        f"this entry and run `{said}`, which installs it once and writes the entry"
    )


def _where(body: Any, at: int) -> str:
    name = body.get("name") if isinstance(body, dict) else None
    if isinstance(name, str) and valid_server_name(name):
        return f'[[mcp]] "{name}"'
    return f"[[mcp]] #{at}"


EXAMPLE = """\
# [[mcp]]
# name = "git"
# command = ["mcp-server-git", "--repository", "/home/me/notes"]
# paths = ["/home/me/notes"]"""
