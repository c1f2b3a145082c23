"""The courier (SPEC §8.1): runs a call that was allowed and recorded, and says how it went.

`memory` goes to memoryd; every other tool to a fresh sandbox running `toolkit <tool>` with
the canonical arguments on standard input, so the sandbox never sees the model's raw text.
`http_fetch` also gets a one-tunnel proxy. The courier decides nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from bxcore.client import Client, ProtocolError, Unreachable
from bxcore.config import SandboxConfig
from bxcore.labels import Label
from bxcore.messages import Done, Failed, ToolRequest, ToolResponse
from bxcore.tools import BROKERED, Mount, Runner
from services.brokerd import child, sandbox
from services.brokerd.child import Finished
from services.brokerd.fetch_proxy import OneTunnel
from services.brokerd.policy import Allowed
from services.brokerd.sandbox import Call, Host, Unconfinable

log = logging.getLogger(__name__)

GRACE_S = 1.0  # the sandbox's wall comes this long after the toolkit's own timeout
GRANTED = frozenset({Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR})  # bind the winner's path


@dataclass(frozen=True, slots=True)
class Result:
    """A call that ran (`error` None: the model reads `output`) or could not (`error`)."""

    ok: bool
    output: str
    label: Label | None = None  # as the runner reports it (memory recall)
    exit: int | None = None
    ms: int = 0
    error: str | None = None

    @classmethod
    def failed(cls, message: str, ms: int = 0, exit: int | None = None) -> Result:
        return cls(False, "", None, exit, ms, message)


class Courier:
    def __init__(
        self,
        config: SandboxConfig,
        host: Host,
        memory: Callable[[], Client],
        run_dir: Path,
    ) -> None:
        self.config = config
        self.host = host
        self._memory = memory
        self._run_dir = run_dir

    def __repr__(self) -> str:
        return f"Courier(mode={self.config.mode}, bwrap={self.host.bwrap})"

    @property
    def sandboxed(self) -> bool:
        return self.config.mode == "bwrap"

    async def run(self, session: str, call: str, allowed: Allowed) -> Result:
        spec = BROKERED[allowed.args.tool]
        if spec.runner is Runner.MEMORYD:
            return await self._remember(session, call, allowed)
        return await self._confine(allowed)

    async def _remember(self, session: str, call: str, allowed: Allowed) -> Result:
        request = ToolRequest(
            f"m-{secrets.token_hex(8)}", session, call, "memory", allowed.args.canonical_json()
        )
        client = self._memory()
        try:
            answer = await client.request(request)
        except (Unreachable, ProtocolError) as error:
            return Result.failed(f"memory unavailable: {error}")
        finally:
            client.close()
        if isinstance(answer, ToolResponse) and isinstance(answer.outcome, Done):
            done = answer.outcome
            return Result(done.ok, done.output, done.label)
        if isinstance(answer, ToolResponse) and isinstance(answer.outcome, Failed):
            return Result.failed(answer.outcome.message)
        return Result.failed(f"memoryd answered {type(answer).__name__}")

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
        timeout = self._timeout(spec.mount)
        bound: int | None = None
        hidden: tuple[tuple[str, bool], ...] = ()
        if self.sandboxed and spec.mount in GRANTED and allowed.winner.path:
            try:
                bound = sandbox.open_granted(allowed.winner.path)
                if bound is not None:
                    hidden = sandbox.hidden_places(bound, allowed.winner.path, allowed.hidden)
            except Unconfinable as why:
                if bound is not None:
                    os.close(bound)
                log.warning("%s (grant %s)", why, allowed.winner.id)
                return Result.failed(str(why))
        call = Call(
            tool=spec.name,
            mount=spec.mount,
            path=allowed.winner.path,
            cwd=allowed.args.cwd,
            bound=bound,
            hidden=hidden,
            memory_mb=self.config.memory_mb if spec.mount is Mount.WORKDIR else None,
            # The kernel never applies RLIMIT_NPROC to real root, not even in bwrap's user
            # namespace (docs/sandbox.md): as root, only the timeout bounds a fork bomb.
            max_processes=(
                self.config.max_processes
                if spec.mount is Mount.WORKDIR and os.getuid() != 0
                else None
            ),
            timeout_s=timeout,
            ca_file=self.config.fetch_ca_file or None,
        )
        stdin = allowed.args.canonical_json().encode("utf-8")
        try:
            if spec.mount is not Mount.PROXY:
                return self._judge(await self._start(call, stdin, timeout), timeout)
            assert allowed.args.host is not None
            return await self._fetch(call, allowed.args.host, stdin, timeout)
        finally:
            if bound is not None:
                os.close(bound)

    async def _fetch(self, call: Call, host: str, stdin: bytes, timeout: float) -> Result:
        """`http_fetch`: the sandbox, with a one-tunnel proxy to `host` for the while."""
        folder = Path(tempfile.mkdtemp(prefix="fetch-", dir=self._run_dir))
        try:
            tunnel = OneTunnel(
                folder / "p.sock", host, pins=self.config.fetch_pins, timeout_s=timeout + GRACE_S
            )
            async with anyio.create_task_group() as tasks:
                try:
                    await tasks.start(tunnel.serve)
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

    async def _start(self, call: Call, stdin: bytes, timeout: float) -> Finished:
        if self.sandboxed:
            argv = sandbox.command(self.host, call)
            env: dict[str, str] = {}
            cwd = None
        else:
            argv = sandbox.unconfined_command(self.host, call)
            env = sandbox.environment(call, inside=False)
            cwd = (call.cwd or call.path) if call.mount is Mount.WORKDIR else None
        fds = (call.bound,) if call.bound is not None else ()
        try:
            return await child.run(
                argv,
                stdin,
                timeout_s=timeout + GRACE_S,
                env=env,
                cwd=cwd,
                pass_fds=fds,
            )
        except OSError as error:
            what = "sandbox unavailable" if self.sandboxed else "the toolkit could not start"
            return Finished(127, b"", f"{what}: {error.strerror or error}".encode(), False, 0)

    def _judge(self, finished: Finished, timeout: float) -> Result:
        out = finished.stdout.decode("utf-8", "replace")
        err = _first_line(finished.stderr)
        ms = finished.ms
        if finished.cut:
            return Result.failed("the output passed 1 MiB, so the call was stopped", ms)
        if finished.exit is None:
            return Result.failed(f"the call timed out after {timeout:g} s and was killed", ms)
        if finished.exit == 0:
            return Result(True, out, None, 0, ms)
        if err.startswith(("bwrap:", "sandbox unavailable:")):
            message = err if err.startswith("sandbox") else f"sandbox unavailable: {err}"
            return Result.failed(message, ms, finished.exit)
        if finished.exit == 1:
            return Result(False, out, None, 1, ms)
        if finished.exit == 2:
            return Result.failed(err or "toolkit misuse", ms, 2)
        return Result.failed(
            f"the toolkit ended with status {finished.exit}: {err or 'no message'}",
            ms,
            finished.exit,
        )


def _first_line(data: bytes) -> str:
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[0][:300] if lines else ""
