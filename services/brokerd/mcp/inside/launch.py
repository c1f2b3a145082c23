"""Run by brokerd outside an MCP server's sandbox (SPEC §18.2), to start bwrap with what the
SDK's stdio client cannot hand it, descriptors:
`python -I -S launch.py [--map UID GID] [--seccomp FILE] -- BWRAP ARG...` (its lines still say
`mcp_launch`, its name before issue 25).

`--seccomp`: the sandbox's filter (`core.seccomp`, the toolkit's), given to bwrap's
`--seccomp FD`. `--map` (brokerd is root): so that the server can really become the tool user.

bwrap run by root maps the sandbox's uid to root's, whatever `--uid` says; so this launcher
has bwrap wait once it made the user namespace (`--userns-block-fd`), writes the namespace's
map itself (root, for bwrap to build the sandbox, and the tool user, each to itself: as
`courier._map_user`), lets bwrap go on, and ends with it; `bridge --user` then becomes
the tool user inside. Standard library
only; the MCP pipe (standard input and output) passes through untouched. It dies with
brokerd (PR_SET_PDEATHSIG), and bwrap's `--die-with-parent` takes the server with it.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys

_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*([0-9]{1,10})[^0-9]')
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # brokerd ended before the line above
        os._exit(1)


def _map(pid: int, uid: int, gid: int) -> None:
    maps = (("uid_map", f"0 0 1\n{uid} {uid} 1\n"), ("gid_map", f"0 0 1\n{gid} {gid} 1\n"))
    for name, text in maps:
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _child_pid(info: int) -> int | None:
    data = b""
    while len(data) < 4096:
        found = _CHILD_PID.search(data)
        if found is not None:
            return int(found.group(1))
        chunk = os.read(info, 4096)
        if not chunk:
            return None
        data += chunk
    return None


def parse(argv: list[str]) -> tuple[tuple[int, int] | None, str | None, list[str]]:
    user: tuple[int, int] | None = None
    seccomp: str | None = None
    rest = list(argv)
    while rest and rest[0] != "--":
        if rest[0] == "--map" and len(rest) > 2:
            user, rest = (int(rest[1]), int(rest[2])), rest[3:]
        elif rest[0] == "--seccomp" and len(rest) > 1:
            seccomp, rest = rest[1], rest[2:]
        else:
            raise ValueError(f"unknown option {rest[0]!r}")
    if len(rest) < 2:
        raise ValueError("usage: mcp_launch.py [--map UID GID] [--seccomp FILE] -- BWRAP ARG...")
    return user, seccomp, rest[1:]


def main(argv: list[str]) -> int:
    _die_with_parent(os.getppid())
    try:
        user, seccomp, bwrap = parse(argv)
    except ValueError as error:
        print(f"mcp_launch: {error}", file=sys.stderr)
        return 2
    given: list[str] = []
    fds: list[int] = []
    if seccomp is not None:
        filter_fd = os.open(seccomp, os.O_RDONLY)
        given += ["--seccomp", str(filter_fd)]
        fds.append(filter_fd)
    block_write = info_read = -1
    if user is not None:
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        given += ["--info-fd", str(info_write), "--userns-block-fd", str(block_read)]
        fds += [info_write, block_read]
    process = subprocess.Popen([bwrap[0], *given, *bwrap[1:]], pass_fds=fds)
    for fd in fds:
        os.close(fd)
    for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(each, lambda number, _: process.send_signal(number))
    if user is not None:
        pid = _child_pid(info_read)
        if pid is not None:
            try:
                _map(pid, *user)
                os.write(block_write, b"1")
            except OSError as error:
                print(f"mcp_launch: cannot map the tool user: {error}", file=sys.stderr)
                process.kill()
        os.close(block_write)
    code = process.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
