"""The courier (SPEC §8.1): runs a call that was allowed and recorded, and says how it went.

`memory` goes to memoryd; every other tool to a fresh sandbox running `toolkit <tool>` with
the canonical arguments on standard input, so the sandbox never sees the model's raw text.
`http_fetch` also gets a one-tunnel proxy. The courier decides nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from bxcore import service_states
from bxcore.client import AskFailed, Client, Unreachable
from bxcore.config.file import SandboxConfig
from bxcore.labels import Label
from bxcore.tools import BROKERED, Mount, Runner
from bxcore.wire.asking import Patience, patience
from bxcore.wire.messages import Done, Error, Failed, ToolRequest, ToolResponse
from services.brokerd.core import bwrap
from services.brokerd.core.bwrap import Confined, Host
from services.brokerd.core.mcp_args import McpArgs
from services.brokerd.core.policy import Allowed
from services.brokerd.mcp.runner import McpRunner
from services.brokerd.sandbox import child, limits
from services.brokerd.sandbox import host as sandbox
from services.brokerd.sandbox.cgroup import Cgroups, Slot
from services.brokerd.sandbox.child import Finished, Hold
from services.brokerd.sandbox.fetch_proxy import OneTunnel
from services.brokerd.sandbox.host import Unconfinable

log = logging.getLogger(__name__)

GRACE_S = 1.0  # the sandbox's wall comes this long after the toolkit's own timeout
GRANTED = frozenset({Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR})  # bind the winner's path


@dataclass(frozen=True, slots=True)
class Result:
    """A call that ran (`error` None: the model reads `output`) or could not (`error`).

    `started`: a sandbox was started for it, so whatever the outcome, it may have read what
    the winner's path holds (the session is raised by the winner's label all the same)."""

    ok: bool
    output: str
    label: Label | None = None  # as the runner reports it (memory recall)
    exit: int | None = None
    ms: int = 0
    error: str | None = None
    started: bool = False

    @classmethod
    def failed(
        cls, message: str, ms: int = 0, exit: int | None = None, *, started: bool = False
    ) -> Result:
        return cls(False, "", None, exit, ms, message, started)


class MemorydDown(Exception):
    """The supervisor says memoryd stays down until the owner acts."""

    def __init__(self, entry: service_states.Entry) -> None:
        why = f" ({entry.last_exit})" if entry.last_exit else ""
        super().__init__(f"memoryd is {entry.state}{why}; see `bxctl logs memoryd`")


class Courier:
    def __init__(
        self,
        config: SandboxConfig,
        host: Host,
        memory: Callable[[], Client],
        run_dir: Path,
        cgroups: Cgroups | None = None,
        mcp: McpRunner | None = None,
    ) -> None:
        self.config = config
        self.mcp = mcp  # the MCP servers (§18.2), when config.toml names any
        self.host = host
        self._memory = memory
        self._run_dir = run_dir
        self._states = service_states.StatesFile(service_states.path_in(run_dir))
        self.cgroups = cgroups  # each sandbox's memory as a whole, where one can be had

    def __repr__(self) -> str:
        return f"Courier(mode={self.config.mode}, bwrap={self.host.bwrap}, {self.cgroups!r})"

    @property
    def sandboxed(self) -> bool:
        return self.config.mode == "bwrap"

    async def run(self, session: str, call: str, allowed: Allowed) -> Result:
        if isinstance(allowed.args, McpArgs):
            return await self._mcp(session, allowed)
        spec = BROKERED[allowed.args.tool]
        if spec.runner is Runner.MEMORYD:
            return await self._remember(session, call, allowed)
        return await self._confine(allowed)

    async def _mcp(self, session: str, allowed: Allowed) -> Result:
        """An MCP tool: its server's process for the session runs it (§18.2, §18.6)."""
        if self.mcp is None:
            return Result.failed("there are no MCP servers now")
        timeout = self.mcp.timeout_of(allowed)
        found = await self.mcp.call(session, allowed, timeout)
        if found.error is not None:
            return Result.failed(found.error, found.ms, started=found.started)
        return Result(found.ok, found.output, None, 0 if found.ok else 1, found.ms, None, True)

    async def _remember(self, session: str, call: str, allowed: Allowed) -> Result:
        request = ToolRequest(
            f"m-{secrets.token_hex(8)}", session, call, "memory", allowed.args.canonical_json()
        )
        client = self._memory()
        try:
            answer = await self._ask_memoryd(client, request)
        except AskFailed as error:
            return Result.failed(f"memory unavailable: {error}")
        except MemorydDown as down:
            return Result.failed(f"memory unavailable: {down}")
        finally:
            client.close()
        if isinstance(answer, Error):
            return Result.failed(f"memoryd refused the call: {answer.message}")
        if isinstance(answer.outcome, Done):
            done = answer.outcome
            return Result(done.ok, done.output, done.label)
        if isinstance(answer.outcome, Failed):
            return Result.failed(answer.outcome.message)
        return Result.failed(f"memoryd answered {answer.outcome.TAG}")

    async def _ask_memoryd(self, client: Client, request: ToolRequest) -> ToolResponse | Error:
        """The table's tries one by one, and before each the supervisor's word: while it says
        memoryd is failed or stopped, nothing will answer, so say so at once (issue 10). The
        file is read again only when it changed: a `stat` a try otherwise."""
        table = patience("memory", request)
        each = Patience(1, table.timeout_s, table.why)
        for _ in range(table.tries):
            down = self._states.down("memoryd")
            if down is not None:
                raise MemorydDown(down)
            with contextlib.suppress(Unreachable):
                return await client.ask(request, patience=each)
        raise Unreachable(
            f"memoryd did not answer at {client.endpoint} ({table.tries} tries, "
            f"{table.timeout_s:g} s each); is it running? try `bxctl status`"
        )

    def _timeout(self, mount: Mount) -> float:
        if mount is Mount.WORKDIR:
            return self.config.shell_timeout_s
        if mount is Mount.PROXY:
            return self.config.fetch_timeout_s
        return self.config.file_timeout_s

    async def _confine(self, allowed: Allowed) -> Result:
        spec = BROKERED[allowed.args.tool]
        if self.sandboxed and self.host.bwrap is None:
            return Result.failed("sandbox unavailable: bwrap not found (install bubblewrap)")
        if self.sandboxed and self.host.problem is not None:
            return Result.failed(f"sandbox unavailable: {self.host.problem}")
        timeout = self._timeout(spec.mount)
        bound: int | None = None
        found: tuple[bwrap.Layer, ...] = ()
        with contextlib.ExitStack() as held:
            if self.sandboxed and spec.mount in GRANTED and allowed.winner.path:
                try:
                    bound = sandbox.open_granted(allowed.winner.path)
                    if bound is not None:
                        held.callback(os.close, bound)
                        writable = spec.mount is not Mount.READ_ONLY and allowed.winner.write
                        found = sandbox.layers(bound, allowed.view, writable=writable)
                        held.callback(sandbox.close, found)
                except Unconfinable as why:
                    log.warning("%s (grant %s)", why, allowed.winner.id)
                    return Result.failed(str(why))
            call = Confined(
                tool=spec.name,
                mount=spec.mount,
                path=allowed.winner.path,
                cwd=allowed.args.cwd,
                bound=bound,
                layers=found,
                read_only=not allowed.winner.write,
                memory_mb=self.config.memory_mb if spec.mount is Mount.WORKDIR else None,
                max_processes=self.config.max_processes if spec.mount is Mount.WORKDIR else None,
                tmp_mb=self.config.tmp_mb,
                timeout_s=timeout,
                ca_file=self.config.fetch_ca_file or None,
            )
            stdin = allowed.args.canonical_json().encode("utf-8")
            if spec.mount is not Mount.PROXY:
                return self._judge(await self._start(call, stdin, timeout), timeout)
            assert allowed.args.host is not None
            return await self._fetch(call, allowed.args.host, stdin, timeout)

    async def _fetch(self, call: Confined, host: str, stdin: bytes, timeout: float) -> Result:
        """`http_fetch`: the sandbox, with a one-tunnel proxy to `host` for the while."""
        folder = Path(tempfile.mkdtemp(prefix="fetch-", dir=self._run_dir))
        try:
            tunnel = OneTunnel(
                folder / "p.sock", host, pins=self.config.fetch_pins, timeout_s=timeout + GRACE_S
            )
            async with anyio.create_task_group() as tasks:
                try:
                    await tasks.start(tunnel.serve)
                    # The tool user connects to it; no one else can reach the 0700 folder.
                    os.chmod(tunnel.path, 0o666)
                except OSError as error:
                    why = error.strerror or str(error)
                    return Result.failed(f"sandbox unavailable: the fetch proxy: {why}")
                call = dataclasses.replace(call, proxy=str(tunnel.path))
                finished = await self._start(call, stdin, timeout)
                tasks.cancel_scope.cancel()
            log.info("http_fetch %s: %s", host, tunnel.outcome)
            return self._judge(finished, timeout)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def _start(self, call: Confined, stdin: bytes, timeout: float) -> Finished | None:
        """Run the toolkit for `call`; None when no sandbox could start (nothing ran)."""
        drop_to = self.host.drop_to
        if not self.sandboxed:
            argv = bwrap.unconfined_command(self.host, call)
            env = bwrap.environment(call, inside=False)
            cwd = (call.cwd or call.path) if call.mount is Mount.WORKDIR else None
            return await self._spawn(argv, stdin, timeout, env, cwd)
        with contextlib.ExitStack() as held:
            try:
                seccomp_fd = _pipe_holding(self.host.seccomp)
                held.callback(os.close, seccomp_fd)
                checks = _identities(call)
                hold = None
                # Only a shell runs code of the model's; the other tools are the toolkit alone,
                # whose reads and writes are bounded by construction. Where the toolkit can
                # join the cgroup itself (v1) it does, before the command starts; else the
                # sandbox is moved while bwrap waits, which costs an RCU grace period (11 ms
                # loaded, docs/performance.md).
                bounded = self.cgroups is not None and call.mount is Mount.WORKDIR
                slot = self.cgroups.take() if bounded and self.cgroups is not None else None
                moved = slot  # the cgroup brokerd moves the sandbox into, if any
                if slot is not None:
                    assert self.cgroups is not None
                    held.callback(self.cgroups.give_back, slot)
                    joinable = self.cgroups.joinable(slot)
                    if joinable is not None:
                        cgroup_fd = os.open(joinable, os.O_WRONLY | os.O_CLOEXEC)
                        held.callback(os.close, cgroup_fd)
                        call = dataclasses.replace(call, cgroup_fd=cgroup_fd)
                        moved = None
                # A shell's rlimits are set on bwrap's process while it waits (`limits`).
                limited = call.memory_mb is not None or call.max_processes is not None
                if drop_to is not None or moved is not None or limited:
                    info, info_w = _pipe(held)
                    block_r, release = _pipe(held)
                    call = dataclasses.replace(call, info_fd=info_w, block_fd=block_r)
                    ready = functools.partial(self._ready, call)
                    move = functools.partial(self._enter, moved) if moved is not None else None
                    hold = Hold(info, release, ready, move)
            except OSError as error:
                log.error("cannot prepare a sandbox: %s", error)
                return None
            call = dataclasses.replace(call, seccomp_fd=seccomp_fd, checks=checks)
            argv = bwrap.command(self.host, call)
            program = self.host.bwrap
            return await self._spawn(argv, stdin, timeout, {}, None, call.fds, hold, program)

    def _ready(self, call: Confined, pid: int) -> None:
        """While bwrap waits: the tool user mapped, when brokerd is root, and the call's
        rlimits set on the process every other of the sandbox will come from."""
        if self.host.drop_to is not None:
            _map_user(self.host.drop_to, pid)
        limits.set_on(pid, call.memory_mb, call.max_processes)

    def _enter(self, slot: Slot, pid: int) -> None:
        """While bwrap still waits: the sandbox put in its cgroup (in a thread: it blocks)."""
        assert self.cgroups is not None
        self.cgroups.enter(slot, pid)

    async def _spawn(
        self,
        argv: list[str],
        stdin: bytes,
        timeout: float,
        env: dict[str, str],
        cwd: str | None,
        fds: tuple[int, ...] = (),
        hold: Hold | None = None,
        executable: str | None = None,
    ) -> Finished | None:
        try:
            return await child.run(
                argv,
                stdin,
                timeout_s=timeout + GRACE_S,
                env=env,
                cwd=cwd,
                pass_fds=fds,
                hold=hold,
                executable=executable,
            )
        except OSError as error:
            log.error("cannot start %s: %s", argv[0], error.strerror or error)
            return None

    def _judge(self, finished: Finished | None, timeout: float) -> Result:
        """What the model reads of how the toolkit ended. Once a sandbox has started, the
        model reads only the toolkit's standard output or one of brokerd's own sentences,
        never bytes the sandbox chose for its standard error or its exit status (issue 9):
        a tool that read a secret could otherwise hand it over in an error. What it wrote
        there goes to brokerd's log, for the owner."""
        if finished is None:
            return Result.failed("sandbox unavailable: the sandbox could not be started")
        ms, code = finished.ms, finished.exit
        if finished.cut:
            return Result.failed(CUT, ms, started=True)
        if code is None:
            return Result.failed(TIMED_OUT.format(timeout), ms, started=True)
        if code == 0:
            return Result(True, finished.stdout.decode("utf-8", "replace"), None, 0, ms, None, True)
        said = _first_line(finished.stderr)
        if code == 1 and said.startswith("bwrap:") and not finished.stdout:
            log.error("bwrap could not set up a sandbox: %r", said)
            return Result.failed(SETUP_FAILED, ms, code, started=True)
        if code == 1 and finished.stdout:  # the tool's own reason, for the model to read
            out = finished.stdout.decode("utf-8", "replace")
            return Result(False, out, None, 1, ms, None, True)
        log.error("the toolkit ended with status %s: %r", code, _tail(finished.stderr))
        message = MISUSED if code == 2 else ENDED
        return Result.failed(message, ms, code, started=True)


#: What the model reads when a started sandbox gives no answer: brokerd's words only.
CUT = "the output passed 1 MiB, so the call was stopped"
TIMED_OUT = "the call timed out after {:g} s and was killed"
SETUP_FAILED = "sandbox unavailable: bwrap could not set up the sandbox (see brokerd's log)"
MISUSED = "the toolkit refused its input (see brokerd's log)"
ENDED = "the tool ended without an answer (see brokerd's log)"


def _pipe(held: contextlib.ExitStack) -> tuple[int, int]:
    read, write = os.pipe()
    held.callback(os.close, read)
    held.callback(os.close, write)
    return read, write


def _identities(call: Confined) -> tuple[tuple[str, int, int], ...]:
    """(path, device, inode) of each folder bound from a descriptor: the toolkit checks that
    what bwrap bound at each path is that very folder (`toolkit.confine`)."""
    found: list[tuple[str, int, int]] = []
    if call.bound is not None and call.path:
        info = os.fstat(call.bound)
        found.append((call.path, info.st_dev, info.st_ino))
    for layer in call.layers:
        if layer.fd >= 0:
            info = os.fstat(layer.fd)
            found.append((layer.path, info.st_dev, info.st_ino))
    return tuple(found)


def _map_user(user: tuple[int, int], pid: int) -> None:
    """The sandbox's user namespace maps root (for bwrap to set it up) and the tool user,
    whom the toolkit becomes before it reads a byte (`toolkit.confine`)."""
    uid, gid = user
    for name, text in (
        ("uid_map", f"0 0 1\n{uid} {uid} 1\n"),
        ("gid_map", f"0 0 1\n{gid} {gid} 1\n"),
    ):
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds `data` (small enough for the pipe's buffer)."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def _tail(data: bytes) -> str:
    """The end of what a sandbox wrote on its standard error, for the log (shown with
    repr(), so that no byte of it reaches the owner's terminal raw)."""
    text = data.decode("utf-8", "replace").strip()
    return text[-2000:] or "no message"


def _first_line(data: bytes) -> str:
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[0][:300] if lines else ""
