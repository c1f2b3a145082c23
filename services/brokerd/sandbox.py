"""The sandbox (SPEC §8.2): the `bwrap` command for one call.

`command` is pure: it builds the argument vector from the tool's description, the winner's
path and what the host looks like. `open_granted` pins the winner's path as a descriptor
(never through a symbolic link), so that what is bound is what the grant names.
`services.brokerd.child` runs the command within its limits. `mode = "none"` (development
only) runs the toolkit with no confinement. docs/sandbox.md says what is bound and why.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bxcore.tools import Mount
from services.brokerd.args import inside

#: Where the fetch proxy's socket and a test CA appear inside an http_fetch sandbox.
INSIDE = "/run/bx"
PROXY_INSIDE = f"{INSIDE}/fetch.sock"
CA_INSIDE = f"{INSIDE}/ca.pem"
BOOTSTRAP = "import sys;sys.path.insert(0,{where!r});from toolkit.__main__ import main;main()"
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True, slots=True)
class Host:
    """What the sandbox is built from: found once at start (see `Host.discover`)."""

    bwrap: str | None  # the bwrap program, None when it is not installed
    python: str  # the real interpreter (not a venv's link to it)
    python_prefix: str  # the folder holding its standard library, bound read-only
    toolkit: str  # the folder of the toolkit package (named `toolkit`), bound where it is
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
        # Real paths: a bind's source and destination are then the same folder, and the
        # interpreter is found under the prefix that is bound.
        real = os.path.realpath
        return cls(bwrap, real(python), real(prefix), real(toolkit), tuple(links), tuple(folders))


@dataclass(frozen=True, slots=True)
class Call:
    """One confined call: the tool, what it may see, and its environment."""

    tool: str
    mount: Mount
    path: str | None  # the winner's path (file tools, shell)
    cwd: str | None = None  # shell's working folder (else the winner's path)
    bound: int | None = None  # `path` pinned by `open_granted`; None binds nothing of it
    memory_mb: int | None = None  # the shell command's rlimits, set by the toolkit
    max_processes: int | None = None
    hidden: tuple[tuple[str, bool], ...] = ()  # (place, is a folder) covered inside the grant
    timeout_s: float = 10.0
    proxy: str | None = None  # the fetch proxy's socket on the host
    ca_file: str | None = None  # an extra CA bundle for http_fetch (tests)
    env: Mapping[str, str] = field(default_factory=dict)


def command(host: Host, call: Call) -> list[str]:
    """The `bwrap` argument vector for `call` (§8.2): fresh namespaces, no capability, system
    folders read-only, and of the host only what the winner names.

    The winner's path is bound from the descriptor `call.bound` (`--bind-fd`), which
    `open_granted` reached without following a symbolic link: binding it by name would let
    bwrap follow a link that a tool swapped in since (a folder replaced by `ln -s / folder`).
    The descriptor is passed to bwrap, which closes it before the tool starts."""
    assert host.bwrap is not None
    granted = call.mount in (Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR)
    grant = call.path if granted and call.path and call.bound is not None else None
    # System folders are bound where they are on the host, so that under a grant of one of
    # their parents (`/` above all) their mount points already exist: bwrap never has to
    # create one inside a bound host folder (a read-only one would fail, a writable one
    # would be changed). The host's own /bin-style links come with a grant of `/`.
    binds: list[tuple[str, list[str]]] = [
        ("/usr", ["--ro-bind", "/usr", "/usr"]),
        (host.python_prefix, ["--ro-bind", host.python_prefix, host.python_prefix]),
        (host.toolkit, ["--ro-bind", host.toolkit, host.toolkit]),
    ]
    binds += [(folder, ["--ro-bind", folder, folder]) for folder in host.folders]
    binds += [
        (link, ["--symlink", target, link])
        for target, link in host.links
        if grant is None or not inside(grant, link)
    ]
    binds += [("/proc", ["--proc", "/proc"]), ("/dev", ["--dev", "/dev"])]
    binds += [("/tmp", ["--tmpfs", "/tmp"])]
    if grant is not None:
        kind = "--ro-bind-fd" if call.mount is Mount.READ_ONLY else "--bind-fd"
        binds.append((grant, [kind, str(call.bound), grant]))
        # What narrower grants deny or label higher is covered: an empty folder, or an empty
        # file. A mount point cannot be renamed or removed from inside, so no sandbox can
        # move what is covered out from under its cover.
        for place, folder in call.hidden:
            cover = ["--tmpfs", place] if folder else ["--ro-bind", "/dev/null", place]
            binds.append((place, cover))
    if call.mount is Mount.PROXY:
        binds.append(("/etc/ssl/certs", ["--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"]))
        if call.proxy:  # connecting needs no write access: read-only, so it cannot be changed
            binds.append((PROXY_INSIDE, ["--ro-bind", call.proxy, PROXY_INSIDE]))
        if call.ca_file:
            binds.append((CA_INSIDE, ["--ro-bind", call.ca_file, CA_INSIDE]))
    # Parents before children, so a narrower mount is never hidden under a wider one; at equal
    # depth the order above holds, so a grant of /tmp itself comes after the private /tmp.
    binds.sort(key=lambda item: 0 if item[0] == "/" else item[0].count("/"))
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
    # The toolkit moves to the working folder itself, so that a missing one is the tool's
    # error ("no such directory"), not bwrap's.
    argv += ["--chdir", "/"]
    argv += [host.python, "-I", "-S", "-c", _bootstrap(host), call.tool]
    return argv


def _bootstrap(host: Host) -> str:
    return BOOTSTRAP.format(where=os.path.dirname(host.toolkit))


class Unconfinable(Exception):
    """The winner's path cannot be bound safely; `str()` is what the model reads."""


_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def open_granted(path: str) -> int | None:
    """An `O_PATH` descriptor of `path`, reached one component at a time without following a
    symbolic link; None when it does not exist (nothing is bound, as `--bind-try` would).

    Unconfinable when a component is a symbolic link: bwrap would bind what it points to,
    which is not what the grant names (and may be what a tool pointed it at). The caller
    closes the descriptor."""
    current = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = ""
    try:
        for part in (part for part in path.split("/") if part):
            walked += "/" + part
            try:
                following = os.open(part, _PATH_FLAGS, dir_fd=current)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as error:
                why = error.strerror or str(error)
                raise Unconfinable(f"the granted path {path} cannot be confined: {why}") from None
            os.close(current)
            current = following
            if stat.S_ISLNK(os.fstat(current).st_mode):
                raise Unconfinable(
                    f"the granted path {path} cannot be confined: {walked} is a symbolic link"
                )
        found, current = current, -1
        return found
    finally:
        if current >= 0:
            os.close(current)


def hidden_places(bound: int, grant: str, hidden: Sequence[str]) -> tuple[tuple[str, bool], ...]:
    """Which of the `hidden` places under `grant` (pinned as `bound`) exist, and whether each
    is a folder; Unconfinable when one is reached through a symbolic link (it could not be
    covered where it really is)."""
    found: list[tuple[str, bool]] = []
    for place in hidden:
        relative = place[len(grant) :].strip("/") if grant != "/" else place.strip("/")
        fd = _walk(bound, relative, place)
        if fd is None:
            continue
        try:
            found.append((place, stat.S_ISDIR(os.fstat(fd).st_mode)))
        finally:
            os.close(fd)
    return tuple(found)


def _walk(start: int, relative: str, place: str) -> int | None:
    """An O_PATH descriptor of `relative` under `start`, never through a link; None if missing."""
    current = os.dup(start)
    try:
        for part in relative.split("/"):
            try:
                following = os.open(part, _PATH_FLAGS, dir_fd=current)
            except (FileNotFoundError, NotADirectoryError):
                return None
            os.close(current)
            current = following
            if stat.S_ISLNK(os.fstat(current).st_mode):
                raise Unconfinable(
                    f"{place}, which another grant covers, cannot be hidden: it is reached "
                    "through a symbolic link"
                )
        found, current = current, -1
        return found
    finally:
        if current >= 0:
            os.close(current)


def unconfined_command(host: Host, call: Call) -> list[str]:
    """`[sandbox] mode = "none"`: the toolkit, run directly. For development only."""
    return [host.python, "-I", "-S", "-c", _bootstrap(host), call.tool]


def environment(call: Call, *, inside: bool) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "BX_TIMEOUT_S": f"{call.timeout_s:g}",
    }
    if call.path and call.mount is Mount.WORKDIR:
        env["BX_ROOT"] = call.path
    if call.memory_mb is not None:
        env["BX_MEMORY_MB"] = str(call.memory_mb)
    if call.max_processes is not None:
        env["BX_MAX_PROCESSES"] = str(call.max_processes)
    if call.mount is Mount.PROXY and call.proxy:
        env["BX_FETCH_PROXY"] = PROXY_INSIDE if inside else call.proxy
        if call.ca_file:
            env["SSL_CERT_FILE"] = CA_INSIDE if inside else call.ca_file
    env.update(call.env)
    return env
