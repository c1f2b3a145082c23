"""`histories` (issue 28): what gatewayd and loopd hold while sessions grow big histories, through
the real box (`bxctl up`: all four services) and a zero-latency fake model answering 100 KB of
words a turn, the owner on one connection to the `gateway` socket (CURVE) as the console is,
each turn's events long-polled to its end as `bxctl chat` asks them. Two loads, each on a fresh
box beside its idle RSS (each further connection costs gatewayd ~40 KB: 200 cost 8 MB):

- `long`: 4 sessions side by side, 240 turns each (each history ~50 MB on disk);
- `crowd`: 200 sessions at once, 3 turns each, every turn of a round in flight together.

Targets: gatewayd within 20 MB of idle plus what it is configured to hold (its windows,
`window.MAX_HELD`, and the console's feed, `feed.KEEP_BYTES`); loopd within 50 MB of idle.
After `long`, a session's whole history is read back through gatewayd (older than anything
held: loopd reads it from the file) and its turns counted.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import zmq

from bench import floors
from bench.box import fresh_home, remove
from bench.stats import save, verdict
from bxcore import curve
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import Accepted, Events, EventsQuery, OwnerMessage, TurnEnd, TurnEvent
from services.gatewayd.console.feed import KEEP_BYTES
from services.gatewayd.window import MAX_HELD
from tests.fakes.model_server import Answer, FakeModel, Request

ANSWER_BYTES = 100_000
GATEWAYD_SLACK_MB = 20.0
LOOPD_SLACK_MB = 50.0
CONFIGURED_MB = (MAX_HELD + KEEP_BYTES) / 1e6
_ids = itertools.count()


def _words(request: Request) -> Answer:
    """100 KB of words; a few for a warm-up turn (the code paths, not the windows)."""
    messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
    said = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    size = 200 if str(said).startswith("warm") else ANSWER_BYTES
    return Answer(("All done. " * (size // 10 + 1))[:size])


class Owner:
    """The owner on one connection to the gateway socket, as the console is: owner messages,
    then each turn's events long-polled (`events_query`, as `bxctl chat` asks) until it ends,
    every session's requests in flight at once."""

    def __init__(self, home: Home) -> None:
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        owner = curve.load_pair(home.keys, "owner")
        curve.connect_curve(self._socket, owner, curve.load_public(home.keys, "gatewayd"))
        self._socket.connect(home.endpoint("gateway"))

    def close(self) -> None:
        self._socket.close(linger=0)

    def turns(self, said: dict[str, str], timeout_s: float = 300.0) -> None:
        """A turn of each session (session -> the owner's words), all at once, until each
        has ended."""
        asked: dict[str, str] = {}  # request id -> session
        turn: dict[str, int] = {}
        last: dict[str, int] = {}  # the newest event seen of each session
        for session, text in said.items():
            asked[self._send(OwnerMessage(f"o-{next(_ids)}", session, text))] = session
        deadline = time.monotonic() + timeout_s
        while asked:
            if not self._socket.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                raise TimeoutError(f"{len(asked)} turns did not end in {timeout_s} s")
            answer = wire.decode(self._socket.recv())
            session = asked.pop(answer.id)
            if isinstance(answer, Accepted):
                turn[session], last[session] = answer.turn, answer.seq
            else:
                assert isinstance(answer, Events), answer
                if answer.events:
                    last[session] = answer.events[-1].seq
                if any(_ends(e, turn[session]) for e in answer.events):
                    continue
            query = EventsQuery(f"e-{next(_ids)}", session, last[session], 10_000)
            asked[self._send(query)] = session

    def history(self, session: str) -> list[TurnEvent]:
        """Every event of the session, from the first, page by page."""
        events: list[TurnEvent] = []
        while True:
            after = events[-1].seq if events else 0
            self._send(EventsQuery(f"h-{next(_ids)}", session, after, 0))
            if not self._socket.poll(30_000):
                raise TimeoutError(f"no page of {session}'s history")
            page = wire.decode(self._socket.recv())
            assert isinstance(page, Events), page
            if not page.events:
                return events
            events += page.events

    def _send(self, message: OwnerMessage | EventsQuery) -> str:
        self._socket.send(wire.encode(message))
        return message.id


@contextmanager
def _box(model: FakeModel) -> Iterator[tuple[Home, dict[str, psutil.Process]]]:
    folder = floors.scratch()
    home = fresh_home(folder, f'[model]\nbase_url = "{model.base_url}"\n')
    bxctl = [sys.executable, "-m", "bxctl", "--home", str(home.root)]
    try:
        up = subprocess.run([*bxctl, "up"], capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            raise RuntimeError(f"bxctl up failed: {up.stdout} {up.stderr}")
        yield home, _services(home)
    finally:
        subprocess.run([*bxctl, "down"], capture_output=True, timeout=120)
        remove(folder)


def _services(home: Home) -> dict[str, psutil.Process]:
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        for name in ("gatewayd", "loopd"):
            if str(home.root) in line and f"services.{name}" in line:
                found[name] = process
    return found


def _rss(services: dict[str, psutil.Process]) -> dict[str, float]:
    return {name: p.memory_info().rss / 1e6 for name, p in services.items()}


def _settled(services: dict[str, psutil.Process]) -> dict[str, float]:
    time.sleep(1.0)
    samples = [_rss(services) for _ in range(5)]
    return {name: statistics.median(s[name] for s in samples) for name in services}


def _ends(event: TurnEvent, turn: int) -> bool:
    return event.turn == turn and isinstance(event.event, TurnEnd)


def _load(name: str, sessions: int, turns: int, every: int) -> dict[str, Any]:
    with FakeModel(record=False) as model:
        model.respond_with(_words)
        with _box(model) as (home, services):
            owner = Owner(home)
            for n in range(3):
                owner.turns({"warm-up": f"warm {n}"})
            idle = _settled(services)
            print(f"  idle: gatewayd {idle['gatewayd']:.1f} MB, loopd {idle['loopd']:.1f} MB")
            peak = dict(idle)
            started = time.monotonic()

            def on_round(n: int) -> None:
                now = _rss(services)
                for service in peak:
                    peak[service] = max(peak[service], now[service])
                if n % every == 0 or n == turns:
                    print(
                        f"  after {n:3d} turns of {sessions} sessions: gatewayd "
                        f"{now['gatewayd']:6.1f} MB, loopd {now['loopd']:6.1f} MB "
                        f"({time.monotonic() - started:.0f} s)"
                    )

            names = [f"{name}-{n}" for n in range(sessions)]
            for n in range(1, turns + 1):
                owner.turns({session: f"turn {n}: tell me more" for session in names})
                on_round(n)
            took = time.monotonic() - started
            end = _settled(services)
            for service in peak:
                peak[service] = max(peak[service], end[service])
            on_disk = sum(p.stat().st_size for p in home.sessions.glob(f"{name}-*.jsonl")) / 1e6
            read_back = owner.history(names[0])
            owner.close()
    ends = sum(isinstance(e.event, TurnEnd) for e in read_back)
    print(
        f"  {sessions * turns} turns in {took:.0f} s; histories on disk {on_disk:.0f} MB; "
        f"{names[0]} read back whole: {len(read_back)} events, {ends} turn ends"
    )
    assert ends == turns, f"{names[0]}: {ends} turn ends read back, {turns} taken"
    gatewayd = peak["gatewayd"] - idle["gatewayd"]
    loopd = peak["loopd"] - idle["loopd"]
    allowed = GATEWAYD_SLACK_MB + CONFIGURED_MB
    return {
        "sessions": sessions,
        "turns_each": turns,
        "answer_bytes": ANSWER_BYTES,
        "seconds": round(took, 1),
        "histories_mb": round(on_disk, 1),
        "idle_mb": {k: round(v, 1) for k, v in idle.items()},
        "peak_mb": {k: round(v, 1) for k, v in peak.items()},
        "end_mb": {k: round(v, 1) for k, v in end.items()},
        "gatewayd": verdict(
            f"{name}: gatewayd peak over idle (MB)", gatewayd,
            f"<= {GATEWAYD_SLACK_MB:g} + {CONFIGURED_MB:.1f} configured", gatewayd <= allowed,
        ),
        "loopd": verdict(
            f"{name}: loopd peak over idle (MB)", loopd, f"<= {LOOPD_SLACK_MB:g}",
            loopd <= LOOPD_SLACK_MB,
        ),
    }  # fmt: skip


def histories(long_turns: int = 240, crowd: int = 200, crowd_turns: int = 3) -> None:
    print(
        f"histories: gatewayd's and loopd's RSS with 100 KB answers, through the whole box "
        f"(gatewayd configured to hold {CONFIGURED_MB:.1f} MB)"
    )
    print(f"long: 4 sessions x {long_turns} turns")
    long = _load("long", 4, long_turns, every=40)
    print(f"crowd: {crowd} sessions at once x {crowd_turns} turns")
    many = _load("crowd", crowd, crowd_turns, every=1)
    save("histories", {"long": long, "crowd": many, "configured_mb": round(CONFIGURED_MB, 1)})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.histories", description=__doc__)
    parser.add_argument("--turns", type=int, default=240, help="turns of each long session")
    parser.add_argument("--crowd", type=int, default=200, help="sessions at once")
    parser.add_argument("--crowd-turns", type=int, default=3)
    args = parser.parse_args()
    histories(args.turns, args.crowd, args.crowd_turns)


if __name__ == "__main__":
    main()
