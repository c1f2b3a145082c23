"""Helpers for brokerd's service tests: raw frames on its sockets, its events, its ledger.

Everything here talks to a real brokerd over its real sockets; nothing replaces a component.

    with RawClient(home, "broker") as raw:
        raw.send(b"garbage")
        assert raw.recv(0.3) is None
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zmq

from bxcore import curve
from bxcore.client import dealer
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import LedgerHead, ToolRequest
from tests.support.daemons import CURVE_SERVER, Daemon

SEND_TIMEOUT_MS = 5_000
PYTHON = os.path.realpath(sys.executable)  # the interpreter the sandbox binds for the toolkit


def check_memory_limit(shell: Callable[[str], str]) -> None:
    """`shell` (a command's output, run in a sandbox of a brokerd whose `[sandbox] memory_mb`
    is 256): a Python asking for 512 MiB is stopped, one asking for 32 MiB ends well."""
    hog = f"{PYTHON} -I -S -c 'bytearray(512 * 1024 * 1024)'"
    small = f"{PYTHON} -I -S -c 'bytearray(32 * 1024 * 1024)'"
    assert "MemoryError" in shell(hog)
    assert shell(small) == "[exit status 0]"


@contextlib.contextmanager
def short_folder() -> Iterator[Path]:
    """`short_tmp` for a fixture of wider scope: a short private folder, removed after."""
    path = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def args(**fields: Any) -> str:
    """Tool arguments as a model would write them (compact JSON)."""
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def write_grant(home: Path, grant_id: str, **fields: Any) -> Path:
    """`{home}/grants/<grant_id>.toml` with `fields` (`class_` for `class`)."""
    lines = []
    for key, value in fields.items():
        name = "class" if key == "class_" else key
        lines.append(f"{name} = {json.dumps(value)}")
    path = home / "grants" / f"{grant_id}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def call(
    daemon: Daemon, session: str, call_id: str, tool: str, arguments: str, *, rid: str = "r1"
) -> Any:
    """One tool call on the broker socket; its outcome."""
    answer = daemon.ask(ToolRequest(rid, session, call_id, tool, arguments), timeout=20.0)
    assert answer.id == rid, answer
    return answer.outcome


def call_raw(
    home: Path, session: str, call_id: str, tool: str, arguments: str, *, rid: str = "r1"
) -> bytes:
    """One tool call on the broker socket; the exact bytes of its answer."""
    with RawClient(home, "broker") as raw:
        return raw.ask(wire.encode(ToolRequest(rid, session, call_id, tool, arguments)), 20.0)


def denial(reason: str, *, rid: str = "r1") -> bytes:
    """The exact `tool_response` of a denial without a detail."""
    return (
        f'{{"type":"tool_response","id":"{rid}","outcome":"denied","reason":"{reason}"}}'
    ).encode()


# --- raw frames --------------------------------------------------------------------------------


class RawClient:
    """A DEALER on one of brokerd's sockets that sends and receives raw frames. On a CURVE
    socket it is the owner unless `keys` names another pair (or `keys=False`: no CURVE)."""

    def __init__(
        self, home: Path, socket: str, *, keys: curve.KeyPair | bool | None = None
    ) -> None:
        paths = Home(home)
        secure = None
        if socket in CURVE_SERVER and keys is not False:
            pair = keys if isinstance(keys, curve.KeyPair) else curve.load_pair(paths.keys, "owner")
            server = curve.load_public(paths.keys, CURVE_SERVER[socket])
            secure = functools.partial(curve.connect_curve, own=pair, server_public=server)
        # As every boxmaker client: a frame over 4 MiB is refused (and drops the connection).
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.socket = dealer(ctx, paths.endpoint(socket), secure)
        # A DEALER's send waits while it has no peer (a CURVE handshake refused drops it):
        # a test is told so (zmq.Again) instead of waiting for ever.
        self.socket.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.socket.close(linger=0)

    def send(self, frames: bytes | list[bytes]) -> None:
        if isinstance(frames, bytes):
            self.socket.send(frames)
        else:
            self.socket.send_multipart(frames)

    def recv(self, timeout: float = 10.0) -> bytes | None:
        """The next frame, or None when none comes in `timeout` seconds."""
        if not self.socket.poll(int(timeout * 1000)):
            return None
        return bytes(self.socket.recv())

    def ask(self, frame: bytes, timeout: float = 10.0) -> bytes:
        self.send(frame)
        answer = self.recv(timeout)
        assert answer is not None, f"no answer to {frame[:200]!r}"
        return answer


# --- broker-events -----------------------------------------------------------------------------


class Events:
    """A SUB socket on broker-events, connected before the calls a test watches."""

    def __init__(self, home: Path) -> None:
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(Home(home).endpoint("broker-events"))
        self.seen: list[Any] = []

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *_: object) -> None:
        self.socket.close(linger=0)

    def next(self, timeout: float = 10.0) -> Any | None:
        if not self.socket.poll(int(timeout * 1000)):
            return None
        event = wire.decode(self.socket.recv())
        self.seen.append(event)
        return event

    def wait_for(self, wanted: Callable[[Any], bool], timeout: float = 10.0) -> Any:
        """The first event (from now) that `wanted` accepts."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            event = self.next(left)
            if event is not None and wanted(event):
                return event
        raise TimeoutError(f"no such event in {timeout} s; saw {self.seen!r}")

    def drain(self) -> list[Any]:
        """Whatever has arrived and not been read."""
        got = []
        while (event := self.next(0.05)) is not None:
            got.append(event)
        return got

    def join(self, daemon: Daemon, session: str = "events-sync") -> None:
        """Wait until the subscription is live: make brokerd commit (an audited denial of a
        call to no tool, in a session of its own) until its ledger head arrives."""
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            call(daemon, session, f"sync-{time.monotonic_ns()}", "no_such_tool", "{}")
            with contextlib.suppress(TimeoutError):
                self.wait_for(lambda e: isinstance(e, LedgerHead), timeout=0.2)
                self.drain()
                return
        raise TimeoutError("broker-events never delivered a ledger head")


# --- the ledger --------------------------------------------------------------------------------


def ledger_lines(home: Path) -> list[bytes]:
    return (home / "audit" / "ledger.jsonl").read_bytes().splitlines()


def ledger_records(home: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger_lines(home)]


def records_of(home: Path, session: str, call_id: str | None = None) -> list[dict[str, Any]]:
    """The ledger's records naming `session` (and `call_id`, when given)."""
    return [
        r
        for r in ledger_records(home)
        if r.get("session") == session and (call_id is None or r.get("call") == call_id)
    ]


def state_file(home: Path, session: str) -> Path:
    return home / "state" / "broker" / f"{session}.json"
