"""Starting one MCP server's process (SPEC §18.2, §18.3): the argv and environment that start
an `[[mcp]]` entry, in its sandbox unless brokerd runs unconfined (`Launcher`); its handshake
and `tools/list` through the `mcp` SDK's ClientSession, and its pipe handed over for brokerd's
own calls (`speak`); and the `Instance` that holds it all while the process lives.

`runner` says when a process starts and stops, and for whom; here is only how, and where
its standard error goes (`open_log`: 0600, as every log of the home).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO

import anyio
import anyio.abc

from bxcore import mcp_host
from bxcore.config.mcp import McpServer
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home
from bxcore.mcp_tools import DefinitionError, ToolDef, canonical, tool_def
from services.brokerd.core.bwrap import Host
from services.brokerd.core.view import OwnPlaces
from services.brokerd.mcp import sandbox as mcp_sandbox
from services.brokerd.mcp import stdio as mcp_stdio
from services.brokerd.mcp.proxy import HostsProxy
from services.brokerd.mcp.stdio import ServerPipe
from services.brokerd.own import binds_problem

log = logging.getLogger(__name__)

LOG_MODE = 0o600  # as every other log of the home (`bxctl status` warns of a more open one)


def open_log(home: Home, name: str) -> TextIO:
    """`{home}/logs/mcp-<name>.log` for appending: the owner's alone (0600), whatever the
    umask, as are its folder (0700) and the other logs; an existing one is tightened."""
    home.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(home.mcp_log(name), flags, LOG_MODE)
    try:
        os.fchmod(fd, LOG_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


def tighten_log(home: Home, name: str) -> None:
    """An existing log of server `name` made 0600 (one a brokerd before issue 23 made 0644)."""
    try:
        fd = os.open(home.mcp_log(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # none yet (or a link, which is not the box's)
    try:
        os.fchmod(fd, LOG_MODE)
    except OSError as error:
        log.warning("cannot make %s 0600: %s", home.mcp_log(name), error.strerror)
    finally:
        os.close(fd)


class StartFailed(Exception):
    """The server did not start, or did not answer `initialize` and `tools/list` in time."""


class StartTimedOut(StartFailed):
    """It did not answer within its `start_s`, and was stopped (its exit is brokerd's doing)."""


TAIL_LINES = 3  # of a failed start's standard error, shown to the owner
MAX_SAID = 400
_FRAME = re.compile(r"\s+at \S|Node\.js v[0-9]")  # a stack frame, node's version line


def stderr_tail(text: str) -> str:
    """The last lines a server that did not start wrote on its standard error, the ones that
    say why: Python's last lines are its exception; node's exception comes before its stack
    frames and version line, which are left out."""
    said = [" ".join(line.split()) for line in text.splitlines() if _FRAME.match(line) is None]
    return " | ".join([line for line in said if line][-TAIL_LINES:])


def start_error(why: str, code: int | None, stderr: str) -> str:
    """One line for a server that did not start: its exit (when it ended of itself), what
    brokerd saw, and the end of its standard error (the cause, most often), at most MAX_SAID
    characters (the end is kept: it says most)."""
    if code is not None:
        ended = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
        why = f"{ended} ({why})"
    tail = stderr_tail(stderr)
    line = f"{why}; its standard error ends: {tail}" if tail else why
    return line if len(line) <= MAX_SAID else "…" + line[-(MAX_SAID - 1) :]


@dataclass(eq=False)
class Instance:
    """One server process, for one session (or shared), while it lives."""

    server: McpServer
    key: str
    used_at: float
    listing: dict[str, ToolDef] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # canonical outputSchema by tool
    pipe: ServerPipe | None = None
    busy: int = 0
    stop: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)
    listed: bool = False  # it answered initialize and tools/list
    process: subprocess.Popen[bytes] | None = None  # once started

    def __repr__(self) -> str:
        whose = self.key or "shared"
        state = "ended" if self.ended.is_set() else f"busy {self.busy}"
        return f"Instance({self.server.name} for {whose}, {state})"


class Launcher:
    """How this brokerd starts a server: in its sandbox (`sandboxed`), through its proxy when
    it has `hosts`, under the sandbox's seccomp filter."""

    def __init__(
        self,
        host: Host,
        home: Home,
        *,
        sandboxed: bool,
        proxies: Mapping[str, HostsProxy],
        own: OwnPlaces,
    ) -> None:
        self._host = host
        self._home = home
        self._own = own
        self._sandboxed = sandboxed
        self._proxies = proxies
        self._seccomp_written: str | None = None

    def command(self, server: McpServer) -> tuple[list[str], Mapping[str, str]]:
        """The argv that starts `server` (in its sandbox, unless brokerd runs unconfined) and
        its environment: the SDK's stdio client's defaults, with the entry's own over them."""
        from mcp.client.stdio import get_default_environment

        path = os.environ.get("PATH")
        program = mcp_host.resolve_program(server.command[0], path)
        if program is None:
            raise StartFailed(mcp_host.not_found(server.command[0], path))
        if not self._sandboxed:
            argv, env = mcp_sandbox.unconfined(server, program)
            return argv, get_default_environment() | dict(env)
        self._check_paths(server)
        if self._host.bwrap is None:
            raise StartFailed("sandbox unavailable: bwrap not found (install bubblewrap)")
        proxy = self._proxies.get(server.name)
        root = mcp_sandbox.program_root(program)
        where = str(proxy.path) if proxy is not None else None
        argv = mcp_sandbox.command(self._host, server, program, root, proxy=where)
        argv[0] = self._host.bwrap
        argv = mcp_sandbox.launched(self._host, argv, self._seccomp_file())
        return argv, get_default_environment()

    def _check_paths(self, server: McpServer) -> None:
        """StartFailed when a path of the entry would show boxmaker's own places: read-write,
        any of them (a server could grant itself anything, or plant code brokerd runs);
        read-only, all but the installation (the keys, the ledger, the sockets). The workspace
        is the agent's. Each path as written and as resolved: bwrap binds what a link names."""
        problem = binds_problem(self._own, server.paths, server.ro_paths)
        if problem is not None:
            raise StartFailed(problem)

    def _seccomp_file(self) -> str | None:
        """`{home}/run/mcp-seccomp.bpf`: the sandbox's filter (`core.seccomp`) for
        `inside/launch.py` to hand bwrap; written once. None when there is no filter."""
        if not self._host.seccomp:
            return None
        path = self._home.run / "mcp-seccomp.bpf"
        if self._seccomp_written is None:
            write_atomically(path, self._host.seccomp, durable=False)  # OSError: StartFailed
            self._seccomp_written = str(path)
        return self._seccomp_written


async def speak(
    instance: Instance,
    argv: list[str],
    env: Mapping[str, str],
    errlog: TextIO,
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """The server started and listed through the SDK's ClientSession; then its calls are
    brokerd's own JSON-RPC (`stdio`) until it is stopped or its output ends."""
    from mcp import ClientSession

    start_s = instance.server.start_s
    async with mcp_stdio.running(argv, env, errlog, instance.stop.set) as pipe:
        instance.process = pipe.process
        try:
            with anyio.fail_after(start_s):
                async with pipe.for_sdk() as streams, ClientSession(*streams) as session:
                    await session.initialize()
                    listed = await session.list_tools()
        except TimeoutError:
            raise StartTimedOut(
                f"no answer to initialize and tools/list within {start_s:g} s (its start_s)"
            ) from None
        except Exception as error:  # the SDK's "Connection closed": the pipe says what ended
            if pipe.ended is None:
                raise
            raise StartFailed(pipe.ended) from error
        if pipe.ended is not None:
            raise StartFailed(pipe.ended)
        listing: dict[str, ToolDef] = {}
        outputs: dict[str, str] = {}
        for tool in listed.tools:
            dumped = tool.model_dump(by_alias=True, exclude_none=True)
            try:
                found = tool_def(dumped)
            except DefinitionError as error:
                name = instance.server.name
                log.warning("MCP server %s lists a broken tool: %s", name, error)
                continue
            listing[found.name] = found
            if isinstance(dumped.get("outputSchema"), dict):
                outputs[found.name] = canonical(dumped["outputSchema"])
        instance.listing = listing
        instance.outputs = outputs
        instance.pipe = pipe
        instance.listed = True
        task_status.started()
        await instance.stop.wait()


def describe(error: BaseException) -> str:
    """One line of what went wrong with a server (its start, its end, a call), at most 300
    characters, for the log and the owner."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in error.exceptions)
    text = str(error) or type(error).__name__
    return " ".join(text.split())[:300]
