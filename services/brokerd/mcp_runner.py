"""The MCP servers of `[[mcp]]` (SPEC §18.2, §18.3, §18.6): started in their sandbox, started
and listed with the `mcp` SDK's client and called with brokerd's own JSON-RPC (`mcp_stdio`),
one process a session (or one shared), stopped when idle, started again after a crash or when
its output ends; their listings compared with the owner's pins.

It decides nothing: a call reaches `call` only once it was allowed and recorded. It owns the
server processes (no other part of brokerd starts one) and `{home}/run/mcp-<name>.json`, the
latest listing that `bxctl mcp` shows the owner; it only reads `{home}/mcp/<name>.pins.json`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import anyio.abc

from bxcore.atomic import write_atomically
from bxcore.config_mcp import McpServer
from bxcore.home import Home
from bxcore.mcp_tools import (
    CHANGED,
    Catalog,
    Comparison,
    DefinitionError,
    Pins,
    ToolDef,
    build_catalog,
    canonical,
    compare,
    parse_pins,
    split_name,
    tool_def,
)
from bxcore.report import Report
from services.brokerd import mcp_result, mcp_sandbox, mcp_stdio
from services.brokerd.core.mcp_args import McpArgs
from services.brokerd.core.policy import Allowed
from services.brokerd.mcp_proxy import HostsProxy
from services.brokerd.mcp_stdio import PipeError, ServerPipe
from services.brokerd.sandbox import Host
from services.brokerd.watch import FolderWatch

log = logging.getLogger(__name__)

START_S = 10.0  # initialize and tools/list (§18.2)
SHARED = ""  # the key of a server shared by every session


class StartFailed(Exception):
    """The server did not start, or did not answer `initialize` and `tools/list` in time."""


@dataclass(eq=False)
class Instance:
    """One server process, for one session (or shared), while it lives."""

    server: McpServer
    key: str
    started_at: float
    used_at: float
    listing: dict[str, ToolDef] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # canonical outputSchema by tool
    pipe: ServerPipe | None = None
    busy: int = 0
    stop: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)
    listed: bool = False  # it answered initialize and tools/list

    def __repr__(self) -> str:
        whose = self.key or "shared"
        state = "ended" if self.ended.is_set() else f"busy {self.busy}"
        return f"Instance({self.server.name} for {whose}, {state})"


@dataclass(frozen=True, slots=True)
class _Pinned:
    mtime_ns: int
    pins: Pins | None
    problem: str | None


class McpRunner:
    def __init__(
        self,
        servers: tuple[McpServer, ...],
        host: Host,
        home: Home,
        *,
        sandboxed: bool,
        pins: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.servers = {server.name: server for server in servers}
        self.proxies = {  # `hosts`: each server's own egress (§18.1), started by `serve`
            server.name: HostsProxy(
                server.name,
                home.run / f"mcp-{server.name}.proxy",
                server.hosts,
                pins=pins or {},
            )
            for server in servers
            if server.hosts and sandboxed
        }
        self.host = host
        self.home = home
        self.sandboxed = sandboxed
        self.clock = clock
        self._tasks: anyio.abc.TaskGroup | None = None
        self._instances: dict[tuple[str, str], Instance] = {}
        self._locks: dict[tuple[str, str], anyio.Lock] = {}
        self._pinned: dict[str, _Pinned] = {}
        self._listings: dict[str, dict[str, ToolDef]] = {}
        self._problems: dict[str, str] = {}
        self._pins_watch = FolderWatch(home.mcp)  # says when a pins file may have changed
        self._looked: set[str] = set()  # servers whose pins file was looked at since then
        self._listed = 0  # counts the listings taken: the catalog is built again after one
        self._catalog: tuple[tuple[object, ...], Catalog] | None = None
        self._seccomp_written: str | None = None

    def __repr__(self) -> str:
        return f"McpRunner({len(self.servers)} servers, {len(self._instances)} running)"

    # --- what may be decided -------------------------------------------------------------

    def pins(self, name: str) -> Pins | None:
        """The owner's pins of `name`, read again when the file changed; None when there are
        none (or the file is damaged: then nothing of it is trusted, and the log says why).
        Asked at every decision and call: the file is looked at (`stat`) only after inotify
        said the pins folder changed, or every time where it cannot say."""
        if self._pins_watch.changed():
            self._looked.clear()  # each server's file is looked at again, once
        held = self._pinned.get(name)
        if held is not None and name in self._looked:
            return held.pins
        self._looked.add(name)
        path = self.home.mcp_pins(name)
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            mtime = -1
        if held is not None and held.mtime_ns == mtime:
            return held.pins
        pins: Pins | None = None
        problem: str | None = None
        if mtime >= 0:
            try:
                pins = parse_pins(name, path.read_bytes())
            except (OSError, DefinitionError) as error:
                problem = f"{path}: {error}"
                log.error("the pins of MCP server %s are not used: %s", name, problem)
        self._pinned[name] = _Pinned(mtime, pins, problem)
        return pins

    def comparisons(self) -> dict[str, Comparison]:
        return {
            name: compare(self.pins(name), listing.values())
            for name, listing in self._listings.items()
        }

    def catalog(self) -> Catalog:
        """The tools brokerd decides now (§18.3): pinned, and unchanged where listed; the
        last one while no pins file changed and no listing was taken since."""
        pins = {name: p for name in self.servers if (p := self.pins(name)) is not None}
        key = (tuple((n, self._pinned[n].mtime_ns) for n in sorted(self.servers)), self._listed)
        if self._catalog is not None and self._catalog[0] == key:
            return self._catalog[1]
        catalog, left_out = build_catalog(pins, self.comparisons())
        for name in left_out:
            log.warning(
                "MCP tool %s is left out: its name would not fit ^[a-zA-Z0-9_-]{1,64}$", name
            )
        self._catalog = (key, catalog)
        return catalog

    def status(self) -> dict[str, Any]:
        """What `bxctl status` and `bxctl mcp list` show of each server."""
        found: dict[str, Any] = {}
        comparisons = self.comparisons()
        for name in self.servers:
            pins = self.pins(name)
            seen = comparisons.get(name)
            running = [i for (n, _), i in self._instances.items() if n == name]
            found[name] = {
                "pinned": len(pins.tools) if pins else 0,
                "changed": list(seen.changed) if seen else [],
                "new": list(seen.new) if seen else [],
                "running": len(running),
                "problem": self._problems.get(name) or self._pinned[name].problem,
            }
        return found

    # --- the processes -------------------------------------------------------------------

    async def serve(
        self,
        report: Report | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own the server processes until cancelled; stop the idle ones; list every server
        once at start (§18.3), so a changed tool is flagged before anyone calls it; keep
        `report`'s `mcp` part (what `bxctl status` shows) up to date."""
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                for proxy in self.proxies.values():
                    await tasks.start(proxy.serve)
                task_status.started()
                for name in self.servers:
                    tasks.start_soon(self._probe, name)
                while True:
                    if report is not None:
                        report.set("mcp", self.status())
                    await anyio.sleep(0.5)
                    self._stop_idle()
        finally:
            self._tasks = None

    async def _probe(self, name: str) -> None:
        try:
            instance = await self._instance(name, f"probe-{os.getpid()}")
        except StartFailed as failed:
            log.error("MCP server %s: %s", name, failed)
            return
        instance.stop.set()

    def _stop_idle(self) -> None:
        now = self.clock()
        for instance in list(self._instances.values()):
            idle = now - instance.used_at
            if instance.busy == 0 and (
                idle >= instance.server.idle_s or instance.key.startswith("probe-")
            ):
                instance.stop.set()

    async def _instance(self, name: str, key: str) -> Instance:
        """The running process of server `name` for `key`, started when there is none."""
        slot = (name, key)
        found = self._instances.get(slot)
        if found is not None and not found.stop.is_set():
            return found  # running: no lock to take (a turn of the loop a call)
        lock = self._locks.get(slot) or self._locks.setdefault(slot, anyio.Lock())
        async with lock:
            found = self._instances.get(slot)
            if found is not None and not found.stop.is_set():
                return found
            if found is not None:
                await found.ended.wait()
            assert self._tasks is not None, "serve() runs the processes"
            now = self.clock()
            instance = Instance(self.servers[name], key, now, now)
            try:
                await self._tasks.start(self._run_instance, instance)
            except Exception as error:  # any failure to start is StartFailed
                why = _why(error)
                self._problems[name] = why
                raise StartFailed(why) from None
            self._problems.pop(name, None)
            self._instances[slot] = instance
            self._listings[name] = dict(instance.listing)
            self._listed += 1
            seen = compare(self.pins(name), instance.listing.values())
            self._write_listing(name, instance.listing)
            if seen.flagged:
                log.warning(
                    "MCP server %s lists tools the owner has not trusted: changed %s, new %s "
                    "(`bxctl mcp show %s`)",
                    name,
                    list(seen.changed),
                    list(seen.new),
                    name,
                )
            return instance

    async def _run_instance(
        self, instance: Instance, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        server = instance.server
        argv, env = self._command(server)  # StartFailed: before anything starts
        self.home.logs.mkdir(parents=True, exist_ok=True)
        with open(self.home.mcp_log(server.name), "a", encoding="utf-8") as errlog:
            try:
                await self._speak(instance, argv, env, errlog, task_status)
            except Exception as error:  # a server's end, whatever it was
                if not instance.listed:
                    raise
                whose = instance.key or "shared"
                log.warning("MCP server %s (%s) ended: %s", server.name, whose, _why(error))
            finally:
                instance.pipe = None
                instance.ended.set()
                slot = (server.name, instance.key)
                if self._instances.get(slot) is instance:
                    del self._instances[slot]

    async def _speak(
        self,
        instance: Instance,
        argv: list[str],
        env: Mapping[str, str],
        errlog: TextIO,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        """The server started and listed through the SDK's ClientSession; then its calls are
        brokerd's own JSON-RPC (`mcp_stdio`) until it is stopped or its output ends."""
        from mcp import ClientSession

        async with mcp_stdio.running(argv, env, errlog, instance.stop.set) as pipe:
            with anyio.fail_after(START_S):
                async with pipe.for_sdk() as streams, ClientSession(*streams) as session:
                    await session.initialize()
                    listed = await session.list_tools()
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

    def _command(self, server: McpServer) -> tuple[list[str], Mapping[str, str]]:
        """The argv that starts `server` (in its sandbox, unless brokerd runs unconfined) and
        its environment: the SDK's stdio client's defaults, with the entry's own over them."""
        from mcp.client.stdio import get_default_environment

        program = mcp_sandbox.resolve_program(server.command[0], os.environ.get("PATH"))
        if program is None:
            raise StartFailed(f"{server.command[0]!r} is not an executable program here")
        if not self.sandboxed:
            argv, env = mcp_sandbox.unconfined(server, program)
            return argv, get_default_environment() | dict(env)
        if self.host.bwrap is None:
            raise StartFailed("sandbox unavailable: bwrap not found (install bubblewrap)")
        proxy = self.proxies.get(server.name)
        root = mcp_sandbox.program_root(program)
        where = str(proxy.path) if proxy is not None else None
        argv = mcp_sandbox.command(self.host, server, program, root, proxy=where)
        argv[0] = self.host.bwrap
        argv = mcp_sandbox.launched(self.host, argv, self._seccomp_file())
        return argv, get_default_environment()

    def _seccomp_file(self) -> str | None:
        """`{home}/run/mcp-seccomp.bpf`: the sandbox's filter (`core.seccomp`) for
        `mcp_launch` to hand bwrap; written once. None when there is no filter."""
        if not self.host.seccomp:
            return None
        path = self.home.run / "mcp-seccomp.bpf"
        if self._seccomp_written is None:
            write_atomically(path, self.host.seccomp, durable=False)  # OSError: StartFailed
            self._seccomp_written = str(path)
        return self._seccomp_written

    def _write_listing(self, name: str, listing: dict[str, ToolDef]) -> None:
        """`{home}/run/mcp-<name>.json`: what the server listed last, for `bxctl mcp`."""
        body = {"server": name, "tools": [tool.definition() for _, tool in sorted(listing.items())]}
        data = json.dumps(body, ensure_ascii=False, sort_keys=True).encode()
        with contextlib.suppress(OSError):
            write_atomically(self.home.run / f"mcp-{name}.json", data, durable=False)

    async def aclose(self) -> None:
        for instance in list(self._instances.values()):
            instance.stop.set()

    def timeout_of(self, allowed: Allowed) -> float:
        named = split_name(allowed.args.tool)
        server = self.servers.get(named[0]) if named else None
        return server.timeout_s if server is not None else 60.0

    # --- a call --------------------------------------------------------------------------

    async def call(self, session: str, allowed: Allowed, timeout_s: float) -> mcp_result.Outcome:
        """Run one allowed MCP call (§18.6): in the session's own process, or the shared one."""
        args = allowed.args
        assert isinstance(args, McpArgs)
        named = split_name(args.tool)
        assert named is not None
        name, tool = named
        server = self.servers.get(name)
        if server is None:
            return mcp_result.Outcome.failed(f"there is no MCP server {name!r} now")
        key = session if server.per_session else SHARED
        began = self.clock()
        try:
            instance = await self._instance(name, key)
        except StartFailed as failed:
            return mcp_result.Outcome.failed(f"the MCP server {name} did not start: {failed}")
        pinned = self.pins(name)
        listed = instance.listing.get(tool)
        if pinned is None or listed is None or pinned.hash_of(tool) != listed.sha256:
            return mcp_result.Outcome.failed(CHANGED)  # changed since the decision: never run
        instance.busy += 1
        instance.used_at = self.clock()
        try:
            pipe = instance.pipe
            if pipe is None:
                return mcp_result.Outcome.failed(f"the MCP server {name} ended", started=True)
            result = await pipe.call(tool, args.text, timeout_s)
            ms = int((self.clock() - began) * 1000)
            return mcp_result.read(result, ms, instance.outputs.get(tool))
        except TimeoutError:
            instance.stop.set()  # a server that hangs is stopped; the next call starts one
            return mcp_result.Outcome.failed(
                f"the call timed out after {timeout_s:g} s; the server was stopped", started=True
            )
        except (PipeError, mcp_result.ResultError) as error:  # its end, or a broken answer
            instance.stop.set()
            return mcp_result.Outcome.failed(
                f"the MCP server {name} failed during the call: {_why(error)}", started=True
            )
        finally:
            instance.busy -= 1
            instance.used_at = self.clock()


def _why(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_why(inner) for inner in error.exceptions)
    if isinstance(error, TimeoutError):
        return f"no answer to initialize and tools/list within {START_S:g} s"
    text = str(error) or type(error).__name__
    return " ".join(text.split())[:300]
