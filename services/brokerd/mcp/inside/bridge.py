"""Run first inside an MCP server's sandbox (SPEC §18.1, §18.2), then the server:
`python -I -S bridge.py [--user UID:GID] [--proxy SOCKET PORT] -- PROGRAM ARG...`.

- `--user` (brokerd is root; `launch` mapped root and the tool user): forbid new user
  namespaces in this one (what `bwrap --disable-userns` does), drop every supplementary group
  and become the tool user, which clears every capability. The server never runs as root.
- `--proxy` (the entry has `hosts`): offer the proxy's Unix socket on the sandbox's loopback
  as an HTTP proxy (HTTPS_PROXY), the only network there is.

Standard library only. It reads nothing of the server's standard input or output (the MCP
pipe passes through untouched) and decides nothing: the proxy outside says what is reached.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading


class BridgeError(Exception):
    pass


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()


def become(uid: int, gid: int) -> None:
    """As `toolkit.confine`: no new user namespace, no group, the tool user; BridgeError."""
    if uid == 0 or gid == 0:
        raise BridgeError("the tool user may not be root")
    try:
        fd = os.open("/proc/sys/user/max_user_namespaces", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as error:
        raise BridgeError(f"cannot become the tool user: {error.strerror or error}") from None
    if os.getresuid() != (uid, uid, uid) or os.getgroups():
        raise BridgeError("cannot become the tool user")


def parse(argv: list[str]) -> tuple[tuple[int, int] | None, tuple[str, int] | None, list[str]]:
    user: tuple[int, int] | None = None
    proxy: tuple[str, int] | None = None
    rest = list(argv)
    while rest and rest[0] != "--":
        if rest[0] == "--user" and len(rest) > 1:
            uid, gid = rest[1].split(":")
            user, rest = (int(uid), int(gid)), rest[2:]
        elif rest[0] == "--proxy" and len(rest) > 2:
            proxy, rest = (rest[1], int(rest[2])), rest[3:]
        else:
            raise BridgeError(f"unknown option {rest[0]!r}")
    if len(rest) < 2:
        raise BridgeError("usage: mcp_bridge.py [--user U:G] [--proxy SOCKET PORT] -- PROGRAM")
    return user, proxy, rest[1:]


def main(argv: list[str]) -> int:
    try:
        user, proxy, command = parse(argv)
        if user is not None:
            become(*user)
    except (BridgeError, ValueError) as error:
        print(f"mcp_bridge: {error}", file=sys.stderr)
        return 2
    if proxy is None:
        try:
            os.execv(command[0], command)
        except OSError as error:
            print(f"mcp_bridge: cannot start {command[0]}: {error}", file=sys.stderr)
            return 127
    assert proxy is not None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", proxy[1]))  # before the server starts: its first connect finds it
    listener.listen(16)
    threading.Thread(target=_serve, args=(listener, proxy[0]), daemon=True).start()
    try:
        return subprocess.call(command)
    except OSError as error:
        print(f"mcp_bridge: cannot start {command[0]}: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
