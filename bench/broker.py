"""`decision` and `toolcall` (SPEC §17): brokerd measured against the machine's floor.

decision: a denied call's round trip, fsync included, against a bare ZeroMQ round trip plus
a bare append+fsync; and durable decisions per second with 16 concurrent clients.
toolcall: an allowed read_file end to end, against bare bwrap plus bare `python -I -S`.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import zmq

from bench import floors
from bench.box import connect, daemon, fresh_home, remove
from bench.stats import interleaved, save, show, summary, verdict
from bxcore import wire
from bxcore.messages import Denied, Done, ToolRequest, ToolResponse

_ids = itertools.count()


def _call(tool: str, arguments: dict[str, Any], session: str = "bench") -> ToolRequest:
    n = next(_ids)
    return ToolRequest(f"r{n}", session, f"c{n}", tool, json.dumps(arguments))


def decision(repeat: int = 2000, seconds: float = 3.0, warmup: int = 100) -> None:
    print("decision: a denied call's round trip, and decisions/s with 16 clients")
    folder = floors.scratch()
    try:
        home = fresh_home(folder)
        with (
            daemon("brokerd", home, "broker"),
            floors.zmq_round_trip(folder) as zmq_once,
            floors.append_fsync(folder) as fsync_once,
        ):
            dealer = connect(home, "broker")
            calls = [_call("read_file", {"path": "/etc/hostname"}) for _ in range(repeat + warmup)]
            denied, answers = _caller(dealer, calls)
            samples = interleaved(
                {"zmq": zmq_once, "fsync": fsync_once, "ours": denied}, repeat, warmup
            )
            dealer.close(linger=0)
            for answer in _decoded(answers):
                assert isinstance(answer.outcome, Denied), answer
            rate = concurrent(home, clients=16, seconds=seconds)
        zmq_rt, fsync, ours = (summary(samples[k]) for k in ("zmq", "fsync", "ours"))
    finally:
        remove(folder)
    show("bare ZeroMQ round trip (zmq.asyncio, ipc)", zmq_rt)
    show("bare append + fsync", fsync)
    show("brokerd denied round trip", ours)
    floor = zmq_rt["median_ms"] + fsync["median_ms"]
    ratio = ours["median_ms"] / floor
    print(f"  16 clients: {rate:,.0f} durable decisions/s")
    save(
        "decision",
        {
            "zmq_round_trip": zmq_rt,
            "append_fsync": fsync,
            "denied_round_trip": ours,
            "ratio": verdict("denied round trip / floor", ratio, "<= 1.5", ratio <= 1.5),
            "decisions_per_s_16_clients": verdict(
                "decisions/s, 16 clients", rate, ">= 8000", rate >= 8000
            ),
        },
    )


def _caller(
    dealer: zmq.Socket[bytes], calls: list[ToolRequest]
) -> tuple[Callable[[], None], list[bytes]]:
    """The floor's own client: each request encoded before the run, then one send and one
    blocking receive. The answers it collects are decoded (`_decoded`) after the run."""
    dealer.setsockopt(zmq.RCVTIMEO, 30_000)
    frames = iter([wire.encode(call) for call in calls])
    answers: list[bytes] = []

    def call() -> None:
        dealer.send(next(frames))
        answers.append(dealer.recv())

    return call, answers


def _decoded(answers: list[bytes]) -> list[ToolResponse]:
    decoded = [wire.decode(frame) for frame in answers]
    assert all(isinstance(answer, ToolResponse) for answer in decoded)
    return decoded


def concurrent(home: Any, clients: int, seconds: float) -> float:
    """Durable decisions per second, `clients` sockets each with one call in flight.

    The client does as little as it can (requests made by formatting bytes, answers checked
    by a substring), so that on a small machine it leaves the CPU to brokerd."""
    template = wire.encode(_call("read_file", {"path": "/etc/hostname"}))
    template = template.replace(b'"id":"', b'"id":"%d', 1).replace(b'"call":"', b'"call":"%d', 1)
    counter = itertools.count()
    sockets = [connect(home, "broker") for _ in range(clients)]
    poller = zmq.Poller()
    for socket in sockets:
        poller.register(socket, zmq.POLLIN)
        n = next(counter)
        socket.send(template % (n, n))
    answered = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for socket, _ in poller.poll(5000):
            reply = socket.recv()  # type: ignore[union-attr]
            assert b'"outcome":"denied"' in reply, reply
            answered += 1
            n = next(counter)
            socket.send(template % (n, n))  # type: ignore[union-attr]
    elapsed = time.perf_counter() - started
    for socket in sockets:
        socket.close(linger=0)
    return answered / elapsed


def toolcall(repeat: int = 200, warmup: int = 10) -> None:
    print("toolcall: an allowed read_file end to end")
    folder = floors.scratch()
    try:
        home = fresh_home(folder)
        target = home.workspace / "note.md"
        target.write_text("a short note\n")
        with daemon("brokerd", home, "broker"):
            dealer = connect(home, "broker")
            calls = [_call("read_file", {"path": str(target)}) for _ in range(repeat + warmup)]
            read, answers = _caller(dealer, calls)
            samples = interleaved(
                {"bwrap": floors.bwrap_true, "python": floors.python_bare, "ours": read},
                repeat,
                warmup,
            )
            dealer.close(linger=0)
            for answer in _decoded(answers):
                assert isinstance(answer.outcome, Done), answer
                assert answer.outcome.output == "a short note\n", answer
    finally:
        remove(folder)
    bwrap, python, ours = (summary(samples[k]) for k in ("bwrap", "python", "ours"))
    show("bare bwrap … /bin/true", bwrap)
    show("bare python -I -S -c pass", python)
    show("brokerd allowed read_file", ours)
    ratio = ours["median_ms"] / (bwrap["median_ms"] + python["median_ms"])
    save(
        "toolcall",
        {
            "bwrap_true": bwrap,
            "python_bare": python,
            "read_file": ours,
            "ratio": verdict("read_file / floor", ratio, "<= 1.3", ratio <= 1.3),
        },
    )
