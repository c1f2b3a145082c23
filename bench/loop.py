"""`turn` (SPEC §17): what loopd itself adds to a turn, with a zero-latency fake model.

Two figures: owner message sent -> the model server's first request; and the model's request
that carries the last tool result -> the owner's `turn_end`. Target: median <= 5 ms each.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import zmq

from bench import floors
from bench.box import connect, daemon, fresh_home, remove, request
from bench.stats import save, show, summary, verdict
from bxcore.wire import codec as wire
from bxcore.wire.messages import OwnerMessage, TurnEnd, TurnEvent
from tests.fakes.model_server import Answer, Call, FakeModel, Request


def turn(repeat: int = 200) -> None:
    print("turn: loopd's own overhead, zero-latency model")
    folder = floors.scratch()
    first: list[float] = []
    last: list[float] = []
    try:
        with FakeModel() as model:
            seen: dict[str, float] = {}

            def answer(req: Request) -> Any:
                seen.setdefault("first", time.perf_counter())
                messages = req.body["messages"]
                if messages[-1]["role"] == "tool":  # the last tool result is in: finish
                    seen["last"] = time.perf_counter()
                    return Answer(text="done")
                path = json.dumps({"path": "/etc/hostname"})  # no grant: denied at once
                return Answer(tool_calls=(Call("read_file", path),))

            model.respond_with(answer)
            home = fresh_home(folder, f'[model]\nbase_url = "{model.base_url}"\n')
            with daemon("brokerd", home, "broker"), daemon("loopd", home, "loop"):
                events = zmq.Context.instance().socket(zmq.SUB)
                events.setsockopt(zmq.SUBSCRIBE, b"")
                events.connect(home.endpoint("loop-events"))
                time.sleep(0.3)  # let the subscription reach loopd
                loop = connect(home, "loop")
                for n in itertools.islice(itertools.count(), repeat + 10):
                    seen.clear()
                    session = f"bench-{n}"
                    started = time.perf_counter()
                    request(loop, OwnerMessage(f"o{n}", session, "go"))
                    ended = _wait_turn_end(events, session)
                    if n >= 10:
                        first.append(seen["first"] - started)
                        last.append(ended - seen["last"])
                loop.close(linger=0)
                events.close(linger=0)
    finally:
        remove(folder)
    to_model, to_end = summary(first), summary(last)
    show("owner message -> first model request", to_model)
    show("last tool result -> turn_end", to_end)
    save(
        "turn",
        {
            "to_first_model_request": to_model,
            "last_tool_result_to_turn_end": to_end,
            "first": verdict("to first request (ms)", to_model["median_ms"], "<= 5",
                             to_model["median_ms"] <= 5),
            "last": verdict("to turn_end (ms)", to_end["median_ms"], "<= 5",
                            to_end["median_ms"] <= 5),
        },
    )  # fmt: skip


def _wait_turn_end(events: zmq.Socket[bytes], session: str) -> float:
    while True:
        if not events.poll(10_000):
            raise TimeoutError(f"no turn_end for {session}")
        event = wire.decode(events.recv())
        if (
            isinstance(event, TurnEvent)
            and event.session == session
            and isinstance(event.event, TurnEnd)
        ):
            return time.perf_counter()
