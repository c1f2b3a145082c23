"""The sandbox of an MCP server (SPEC §18.2): the `bwrap` command that runs one `[[mcp]]`
entry with the §8.2 profile — fresh namespaces, no network, no capability, the system folders
read-only — plus exactly the entry's `paths` (read-write) and `ro_paths` (read-only), and the
installation the server's program lives in (read-only). With `hosts`, its proxy's socket and
`inside/bridge.py` too, which offers that socket on the sandbox's loopback as HTTPS_PROXY.

Pure: `command` builds the argument vector from the entry, the host and the program's place,
found by the shell (`program_root`). The server's standard input and output are the MCP pipe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bxcore.config.mcp import McpServer
from services.brokerd.core.bwrap import MIB, Host, mounts

HOME_INSIDE = "/tmp"
PATH_INSIDE = "/usr/local/bin:/usr/bin:/bin"
TMP_MB = 256
BX_INSIDE = "/run/bx"
PROXY_INSIDE = f"{BX_INSIDE}/proxy.sock"
BRIDGE_INSIDE = f"{BX_INSIDE}/mcp_bridge.py"
BRIDGE_PORT = 3128  # on the sandbox's own loopback: no other process shares it
BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inside", "bridge.py")
LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inside", "launch.py")
#: A root brokerd's server starts as root in its namespace with these only, long enough for
#: `mcp_bridge --user` to seal user namespaces and become the tool user (no capability left).
BECOME_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_RESOURCE")


def environment(
    server: McpServer, program_dir: str | None, *, proxied: bool = False
) -> dict[str, str]:
    """Exactly the entry's `env`, plus PATH, HOME and LANG (§18.1), and the proxy's address
    when it has `hosts`. The program's own folder comes first on PATH, so that a console
    script finds its siblings."""
    path = PATH_INSIDE if program_dir is None else f"{program_dir}:{PATH_INSIDE}"
    env = {**dict(server.env), "PATH": path, "HOME": HOME_INSIDE, "LANG": "C.UTF-8"}
    if proxied:
        proxy = f"http://127.0.0.1:{BRIDGE_PORT}"
        env.update(HTTPS_PROXY=proxy, https_proxy=proxy)
    return env


def command(
    host: Host,
    server: McpServer,
    program: str,
    installation: str | None,
    seccomp_fd: int = -1,
    proxy: str | None = None,
) -> list[str]:
    """bwrap, then the server's argv with `program` (its resolved argv[0]) first.
    `installation`: a folder bound read-only because the program lives there (a virtual
    environment), or None. `proxy`: the socket of its `HostsProxy` (it has `hosts`): bound
    read-only with the bridge, which then runs the server."""
    assert host.bwrap is not None
    binds: list[tuple[str, list[str]]] = [("/usr", ["--ro-bind", "/usr", "/usr"])]
    binds += [(folder, ["--ro-bind", folder, folder]) for folder in host.folders]
    binds += [(link, ["--symlink", target, link]) for target, link in host.links]
    binds += [(host.python_prefix, ["--ro-bind", host.python_prefix, host.python_prefix])]
    if installation is not None:
        binds.append((installation, ["--ro-bind", installation, installation]))
    binds += [("/proc", ["--proc", "/proc"]), ("/dev", ["--dev", "/dev"])]
    tmp = ["--perms", "1777", "--size", str(TMP_MB * MIB), "--tmpfs"]
    binds += [("/tmp", [*tmp, "/tmp"]), ("/dev/shm", [*tmp, "/dev/shm"])]
    # The owner's paths are named in config.toml, never by the model; bound by name.
    binds += [(path, ["--ro-bind-try", path, path]) for path in server.ro_paths]
    binds += [(path, ["--bind-try", path, path]) for path in server.paths]
    if proxy is not None:
        binds.append(("/etc/ssl/certs", ["--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"]))
        binds.append((PROXY_INSIDE, ["--ro-bind", proxy, PROXY_INSIDE]))
    if proxy is not None or host.drop_to is not None:
        binds.append((BRIDGE_INSIDE, ["--ro-bind", BRIDGE, BRIDGE_INSIDE]))
    binds.sort(key=lambda item: 0 if item[0] == "/" else item[0].count("/"))
    argv = [host.name or host.bwrap, "--unshare-all", "--unshare-user"]
    if host.drop_to is not None:
        # brokerd is root: `inside/launch.py` maps root and the tool user (bwrap alone would map the
        # sandbox to host root, whatever --uid says); the bridge seals user namespaces (what
        # --disable-userns does, which a caller-written map excludes) and becomes that user.
        argv += ["--cap-drop", "ALL", *(f for cap in BECOME_CAPS for f in ("--cap-add", cap))]
    else:
        argv += ["--disable-userns", "--cap-drop", "ALL"]
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    if seccomp_fd >= 0:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += mounts(binds)
    argv += ["--remount-ro", "/"]
    env = environment(server, _folder(program), proxied=proxy is not None)
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    argv += ["--chdir", server.paths[0] if server.paths else HOME_INSIDE]
    argv.append("--")
    bridge: list[str] = []
    if host.drop_to is not None:
        bridge += ["--user", f"{host.drop_to[0]}:{host.drop_to[1]}"]
    if proxy is not None:
        bridge += ["--proxy", PROXY_INSIDE, str(BRIDGE_PORT)]
    if bridge:
        argv += [host.python, "-I", "-S", BRIDGE_INSIDE, *bridge, "--"]
    return [*argv, program, *server.command[1:]]


def launched(host: Host, argv: list[str], seccomp: str | None) -> list[str]:
    """`argv` (bwrap first) started through `inside/launch.py`, which hands bwrap the filter file
    `seccomp` (when there is one) and, when brokerd is root, writes the user namespace's map.
    Unchanged when there is neither."""
    launch = [host.python, "-I", "-S", LAUNCH]
    if host.drop_to is not None:
        launch += ["--map", str(host.drop_to[0]), str(host.drop_to[1])]
    if seccomp is not None:
        launch += ["--seccomp", seccomp]
    return argv if len(launch) == 4 else [*launch, "--", *argv]


def _folder(program: str) -> str | None:
    return os.path.dirname(program) or None


def program_root(program: str) -> str | None:
    """The installation a program belongs to, to be bound read-only: the virtual environment
    (the folder holding `pyvenv.cfg`) above it, or None for a program under /usr."""
    if program.startswith("/usr/"):
        return None
    for folder in Path(program).parents:
        if (folder / "pyvenv.cfg").is_file():
            return str(folder)
        if str(folder) == "/":
            break
    return os.path.dirname(program)


def unconfined(server: McpServer, program: str) -> tuple[list[str], Mapping[str, str]]:
    """`[sandbox] mode = "none"` (development only): the server run as it is."""
    return [program, *server.command[1:]], environment(server, _folder(program))
