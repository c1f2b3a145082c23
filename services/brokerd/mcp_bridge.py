"""Run inside an MCP server's sandbox (SPEC §18.1 `hosts`): offer the proxy's Unix socket on
loopback as an HTTP proxy (the sandbox has no other network), then run the server and end
with it: `python -I -S mcp_bridge.py SOCKET PORT -- PROGRAM ARG...`.

Standard library only. It reads nothing of the server's standard input or output (the MCP
pipe passes through untouched) and decides nothing: the proxy outside says what is reached.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading


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


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: mcp_bridge.py SOCKET PORT -- PROGRAM ARG...", file=sys.stderr)
        return 2
    path, port, command = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))  # before the server starts: its first connect finds it
    listener.listen(16)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    try:
        return subprocess.call(command)
    except OSError as error:
        print(f"mcp_bridge: cannot start {command[0]}: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
