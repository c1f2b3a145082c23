"""`decision` and `toolcall` (SPEC §17): brokerd measured against the machine's floor.

decision: a denied call's round trip, fsync included, and durable decisions per second with 16
concurrent clients, each against two floors measured in the same run: the bare floors (a bare
ZeroMQ round trip plus a bare append+fsync, I/O only) and the Python floor (the simplest Python
program doing the same work, `bench.python_floor`), driven by the same client code as brokerd;
and, for the rate, the chained floor (the same program keeping the ledger's hash chain and
index of calls, as brokerd must): what the ledger's rules alone leave of the floor's rate.
toolcall: an allowed read_file end to end, against bare bwrap plus bare `python -I -S`, and
an allowed shell running `cat FILE` on the same file, against read_file (issue 15).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import zmq

from bench import floors, peers
from bench.box import connect, daemon, dealer, fresh_home, remove
from bench.python_floor import python_floor
from bench.stats import alternated, interleaved, save, show, summary, verdict
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import Denied, Done, ToolRequest, ToolResponse

_ids = itertools.count()

CLIENTS = 16


def _call(tool: str, arguments: dict[str, Any], session: str = "bench") -> ToolRequest:
    n = next(_ids)
    return ToolRequest(f"r{n}", session, f"c{n}", tool, json.dumps(arguments))


def _denied_calls(n: int) -> list[ToolRequest]:
    return [_call("read_file", {"path": "/etc/hostname"}) for _ in range(n)]


def decision(repeat: int = 2000, seconds: float = 3.0, warmup: int = 100) -> None:
    print(f"decision: a denied call's round trip, and decisions/s with {CLIENTS} clients")
    folder = floors.scratch()
    try:
        home = fresh_home(folder)
        with (
            daemon("brokerd", home, "broker"),
            python_floor(folder) as floor_endpoint,
            python_floor(folder, chained=True) as chained_endpoint,
            floors.zmq_round_trip(folder) as zmq_once,
            floors.append_fsync(folder) as fsync_once,
        ):
            brokerd_endpoint = home.endpoint("broker")
            ours_dealer, python_dealer = dealer(brokerd_endpoint), dealer(floor_endpoint)
            denied, answers = _caller(ours_dealer, _denied_calls(repeat + warmup))
            python_once, python_answers = _caller(python_dealer, _denied_calls(repeat + warmup))
            samples = interleaved(
                {"zmq": zmq_once, "fsync": fsync_once, "python": python_once, "ours": denied},
                repeat,
                warmup,
            )
            ours_dealer.close(linger=0)
            python_dealer.close(linger=0)
            for answer in _decoded(answers + python_answers):
                assert isinstance(answer.outcome, Denied), answer
            with (
                Clients(brokerd_endpoint, CLIENTS) as ours_load,
                Clients(floor_endpoint, CLIENTS) as python_load,
                Clients(chained_endpoint, CLIENTS) as chained_load,
            ):
                runs = {
                    "ours": ours_load.run,
                    "python": python_load.run,
                    "chained": chained_load.run,
                }
                rates = alternated(runs, seconds)
        zmq_rt, fsync, python_rt, ours = (
            summary(samples[k]) for k in ("zmq", "fsync", "python", "ours")
        )
    finally:
        remove(folder)
    show("bare ZeroMQ round trip (zmq.asyncio, ipc)", zmq_rt)
    show("bare append + fsync", fsync)
    show("Python floor denied round trip", python_rt)
    show("brokerd denied round trip", ours)
    rate, python_rate, chained_rate = rates["ours"], rates["python"], rates["chained"]
    print(f"  {CLIENTS} clients, durable decisions/s: Python floor {python_rate:,.0f}")
    print(
        f"  {CLIENTS} clients, durable decisions/s: chained floor {chained_rate:,.0f}"
        f" ({chained_rate / python_rate:.2f} of the Python floor's: the ledger's rules alone)"
    )
    print(f"  {CLIENTS} clients, durable decisions/s: brokerd {rate:,.0f}")
    ratio = ours["median_ms"] / (zmq_rt["median_ms"] + fsync["median_ms"])
    ratio_python = ours["median_ms"] / python_rt["median_ms"]
    share = rate / python_rate
    save(
        "decision",
        {
            "zmq_round_trip": zmq_rt,
            "append_fsync": fsync,
            "python_floor_round_trip": python_rt,
            "denied_round_trip": ours,
            "python_floor_decisions_per_s_16_clients": round(python_rate, 1),
            "chained_floor_decisions_per_s_16_clients": round(chained_rate, 1),
            "chained_floor_share_of_python_floor": round(chained_rate / python_rate, 4),
            "ratio": verdict("denied round trip / bare floors", ratio, "<= 1.5", ratio <= 1.5),
            "ratio_python_floor": verdict(
                "denied round trip / Python floor", ratio_python, "<= 1.3", ratio_python <= 1.3
            ),
            "decisions_per_s_16_clients": verdict(
                "decisions/s, 16 clients", rate, ">= 8000", rate >= 8000
            ),
            "decisions_per_s_16_clients_python_floor": verdict(
                "decisions/s, 16 clients / Python floor's", share, ">= 0.8", share >= 0.8
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


def concurrent(home: Home, clients: int, seconds: float) -> float:
    """brokerd's durable decisions per second, `clients` sockets each with one call in flight."""
    with Clients(home.endpoint("broker"), clients) as load:
        answered, elapsed = load.run(seconds)
    return answered / elapsed


class Clients:
    """`n` sockets at one endpoint (brokerd's or the Python floor's), each keeping one denied
    call in flight while `run` lasts.

    The client does as little as it can (requests made by formatting bytes, answers checked
    by a substring), so that on a small machine it leaves the CPU to the server. Every request
    has ids of its own, across runs too: brokerd answers a call it has already decided from
    its record, which would not be a decision."""

    def __init__(self, endpoint: str, n: int) -> None:
        template = wire.encode(_call("read_file", {"path": "/etc/hostname"}))
        template = template.replace(b'"id":"', b'"id":"%d', 1)
        self._template = template.replace(b'"call":"', b'"call":"%d', 1)
        self._counter = itertools.count()
        self.sent = 0
        self._sockets = [dealer(endpoint) for _ in range(n)]
        self._poller = zmq.Poller()
        for socket in self._sockets:
            self._poller.register(socket, zmq.POLLIN)

    def __repr__(self) -> str:
        return f"Clients({len(self._sockets)} sockets, {self.sent} requests sent)"

    def __enter__(self) -> Clients:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for socket in self._sockets:
            socket.close(linger=0)

    def _send(self, socket: zmq.Socket[bytes]) -> None:
        n = next(self._counter)
        socket.send(self._template % (n, n))
        self.sent += 1

    def run(self, seconds: float) -> tuple[int, float]:
        """Answers received in about `seconds`, and the seconds they took. The calls still in
        flight at the end are then waited for, uncounted, so that none is left to weigh on
        whatever runs next."""
        for socket in self._sockets:
            self._send(socket)
        answered = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            for socket, _ in self._poller.poll(5000):
                reply = socket.recv()
                assert b'"outcome":"denied"' in reply, reply
                answered += 1
                self._send(socket)
        elapsed = time.perf_counter() - started
        for socket in self._sockets:
            if not socket.poll(30_000):
                raise TimeoutError("a call in flight was not answered in 30 s")
            assert b'"outcome":"denied"' in socket.recv()
        return answered, elapsed


NOTE = "a line of the note: 32 bytes\n" * 128  # 4 KiB, as in issue 15's table


def toolcall(repeat: int = 200, warmup: int = 10, *, with_peers: bool = False) -> None:
    """`with_peers`: the other sandboxes too, in the same rounds (`bench.peers`)."""
    print("toolcall: an allowed read_file and an allowed shell `cat FILE`, end to end")
    folder = floors.scratch()
    try:
        home = fresh_home(folder)
        target = home.workspace / "note.md"
        target.write_text(NOTE)
        allow_shell(home)
        copy = folder / "peers" / "note.md"  # the same bytes where any sandbox may read them
        copy.parent.mkdir(mode=0o755)
        copy.write_text(NOTE)
        with (
            daemon("brokerd", home, "broker"),
            peers.started(copy, folder) if with_peers else contextlib.nullcontext([]) as others,
        ):
            read_dealer, shell_dealer = connect(home, "broker"), connect(home, "broker")
            n = repeat + warmup
            reads = [_call("read_file", {"path": str(target)}) for _ in range(n)]
            cats = [
                _call("shell", {"command": "cat note.md", "cwd": str(home.workspace)})
                for _ in range(n)
            ]
            read, read_answers = _caller(read_dealer, reads)
            cat, cat_answers = _caller(shell_dealer, cats)
            actions = {"bwrap": floors.bwrap_true, "python": floors.python_bare}
            actions |= {"ours": read, "cat": cat} | {peer.name: peer.once for peer in others}
            samples = interleaved(actions, repeat, warmup)
            read_dealer.close(linger=0)
            shell_dealer.close(linger=0)
            _expect(read_answers, NOTE)
            _expect(cat_answers, NOTE + "[exit status 0]")
    finally:
        remove(folder)
    bwrap, python, ours, shell = (summary(samples[k]) for k in ("bwrap", "python", "ours", "cat"))
    show("bare bwrap … /bin/true", bwrap)
    show("bare python -I -S -c pass", python)
    show("brokerd allowed read_file", ours)
    show("brokerd allowed shell `cat FILE`", shell)
    ratio = ours["median_ms"] / (bwrap["median_ms"] + python["median_ms"])
    over = shell["median_ms"] - ours["median_ms"]
    spread = shell["p90_ms"] / shell["median_ms"]
    figures = {
        "bwrap_true": bwrap,
        "python_bare": python,
        "read_file": ours,
        "shell_cat": shell,
        "ratio": verdict("read_file / floor", ratio, "<= 1.3", ratio <= 1.3),
        "shell_over_read_file": verdict(
            "shell cat - read_file, median ms", over, "<= 3", over <= 3
        ),
        "shell_spread": verdict("shell cat p90 / median", spread, "<= 1.3", spread <= 1.3),
    }
    if others:
        figures["peers"] = _peers_table(others, samples, ours, shell)
    save("toolcall", figures)


def _peers_table(
    others: list[peers.Peer],
    samples: dict[str, list[float]],
    read: dict[str, float],
    shell: dict[str, float],
) -> dict[str, dict[str, Any]]:
    """Issue 15's table: each way of reading the file, × the bare bwrap `cat` floor."""
    rows = [(p.name, summary(samples[p.name]), p.sees, p.decides) for p in others]
    rows += [
        ("boxmaker allowed read_file, end to end", read, "its grant's path, read-only", True),
        ("boxmaker allowed shell `cat FILE`, end to end", shell, "its grant's folder", True),
    ]
    floor = rows[0][1]["median_ms"]
    print(f"  {'what':<46} {'median':>8} {'p90':>8} {'x floor':>8}  decides, audits  sees")
    table: dict[str, dict[str, Any]] = {}
    for name, figure, sees, decides in rows:
        times = figure["median_ms"] / floor
        yes = "yes" if decides else "no"
        print(
            f"  {name:<46} {figure['median_ms']:8.1f} {figure['p90_ms']:8.1f} "
            f"{times:8.1f}  {yes:<15}  {sees}"
        )
        table[name] = {**figure, "times_floor": round(times, 2), "decides": decides, "sees": sees}
    return table


SHELL_GRANT = """\
# bench: shell allowed in the workspace (the starter grant asks)
tool = "shell"
mode = "allow"
path = {path}
"""


def allow_shell(home: Home) -> None:
    """Shell allowed in the workspace, in place of the starter grant that asks."""
    for grant in home.grants.glob("*.toml"):
        if 'tool = "shell"' in grant.read_text():
            grant.unlink()
    home.grant("bench-shell").write_text(SHELL_GRANT.format(path=json.dumps(str(home.workspace))))


def _expect(answers: list[bytes], output: str) -> None:
    for answer in _decoded(answers):
        assert isinstance(answer.outcome, Done), answer
        assert answer.outcome.output == output, answer
