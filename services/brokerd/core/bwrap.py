"""The sandbox's `bwrap` command for one call (SPEC §8.2), pure: built from the tool's
description, the winner's path, what the host looks like (`Host`, found by
`services.brokerd.sandbox.discover_host`) and who tools run as. The winner's path and every
folder laid over it come as descriptors brokerd opened without following a symbolic link
(`services.brokerd.sandbox`), and the toolkit checks inside that each is the very folder
brokerd checked. `mode = "none"` (development only) runs the toolkit with no confinement.
docs/sandbox.md says what is bound and why. No I/O: strings in, an argument vector out.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from bxcore.tools import Mount
from services.brokerd.core.args import inside

INSIDE = "/dev/.bx"
LIB_INSIDE = f"{INSIDE}/lib"
TOOLKIT_INSIDE = f"{LIB_INSIDE}/toolkit"
PYTHON_INSIDE = f"{INSIDE}/python"  # the Python's prefix again, reachable by any tool user
PROXY_INSIDE = f"{INSIDE}/fetch.sock"
CA_INSIDE = f"{INSIDE}/ca.pem"
#: Only the toolkit's private, read-only folder is put on its path, with the standard library
#: bound again where a tool user can always reach it: nothing a tool can write is ever
#: imported by a later call's toolkit, and what the toolkit imports once it is the tool user
#: is found even when the Python lies in a folder only root may enter (/root).
BOOTSTRAP = "import sys;sys.path[:0]={path!r};from toolkit.__main__ import main;main()"
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: What the toolkit holds, when brokerd is root, only until it becomes the tool user.
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_RESOURCE", "CAP_DAC_READ_SEARCH")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Host:
    """What the sandbox is built from: found once at start (`sandbox.discover_host`)."""

    bwrap: str | None  # the bwrap program, None when it is not installed
    python: str  # the real interpreter (not a venv's link to it)
    python_prefix: str  # the folder holding its standard library, bound read-only
    toolkit: str  # the folder of the toolkit package, bound read-only at TOOLKIT_INSIDE
    stdlib: tuple[str, ...] = ()  # the standard library's folders, relative to the prefix
    links: tuple[tuple[str, str], ...] = ()  # /bin -> usr/bin and the like
    folders: tuple[str, ...] = ()  # /lib64 and the like when they are real folders
    drop_to: tuple[int, int] | None = None  # brokerd is root: the uid and gid tools become
    seccomp: bytes = b""  # the filter program (services.brokerd.core.seccomp)
    problem: str | None = None  # why no sandbox can start, for "sandbox unavailable: …"
    name: str | None = None  # the argv[0] bwrap is given (`leftovers.mark`), else its path


class Cover(enum.Enum):
    """What a layer over the winner's path does (`view.View`)."""

    FOLDER = "folder"  # an empty, read-only folder over a folder
    FILE = "file"  # /dev/null over a file
    PIN = "pin"  # the folder bound onto itself, so that nothing can move it
    REOPEN = "reopen"  # a folder inside a cover, shown again


@dataclass(frozen=True, slots=True)
class Layer:
    cover: Cover
    path: str
    fd: int = -1  # PIN and REOPEN: the folder, opened without following a link


@dataclass(frozen=True, slots=True)
class Confined:
    """One confined call: the tool, what it may see, and its environment."""

    tool: str
    mount: Mount
    path: str | None  # the winner's path (file tools, shell)
    cwd: str | None = None  # shell's working folder (else the winner's path)
    bound: int | None = None  # `path` pinned by `open_granted`; None binds nothing of it
    layers: tuple[Layer, ...] = ()  # covers, pins and re-openings inside the winner's path
    read_only: bool = False  # a shell grant's `write = false`: its path bound read-only
    memory_mb: int | None = None  # the shell's rlimits, set while bwrap waits (`limits`)
    max_processes: int | None = None
    tmp_mb: int = 256  # the size of the private /tmp and /dev/shm
    timeout_s: float = 10.0
    proxy: str | None = None  # the fetch proxy's socket on the host
    ca_file: str | None = None  # an extra CA bundle for http_fetch (tests)
    checks: tuple[tuple[str, int, int], ...] = ()  # (path, st_dev, st_ino) of each bound folder
    seccomp_fd: int = -1  # a pipe holding the filter program
    info_fd: int = -1  # bwrap writes the sandbox's pid here, then ...
    block_fd: int = -1  # ... waits for a byte here (the user is mapped, the cgroup joined)
    cgroup_fd: int = -1  # the call's cgroup's `tasks`, which the toolkit joins (`cgroup`)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors this call hands to bwrap."""
        found = [self.bound] if self.bound is not None else []
        found += [layer.fd for layer in self.layers]
        found += [self.seccomp_fd, self.info_fd, self.block_fd, self.cgroup_fd]
        return tuple(fd for fd in found if fd is not None and fd >= 0)


def command(host: Host, call: Confined) -> list[str]:
    """The `bwrap` argument vector for `call` (§8.2): fresh namespaces, no capability, no
    setuid bit (seccomp), never root, system folders read-only, of the host only what the
    winner names, and nothing writable but what the grant and a bounded /tmp give.

    The winner's path is bound from the descriptor `call.bound` (`--bind-fd`), which
    `open_granted` reached without following a symbolic link: binding it by name would let
    bwrap follow a link that a tool swapped in since (a folder replaced by `ln -s / folder`).
    bwrap closes every descriptor it is given before the tool starts.

    When brokerd is root (`host.drop_to`), the sandbox is set up as root in a user namespace
    whose map brokerd writes while bwrap waits (`--userns-block-fd`): root, and the tool
    user. The toolkit keeps four capabilities only long enough to check what is bound and
    become that user (`toolkit.confine`)."""
    assert host.bwrap is not None
    limited = call.memory_mb is not None or call.max_processes is not None
    assert not limited or call.block_fd >= 0, "brokerd sets the rlimits while bwrap waits"
    granted = call.mount in (Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR)
    grant = call.path if granted and call.path and call.bound is not None else None
    kind = "--ro-bind-fd" if call.mount is Mount.READ_ONLY or call.read_only else "--bind-fd"
    # System folders are bound where they are on the host, so that under a grant of one of
    # their parents (`/` above all) their mount points already exist: bwrap never has to
    # create one inside a bound host folder. The host's own /bin-style links come with a
    # grant of `/`.
    binds: list[tuple[str, list[str]]] = [
        ("/usr", ["--ro-bind", "/usr", "/usr"]),
        (host.python_prefix, ["--ro-bind", host.python_prefix, host.python_prefix]),
    ]
    binds += [(folder, ["--ro-bind", folder, folder]) for folder in host.folders]
    binds += [
        (link, ["--symlink", target, link])
        for target, link in host.links
        if grant is None or not inside(grant, link)
    ]
    tmp = ["--perms", "1777", "--size", str(call.tmp_mb * MIB), "--tmpfs"]  # as on a host
    binds += [("/proc", ["--proc", "/proc"]), ("/dev", ["--dev", "/dev"])]
    binds += [("/dev/shm", [*tmp, "/dev/shm"]), ("/tmp", [*tmp, "/tmp"])]
    binds += [(TOOLKIT_INSIDE, ["--ro-bind", host.toolkit, TOOLKIT_INSIDE])]
    binds += [(PYTHON_INSIDE, ["--ro-bind", host.python_prefix, PYTHON_INSIDE])]
    read_only = ["/dev"]
    if grant is not None:
        binds.append((grant, [kind, str(call.bound), grant]))
        for layer in call.layers:
            binds.append((layer.path, _layer(layer, kind)))
            if layer.cover is Cover.FOLDER:
                read_only.append(layer.path)
    if call.mount is Mount.PROXY:
        binds.append(("/etc/ssl/certs", ["--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"]))
        if call.proxy:  # connecting needs no write access: read-only, so it cannot be changed
            binds.append((PROXY_INSIDE, ["--ro-bind", call.proxy, PROXY_INSIDE]))
        if call.ca_file:
            binds.append((CA_INSIDE, ["--ro-bind", call.ca_file, CA_INSIDE]))
    # Parents before children, so a narrower mount is never hidden under a wider one; at equal
    # depth the order above holds, so a grant of /tmp itself comes after the private /tmp.
    binds.sort(key=lambda item: depth(item[0]))
    argv = [host.name or host.bwrap, "--unshare-all", "--unshare-user"]
    if host.drop_to is not None:
        assert call.info_fd >= 0 and call.block_fd >= 0, "a root brokerd maps the user itself"
        argv += ["--info-fd", str(call.info_fd), "--userns-block-fd", str(call.block_fd)]
        argv += ["--cap-drop", "ALL", *(f for cap in ROOT_CAPS for f in ("--cap-add", cap))]
    else:
        argv += ["--disable-userns", "--cap-drop", "ALL"]
        if call.info_fd >= 0 and call.block_fd >= 0:
            argv += ["--info-fd", str(call.info_fd), "--block-fd", str(call.block_fd)]
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    if call.seccomp_fd >= 0:
        argv += ["--seccomp", str(call.seccomp_fd)]
    argv += mounts(binds)
    # Once every mount is made, nothing of the sandbox's own is writable but /tmp and
    # /dev/shm (bounded); `/` stays writable only when it is the grant itself.
    if grant != "/":
        read_only.append("/")
    for path in sorted(read_only, key=depth, reverse=True):
        argv += ["--remount-ro", path]
    env = environment(call, inside=True)
    if host.drop_to is not None:
        env["BX_USER"] = f"{host.drop_to[0]}:{host.drop_to[1]}"
        env["BX_USERNS"] = "0"
    if call.mount is Mount.WORKDIR:  # `--unshare-all`: a shell's toolkit is its namespace's PID 2
        env["BX_PID_NAMESPACE"] = "own"
    if call.cgroup_fd >= 0:
        env["BX_CGROUP_FD"] = str(call.cgroup_fd)
    if call.checks:
        env["BX_BOUND"] = ";".join(
            f"{dev}:{ino}:{path.encode().hex()}" for path, dev, ino in call.checks
        )
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    # The toolkit moves to the working folder itself, so that a missing one is the tool's
    # error ("no such directory"), not bwrap's.
    argv += ["--chdir", "/"]
    sys_path = [LIB_INSIDE, *(f"{PYTHON_INSIDE}/{folder}" for folder in host.stdlib)]
    argv += [host.python, "-I", "-S", "-c", BOOTSTRAP.format(path=sys_path), call.tool]
    return argv


HOST_BINDS = frozenset({"--ro-bind", "--bind", "--ro-bind-fd", "--bind-fd", "--ro-bind-try"})


def mounts(binds: list[tuple[str, list[str]]]) -> list[str]:
    """The mounts in order, each preceded by the folders bwrap must make for it in its own
    file systems, made 0755: bwrap 0.8 makes them 0700, which a tool user other than the
    one that set the sandbox up could not pass through. A folder inside a host bind is the
    host's own and is never made or changed."""
    made: dict[str, bool] = {"/": False}  # what is mounted where: True for a host folder
    argv: list[str] = []
    for dest, mount in binds:
        for folder in _parents(dest):
            if folder in made:
                continue
            around = max((m for m in made if inside(m, folder)), key=depth)
            if not made[around]:
                argv += ["--perms", "0755", "--dir", folder]
                made[folder] = False
        argv += mount
        made[dest] = mount[0] in HOST_BINDS
    return argv


def _parents(path: str) -> list[str]:
    """`/a/b/c` -> `/a`, `/a/b`."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: n + 1]) for n in range(len(parts))]


def _layer(layer: Layer, kind: str) -> list[str]:
    if layer.cover is Cover.FOLDER:
        return ["--tmpfs", layer.path]
    if layer.cover is Cover.FILE:
        return ["--ro-bind", "/dev/null", layer.path]
    return [kind, str(layer.fd), layer.path]


def depth(path: str) -> int:
    """How deep `path` is: / is 0, /a is 1."""
    return 0 if path == "/" else path.count("/")


def unconfined_command(host: Host, call: Confined) -> list[str]:
    """`[sandbox] mode = "none"`: the toolkit, run directly. For development only."""
    bootstrap = BOOTSTRAP.format(path=[os.path.dirname(host.toolkit)])
    return [host.python, "-I", "-S", "-c", bootstrap, call.tool]


def environment(call: Confined, *, inside: bool) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "BX_TIMEOUT_S": f"{call.timeout_s:g}",
    }
    if call.path and call.mount is Mount.WORKDIR:
        env["BX_ROOT"] = call.path
    if call.memory_mb is not None and not inside:  # else brokerd sets them (`limits`)
        env["BX_MEMORY_MB"] = str(call.memory_mb)
    if call.max_processes is not None and not inside:
        env["BX_MAX_PROCESSES"] = str(call.max_processes)
    if call.mount is Mount.PROXY and call.proxy:
        env["BX_FETCH_PROXY"] = PROXY_INSIDE if inside else call.proxy
        if call.ca_file:
            env["SSL_CERT_FILE"] = CA_INSIDE if inside else call.ca_file
    env.update(call.env)
    return env
