"""The Python floor of `decision` (issue 11): the simplest correct program doing brokerd's work
for a denied call, run as a process of its own with this environment's interpreter.

Why it is the floor: the bare floors (a ZeroMQ echo, an append+fsync) are I/O, while most of
what a decision costs is Python, and the two do not move together from one machine to the next.
This program pays the same Python costs brokerd cannot avoid — an asyncio loop, a zmq.asyncio
ROUTER, the project's strict codec both ways, one JSON line appended and fsynced before the
answer, requests that are ready together sharing one write and one fsync (group commit) — and
nothing else: no grants, no policy, no labels, no hash chain, no index. What brokerd spends
beyond it is what brokerd's own code costs, a ratio that travels between machines.

It serves well-formed `tool_request`s only (the benchmark's); anything else stops it, and the
benchmark then fails loudly. Run as `python -m bench.python_floor ENDPOINT FILE`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import zmq
import zmq.asyncio

from bxcore import wire
from bxcore.deny import DenyReason
from bxcore.messages import Denied, ToolRequest, ToolResponse

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def python_floor(folder: Path) -> Iterator[str]:
    """The floor's server started in its own process, bound on ipc in `folder`: its endpoint."""
    endpoint = f"ipc://{folder}/python-floor.sock"
    file = folder / "python-floor.jsonl"
    argv = [sys.executable, "-m", "bench.python_floor", endpoint, str(file)]
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield endpoint
    finally:
        server.kill()
        server.wait()


def _line(request: ToolRequest) -> bytes:
    """The record of one denied call: what brokerd's decision record says of the request."""
    record = {
        "kind": "decision",
        "session": request.session,
        "call": request.call,
        "tool": request.tool,
        "arguments": request.arguments,
        "outcome": "denied",
        "reason": DenyReason.NO_GRANT.value,
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


async def serve(endpoint: str, path: Path) -> None:
    """Answer every request with a denial once its line is durable, until killed."""
    router = zmq.asyncio.Context().socket(zmq.ROUTER)
    router.bind(endpoint)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    print("ready", flush=True)
    while True:
        batch = [await router.recv_multipart()]
        with contextlib.suppress(zmq.Again):  # group commit: every request already waiting
            while True:
                batch.append(await router.recv_multipart(zmq.NOBLOCK))
        requests = [(peer, wire.decode(frame)) for peer, frame in batch]
        assert all(isinstance(request, ToolRequest) for _, request in requests)
        lines = b"".join(_line(request) for _, request in requests)
        if os.write(fd, lines) != len(lines):
            raise OSError("a short write to the floor's file")
        os.fsync(fd)  # nothing is answered before its line is durable
        for peer, request in requests:
            answer = ToolResponse(request.id, Denied(DenyReason.NO_GRANT))
            await router.send_multipart([peer, wire.encode(answer)])


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], Path(sys.argv[2])))
