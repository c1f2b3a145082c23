"""The MCP servers of `[[mcp]]` (SPEC §18.2, §18.3, §18.6): started in their sandbox, started
and listed with the `mcp` SDK's client (how: `start`) and called with brokerd's own
JSON-RPC (`stdio`), one process a session (or one shared), stopped when idle, started
again after a crash or when its output ends; their listings compared with the owner's pins.

It decides nothing: a call reaches `call` only once it was allowed and recorded. It owns the
server processes (no other part of brokerd starts one) and `{home}/run/mcp-<name>.json`, the
latest listing that `bxctl mcp` shows the owner (an older brokerd's is removed at start, so
that `bxctl mcp trust` waits for this one's); it only reads `{home}/mcp/<name>.pins.json`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from bxcore import mcp_host
from bxcore.config.mcp import McpServer
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home
from bxcore.home.report import Report
from bxcore.mcp_tools import (
    CHANGED,
    Catalog,
    Comparison,
    DefinitionError,
    Pins,
    ToolDef,
    build_catalog,
    compare,
    parse_pins,
    split_name,
)
from services.brokerd.core.bwrap import Host
from services.brokerd.core.mcp_args import McpArgs
from services.brokerd.core.policy import Allowed
from services.brokerd.core.view import OwnPlaces
from services.brokerd.mcp import result as mcp_result
from services.brokerd.mcp.proxy import HostsProxy
from services.brokerd.mcp.start import (
    Instance,
    Launcher,
    StartFailed,
    StartTimedOut,
    describe,
    open_log,
    speak,
    start_error,
    tighten_log,
)
from services.brokerd.mcp.stdio import PipeError
from services.brokerd.watch import FolderWatch

log = logging.getLogger(__name__)

SHARED = ""  # the key of a server shared by every session


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
        own: OwnPlaces,
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
        self.home = home
        self.clock = clock
        self._launcher = Launcher(host, home, sandboxed=sandboxed, proxies=self.proxies, own=own)
        self._user = mcp_host.Sandboxed.of_brokerd(host.drop_to)
        self._warnings: dict[str, list[str]] = {}  # of each server's paths, found at start
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
                "warnings": self._warnings.get(name, []),
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
                for name, server in self.servers.items():
                    tighten_log(self.home, name)  # one an older brokerd left 0644
                    with contextlib.suppress(OSError):  # the last brokerd's: `mcp trust` waits
                        self._listing_file(name).unlink(missing_ok=True)
                    self._warnings[name] = mcp_host.warnings(server, self._user)
                    for line in self._warnings[name]:
                        log.warning("MCP server %s %s", name, line)
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
            log.error("MCP server %s did not start: %s", name, failed)
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
            instance = Instance(self.servers[name], key, now)
            try:
                await self._tasks.start(self._run_instance, instance)
            except Exception as error:  # any failure to start is StartFailed
                why = describe(error)
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
        argv, env = self._launcher.command(server)  # StartFailed: before anything starts
        with open_log(self.home, server.name) as errlog:
            written = os.fstat(errlog.fileno()).st_size  # where this start's own lines begin
            try:
                await speak(instance, argv, env, errlog, task_status)
            except Exception as error:  # a server's end, whatever it was
                if not instance.listed:
                    process = instance.process
                    timed_out = isinstance(error, StartTimedOut)  # its exit was brokerd's doing
                    code = None if process is None or timed_out else process.poll()
                    said = start_error(describe(error), code, self._said(server.name, written))
                    raise StartFailed(said) from None
                whose = instance.key or "shared"
                log.warning("MCP server %s (%s) ended: %s", server.name, whose, describe(error))
            finally:
                instance.pipe = None
                instance.ended.set()
                slot = (server.name, instance.key)
                if self._instances.get(slot) is instance:
                    del self._instances[slot]

    def _said(self, name: str, offset: int) -> str:
        """What server `name`'s standard error got from `offset` on (its last 16 KiB)."""
        try:
            with self.home.mcp_log(name).open("rb") as log_file:
                log_file.seek(max(offset, log_file.seek(0, os.SEEK_END) - 16384))
                return log_file.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _write_listing(self, name: str, listing: dict[str, ToolDef]) -> None:
        """`{home}/run/mcp-<name>.json`: what the server listed last, for `bxctl mcp`."""
        body = {"server": name, "tools": [tool.definition() for _, tool in sorted(listing.items())]}
        data = json.dumps(body, ensure_ascii=False, sort_keys=True).encode()
        with contextlib.suppress(OSError):
            write_atomically(self._listing_file(name), data, durable=False)

    def _listing_file(self, name: str) -> Path:
        return self.home.run / f"mcp-{name}.json"

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
            return mcp_result.read(result, ms, instance.outputs.get(tool), args.tool)
        except TimeoutError:
            instance.stop.set()  # a server that hangs is stopped; the next call starts one
            return mcp_result.Outcome.failed(
                f"the call timed out after {timeout_s:g} s; the server was stopped", started=True
            )
        except (PipeError, mcp_result.ResultError) as error:  # its end, or a broken answer
            instance.stop.set()
            return mcp_result.Outcome.failed(
                f"the MCP server {name} failed during the call: {describe(error)}", started=True
            )
        finally:
            instance.busy -= 1
            instance.used_at = self.clock()
