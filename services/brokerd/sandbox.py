"""The sandbox (SPEC §8.2): the `bwrap` command for one call, and running it within limits.

`command` is pure: it builds the argument vector from the tool's description, the winner's
path and what the host looks like. `run` starts it in its own process group with rlimits,
feeds the checked arguments on standard input, caps what it reads, and kills the whole group
at the timeout. `mode = "none"` (development only) runs the toolkit with no confinement.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import anyio

from bxcore.tools import Mount

#: Where the toolkit package, and the fetch proxy's socket, appear inside the sandbox.
INSIDE = "/run/bx"
PROXY_INSIDE = f"{INSIDE}/fetch.sock"
CA_INSIDE = f"{INSIDE}/ca.pem"
BOOTSTRAP = "import sys;sys.path.insert(0,{where!r});from toolkit.__main__ import main;main()"
OUTPUT_CAP = 1024 * 1024 + 4096  # the toolkit cuts at 1 MiB and adds a note; this is the wall
ERROR_CAP = 64 * 1024
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True, slots=True)
class Host:
    """What the sandbox is built from: found once at start (see `Host.discover`)."""

    bwrap: str | None  # the bwrap program, None when it is not installed
    python: str  # the real interpreter (not a venv's link to it)
    python_prefix: str  # the folder holding its standard library, bound read-only
    toolkit: str  # the folder of the toolkit package, bound at INSIDE/toolkit
    links: tuple[tuple[str, str], ...] = ()  # /bin -> usr/bin and the like
    folders: tuple[str, ...] = ()  # /lib64 and the like when they are real folders

    @classmethod
    def discover(cls, bwrap: str | None, python: str, prefix: str, toolkit: str) -> Host:
        links: list[tuple[str, str]] = []
        folders: list[str] = []
        for name in SYSTEM_LINKS:
            path = f"/{name}"
            if os.path.islink(path):
                links.append((os.readlink(path), path))
            elif os.path.isdir(path):
                folders.append(path)
        return cls(bwrap, os.path.realpath(python), prefix, toolkit, tuple(links), tuple(folders))


@dataclass(frozen=True, slots=True)
class Call:
    """One confined call: the tool, what it may see, and its environment."""

    tool: str
    mount: Mount
    path: str | None  # the winner's path (file tools, shell)
    cwd: str | None = None  # shell's working folder (else the winner's path)
    timeout_s: float = 10.0
    proxy: str | None = None  # the fetch proxy's socket on the host
    ca_file: str | None = None  # an extra CA bundle for http_fetch (tests)
    env: Mapping[str, str] = field(default_factory=dict)


def command(host: Host, call: Call) -> list[str]:
    """The `bwrap` argument vector for `call` (§8.2): fresh namespaces, no capability, system
    folders read-only, and of the host only what the winner names."""
    assert host.bwrap is not None
    binds: list[tuple[str, list[str]]] = [
        ("/usr", ["--ro-bind", "/usr", "/usr"]),
        (host.python_prefix, ["--ro-bind", host.python_prefix, host.python_prefix]),
        (f"{INSIDE}/toolkit", ["--ro-bind", host.toolkit, f"{INSIDE}/toolkit"]),
    ]
    binds += [(folder, ["--ro-bind", folder, folder]) for folder in host.folders]
    binds += [(link, ["--symlink", target, link]) for target, link in host.links]
    binds += [("/proc", ["--proc", "/proc"]), ("/dev", ["--dev", "/dev"])]
    binds += [("/tmp", ["--tmpfs", "/tmp"])]
    if call.mount in (Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR) and call.path:
        kind = "--ro-bind-try" if call.mount is Mount.READ_ONLY else "--bind-try"
        binds.append((call.path, [kind, call.path, call.path]))
    if call.mount is Mount.PROXY:
        binds.append(("/etc/ssl/certs", ["--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"]))
        if call.proxy:
            binds.append((PROXY_INSIDE, ["--bind", call.proxy, PROXY_INSIDE]))
        if call.ca_file:
            binds.append((CA_INSIDE, ["--ro-bind", call.ca_file, CA_INSIDE]))
    # Parents before children, so a narrower mount is never hidden under a wider one.
    binds.sort(key=lambda item: (0 if item[0] == "/" else item[0].count("/"), item[0]))
    argv = [
        host.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop",
        "ALL",
    ]
    for _, mount in binds:
        argv += mount
    for key, value in sorted(environment(call, inside=True).items()):
        argv += ["--setenv", key, value]
    if call.mount is Mount.WORKDIR and call.path:
        argv += ["--chdir", call.cwd or call.path]
    argv += [host.python, "-I", "-S", "-c", BOOTSTRAP.format(where=INSIDE), call.tool]
    return argv


def unconfined_command(host: Host, call: Call) -> list[str]:
    """`[sandbox] mode = "none"`: the toolkit, run directly. For development only."""
    where = os.path.dirname(host.toolkit)
    return [host.python, "-I", "-S", "-c", BOOTSTRAP.format(where=where), call.tool]


def environment(call: Call, *, inside: bool) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "BX_TIMEOUT_S": f"{call.timeout_s:g}",
    }
    if call.path and call.mount is Mount.WORKDIR:
        env["BX_ROOT"] = call.path
    if call.mount is Mount.PROXY and call.proxy:
        env["BX_FETCH_PROXY"] = PROXY_INSIDE if inside else call.proxy
        if call.ca_file:
            env["SSL_CERT_FILE"] = CA_INSIDE if inside else call.ca_file
    env.update(call.env)
    return env


@dataclass(frozen=True, slots=True)
class Finished:
    """How a sandboxed process ended: `exit` None means it was killed (the timeout, or
    output past the cap when `cut`)."""

    exit: int | None
    stdout: bytes
    stderr: bytes
    cut: bool  # stdout passed OUTPUT_CAP and the process was stopped
    ms: int


@dataclass(frozen=True, slots=True)
class Limits:
    memory_mb: int
    max_processes: int


def _limit(limits: Limits) -> None:  # runs in the child between fork and exec
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # root's own processes are counted too: see docs/sandbox.md
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))


async def run(
    argv: Sequence[str],
    stdin: bytes,
    *,
    timeout_s: float,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Finished:
    """Run `argv` in a new session with `limits`; kill its whole group at `timeout_s`."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: _limit(limits),
        env=dict(env) if env is not None else {},
        cwd=cwd,
    )
    out = bytearray()
    err = bytearray()
    cut = False

    async def feed() -> None:
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(stdin)
            await process.stdin.drain()
            process.stdin.close()

    async def collect(stream: asyncio.StreamReader | None, into: bytearray, cap: int) -> bool:
        assert stream is not None
        while chunk := await stream.read(65536):
            into += chunk
            if len(into) > cap:
                del into[cap:]
                return True
        return False

    exit_code: int | None = None
    try:
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(feed)
                tasks.start_soon(collect, process.stderr, err, ERROR_CAP)
                cut = await collect(process.stdout, out, OUTPUT_CAP)
                if cut:
                    tasks.cancel_scope.cancel()
            if not cut:
                exit_code = await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if exit_code is None:
                _kill_group(process.pid)
                await process.wait()
    ms = int((time.monotonic() - started) * 1000)
    return Finished(exit_code, bytes(out), bytes(err), cut, ms)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
