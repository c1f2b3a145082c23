"""Run by a root brokerd outside an MCP server's sandbox (SPEC §18.2): start bwrap so that the
server can really become `[sandbox] user`: `python -I -S mcp_launch.py UID GID -- BWRAP ARG...`.

bwrap run by root maps the sandbox's uid to root's, whatever `--uid` says; so this launcher
has bwrap wait once it made the user namespace (`--userns-block-fd`), writes the namespace's
map itself (root, for bwrap to build the sandbox, and the tool user, each to itself: as
`courier._map_user`), lets bwrap go on, and ends with it; `mcp_bridge --user` then becomes
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


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: mcp_launch.py UID GID -- BWRAP ARG...", file=sys.stderr)
        return 2
    _die_with_parent(os.getppid())
    uid, gid, bwrap = int(argv[0]), int(argv[1]), argv[3:]
    info_read, info_write = os.pipe()
    block_read, block_write = os.pipe()
    hold = ["--info-fd", str(info_write), "--userns-block-fd", str(block_read)]
    process = subprocess.Popen([bwrap[0], *hold, *bwrap[1:]], pass_fds=(info_write, block_read))
    os.close(info_write)
    os.close(block_read)
    for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(each, lambda number, _: process.send_signal(number))
    pid = _child_pid(info_read)
    if pid is not None:
        try:
            _map(pid, uid, gid)
            os.write(block_write, b"1")
        except OSError as error:
            print(f"mcp_launch: cannot map the tool user: {error}", file=sys.stderr)
            process.kill()
    os.close(block_write)
    code = process.wait()
    os.close(info_read)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
