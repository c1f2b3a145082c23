"""`matrix` (SPEC §21.4): what the phone channel adds, against a real Synapse on this machine,
end-to-end encrypted, with a real `matrix-nio` client as the phone.

- message: an owner's message sent from the phone → the first agent event back on the phone
  (the model answers at once, so this is the channel, loopd and the homeserver twice);
- reaction: an approval reaction on a card → the call running (brokerd's `verdict` record in
  the ledger: the call runs right after it is durable, I1);
- homeserver: the homeserver's own round trip in the same run: a message sent by the phone
  until the phone's own sync brings it back.

Each figure is beside the homeserver's round trip, which no channel can beat.
"""

from __future__ import annotations

import json
import time

from bench.stats import save, show, summary
from tests.fakes.model_server import Answer
from tests.support.brokerd import ledger_lines, short_folder
from tests.support.matrix_box import World, shell_call, world
from tests.support.owner import wait_until
from tests.support.synapse import homeserver

ROUNDS = 12


def matrix() -> None:
    print("matrix: the phone channel against Synapse on 127.0.0.1 (encrypted room)")
    with short_folder() as folder, homeserver(folder / "hs") as hs, world(hs, True) as w:
        w.model.script("warm up", Answer("warm"))
        w.phone.send(w.room, "warm up")
        w.box_post("warm")
        homeserver_s, message_s, reaction_s = [], [], []
        for n in range(ROUNDS):
            homeserver_s.append(_own_round_trip(w, n))
            message_s.append(_message(w, n))
            reaction_s.append(_reaction(w, n))
    figures = {
        "homeserver_round_trip": summary(homeserver_s),
        "message_to_first_event": summary(message_s),
        "reaction_to_call_running": summary(reaction_s),
    }
    for name, figure in figures.items():
        show(name, figure)
    save("matrix", figures)


def _own_round_trip(w: World, n: int) -> float:
    start = time.perf_counter()
    sent = w.phone.send(w.room, f"(the homeserver's round trip {n})")
    w.phone.wait(lambda: any(s.event_id == sent for s in list(w.phone.seen)) or None, 30, "echo")
    return time.perf_counter() - start


def _message(w: World, n: int) -> float:
    w.model.script(f"ping {n}", Answer(f"pong {n}"))
    start = time.perf_counter()
    w.phone.send(w.room, f"ping {n}")
    w.box_post(f"pong {n}")
    return time.perf_counter() - start


def _reaction(w: World, n: int) -> float:
    command = f"echo bench-{n}"
    w.model.script(f"run {n}", shell_call(w, command), Answer(f"ran {n}"))
    w.phone.send(w.room, f"run {n}")
    card = w.phone.wait_post(
        w.box.user_id, lambda _p, text: command in text and "React" in text, 30, "the card"
    ).event_id
    (approval,) = w.pending()
    start = time.perf_counter()
    w.phone.react(w.room, card, "✅")
    wait_until(lambda: _verdict_recorded(w, approval), 30, "the verdict recorded")
    elapsed = time.perf_counter() - start
    w.box_post(f"ran {n}")
    return elapsed


def _verdict_recorded(w: World, approval: str) -> bool:
    for line in reversed(ledger_lines(w.home)):
        record = json.loads(line)
        if record["kind"] == "verdict" and record.get("approval") == approval:
            return True
    return False
