"""The Python floor of `decision` (issue 11): the simplest correct program doing brokerd's work
for a denied call, run as a process of its own with this environment's interpreter.

Why it is the floor: the bare floors (a ZeroMQ echo, an append+fsync) are I/O, while most of
what a decision costs is Python, and the two do not move together from one machine to the next.
This program pays the same Python costs brokerd cannot avoid — an asyncio loop, a zmq.asyncio
ROUTER, the project's strict codec both ways, one JSON line appended and fsynced before the
answer, requests that are ready together sharing one write and one fsync (group commit) — and
nothing else: no grants, no policy, no labels, no hash chain, no index. What brokerd spends
beyond it is what brokerd's own code costs, a ratio that travels between machines.

With `--chained` it is the same program plus what the ledger's rules ask of every decision
(SPEC §7, I8) done the cheapest correct way — the call looked up in a SQLite index of
(session, call) before it is decided (a call is decided once), each line carrying its `seq`,
the batch's `at` and the SHA-256 of the line before it (the hash chain), and the batch's rows
inserted into the index once its answers are out. It still decides nothing: no grants, no
label, no record checks. Its share of the Python floor's rate is what the ledger's rules alone
leave of it on the machine at hand, against which brokerd's share shows what deciding costs
(issue 11). It is no strict bound: on a cheaper transport than `zmq.asyncio` (brokerd's plain
socket) the same work ran as fast as the Python floor (docs/performance.md).

It serves well-formed `tool_request`s only (the benchmark's); anything else stops it, and the
benchmark then fails loudly. Run as `python -m bench.python_floor ENDPOINT FILE [--chained]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from bxcore.clock import now_ms, rfc3339
from bxcore.deny import DenyReason
from bxcore.wire import codec as wire
from bxcore.wire.messages import Denied, ToolRequest, ToolResponse

ROOT = Path(__file__).resolve().parents[1]


CHAINED = "--chained"


@contextlib.contextmanager
def python_floor(folder: Path, *, chained: bool = False) -> Iterator[str]:
    """The floor's server started in its own process, bound on ipc in `folder`: its endpoint."""
    name = "chained-floor" if chained else "python-floor"
    endpoint = f"ipc://{folder}/{name}.sock"
    file = folder / f"{name}.jsonl"
    argv = [sys.executable, "-m", "bench.python_floor", endpoint, str(file)]
    argv += [CHAINED] if chained else []
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield endpoint
    finally:
        server.kill()
        server.wait()


def _line(request: ToolRequest, header: dict[str, Any] | None = None) -> bytes:
    """The record of one denied call: what brokerd's decision record says of the request,
    after `header` (the chained floor's seq, at and prev)."""
    record = {
        **(header or {}),
        "kind": "decision",
        "session": request.session,
        "call": request.call,
        "tool": request.tool,
        "arguments": request.arguments,
        "outcome": "denied",
        "reason": DenyReason.NO_GRANT.value,
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


class Chain:
    """The chained floor's ledger rules: the index of calls, and the hash chain's head."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # as brokerd's index: derived data
        self.db.execute("CREATE TABLE calls (session, call, PRIMARY KEY (session, call))")
        self.db.execute("BEGIN")  # left open, never committed: the cheapest way there is
        self.seq, self.prev = 0, "0" * 64

    def decided(self, request: ToolRequest) -> bool:
        query = "SELECT 1 FROM calls WHERE session = ? AND call = ?"
        return self.db.execute(query, (request.session, request.call)).fetchone() is not None

    def lines(self, requests: list[ToolRequest]) -> bytes:
        at = rfc3339(now_ms())
        lines = []
        for request in requests:
            self.seq += 1
            line = _line(request, {"seq": self.seq, "at": at, "prev": self.prev})
            self.prev = hashlib.sha256(line[:-1]).hexdigest()
            lines.append(line)
        return b"".join(lines)

    def index(self, requests: list[ToolRequest]) -> None:
        rows = [(request.session, request.call) for request in requests]
        self.db.executemany("INSERT INTO calls VALUES (?, ?)", rows)


async def serve(endpoint: str, path: Path, chained: bool) -> None:
    """Answer every request with a denial once its line is durable, until killed."""
    router = zmq.asyncio.Context().socket(zmq.ROUTER)
    router.bind(endpoint)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    chain = Chain(path.with_suffix(".sqlite3")) if chained else None
    print("ready", flush=True)
    while True:
        batch = [await router.recv_multipart()]
        with contextlib.suppress(zmq.Again):  # group commit: every request already waiting
            while True:
                batch.append(await router.recv_multipart(zmq.NOBLOCK))
        requests = [(peer, wire.decode(frame)) for peer, frame in batch]
        assert all(isinstance(request, ToolRequest) for _, request in requests)
        calls = [request for _, request in requests]
        if chain is None:
            lines = b"".join(_line(call) for call in calls)
        else:
            if any(chain.decided(call) for call in calls):
                raise ValueError("a call the benchmark sent twice")
            lines = chain.lines(calls)
        if os.write(fd, lines) != len(lines):
            raise OSError("a short write to the floor's file")
        os.fsync(fd)  # nothing is answered before its line is durable
        for peer, request in requests:
            answer = ToolResponse(request.id, Denied(DenyReason.NO_GRANT))
            await router.send_multipart([peer, wire.encode(answer)])
        if chain is not None:
            chain.index(calls)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], Path(sys.argv[2]), sys.argv[3:] == [CHAINED]))
