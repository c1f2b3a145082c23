"""The crash storm (issue 10), not run by CI: `python -m bench.soak --minutes 10`.

A whole box (`bxctl up`: brokerd, memoryd, loopd, gatewayd under the supervisor) takes a mixed
workload on its real sockets while its processes are SIGKILLed at random (every daemon, and
the supervisor, which is then started again with `bxctl up`). Every call leaves an effect the
soak can count (a file written, a line appended, a note kept); at the end it prints the
counts: kills, restarts, double runs, runs without a durable decision, lost approvals, lost
notes, chain breaks. Every count but kills and restarts must be 0.

Clients act as loopd does: a call that gets no answer is sent again with the same ids until
it is answered (the Lazy Pirate of SPEC §3.1); an answer it got is final.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import zmq

from bench.box import with_free_console
from bxcore import curve
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    AwaitApproval,
    Done,
    Failed,
    Pending,
    Scope,
    ToolRequest,
    ToolResponse,
    VerdictRequest,
)
from bxctl.init import init_home

SERVICES = ("brokerd", "memoryd", "loopd", "gatewayd")


@dataclass
class Tally:
    kills: Counter[str] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)  # a process seen with a new pid
    calls: Counter[str] = field(default_factory=Counter)
    answered: dict[str, Any] = field(default_factory=dict)  # call id -> outcome
    approvals: dict[str, str] = field(default_factory=dict)  # approval -> call id
    notes: set[str] = field(default_factory=set)  # tokens of notes answered "noted"
    lock: threading.Lock = field(default_factory=threading.Lock)


class Box:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = Home(root / "h")
        self.effects = root / "effects"
        self.asked = root / "asked"

    def bxctl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bxctl", "--home", str(self.home.root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def prepare(self) -> None:
        init_home(self.home)
        self.home.config.write_text(
            with_free_console('[model]\nbase_url = "http://127.0.0.1:9/v1"\n')
        )
        for folder in (self.effects, self.asked):
            folder.mkdir()
            if os.geteuid() == 0:  # tools run as nobody
                nobody = pwd.getpwnam("nobody")
                os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        grants = self.home.grants
        for tool in ("write_file", "shell"):
            (grants / f"fx-{tool.replace('_', '-')}.toml").write_text(
                f'tool = "{tool}"\nmode = "allow"\npath = "{self.effects}"\n'
            )
        (grants / "asked.toml").write_text(f'tool = "shell"\nmode = "ask"\npath = "{self.asked}"\n')

    def up(self) -> None:
        """`bxctl up`; when it fails, what it started is stopped before the soak ends."""
        result = self.bxctl("up")
        if result.returncode != 0:
            self.stop()
            raise SystemExit(f"bxctl up failed: {(result.stderr or result.stdout).strip()}")

    def stop(self) -> None:
        """`bxctl down`, then SIGKILL for any process that still names the home."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.bxctl("down", timeout=60)
        left = []
        for process in psutil.process_iter(["cmdline"]):
            if any(str(self.home.root) in arg for arg in process.info["cmdline"] or []):
                with contextlib.suppress(psutil.Error):
                    process.kill()
                    left.append(process)
        psutil.wait_procs(left, timeout=5)

    def pids(self) -> dict[str, int]:
        found: dict[str, int] = {}
        needle = str(self.home.root)
        for process in psutil.process_iter(["pid", "cmdline"]):
            cmdline = process.info["cmdline"] or []
            if any(needle in arg for arg in cmdline):
                text = " ".join(cmdline)
                for name in SERVICES:
                    if f"services.{name}" in text:
                        found[name] = process.info["pid"]
                if "bxctl.supervisor.runner" in text or ("bxctl" in text and " up" in text):
                    found.setdefault("supervisor", process.info["pid"])
        return found


def dealer(home: Home, socket: str) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if socket == "admin":
        curve.connect_curve(
            sock, curve.load_pair(home.keys, "owner"), curve.load_public(home.keys, "brokerd")
        )
    sock.connect(home.endpoint(socket))
    return sock


def ask(home: Home, socket: str, message: Any, deadline: float) -> Any | None:
    """The answer to `message`, sent again (same ids) until one comes or `deadline` passes."""
    while time.monotonic() < deadline:
        sock = dealer(home, socket)
        try:
            sock.send(wire.encode(message))
            if sock.poll(3000):
                return wire.decode(sock.recv())
        finally:
            sock.close(linger=0)
    return None


def worker(box: Box, tally: Tally, number: int, stop: threading.Event, rng: random.Random) -> None:
    home = box.home
    n = 0
    while not stop.is_set():
        n += 1
        call_id = f"w{number}-{n}"
        session = f"soak-{number}-{n // 20}"
        kind = rng.choice(["write", "shell", "note", "ask"])
        if kind == "write":
            tool, arguments = "write_file", {"path": f"{box.effects}/{call_id}", "content": call_id}
        elif kind == "shell":
            tool, arguments = (
                "shell",
                {"command": f"echo {call_id} >> runs.log", "cwd": str(box.effects)},
            )
        elif kind == "note":
            tool, arguments = (
                "memory",
                {"action": "note", "text": f"token{call_id.replace('-', 'x')}"},
            )
        else:
            tool, arguments = (
                "shell",
                {"command": f"echo {call_id} >> asked.log", "cwd": str(box.asked)},
            )
        request = ToolRequest(f"r-{call_id}", session, call_id, tool, json.dumps(arguments))
        with tally.lock:
            tally.calls[kind] += 1
        answer = ask(home, "broker", request, time.monotonic() + 60)
        outcome = answer.outcome if isinstance(answer, ToolResponse) else None
        while isinstance(outcome, Pending) and not stop.is_set():
            with tally.lock:
                tally.approvals[outcome.approval] = call_id
            verdict = VerdictRequest(f"v-{call_id}", outcome.approval, True, Scope.ONCE, "soak")
            ask(home, "admin", verdict, time.monotonic() + 30)
            waited = ask(
                home,
                "broker",
                AwaitApproval(f"a-{call_id}", session, outcome.approval, 5000),
                time.monotonic() + 60,
            )
            outcome = waited.outcome if isinstance(waited, ToolResponse) else None
        with tally.lock:
            tally.answered[call_id] = outcome
            if kind == "note" and isinstance(outcome, Done) and outcome.ok:
                tally.notes.add(arguments["text"])


def killer(
    box: Box, tally: Tally, stop: threading.Event, rng: random.Random, every_s: float
) -> None:
    seen: dict[str, int] = {}
    while not stop.wait(rng.uniform(every_s / 2, every_s * 1.5)):
        pids = box.pids()
        with tally.lock:
            tally.restarts.update(name for name, pid in pids.items() if seen.get(name, pid) != pid)
        seen.update(pids)
        if not pids:
            continue
        name = rng.choice(sorted(pids))
        try:
            os.kill(pids[name], signal.SIGKILL)
        except ProcessLookupError:
            continue
        with tally.lock:
            tally.kills[name] += 1
        if name == "supervisor":  # nothing supervises it: the owner starts the box again
            time.sleep(0.5)
            for pid in box.pids().values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            box.up()


def analyse(box: Box, tally: Tally) -> dict[str, int]:
    ledger = [
        json.loads(line) for line in box.home.ledger.read_bytes().splitlines() if line.strip()
    ]
    decided: dict[str, str] = {}
    approved: set[str] = set()
    approvals_in_ledger: set[str] = set()
    for record in ledger:
        if record["kind"] == "decision" and str(record.get("session", "")).startswith("soak-"):
            decided.setdefault(record["call"], record["outcome"])
            if record["outcome"] == "pending":
                approvals_in_ledger.add(str(record.get("approval")))
        elif record["kind"] == "verdict" and record.get("outcome") == "allowed":
            approved.add(str(record["approval"]))
    runs: Counter[str] = Counter()
    for path in box.effects.iterdir():
        if path.name.startswith("w") and "-" in path.name:
            runs[path.name] += 1
    for log in (box.effects / "runs.log", box.asked / "asked.log"):
        if log.exists():
            runs.update(line.strip() for line in log.read_text().splitlines() if line.strip())
    call_of_approval = {v: k for k, v in tally.approvals.items()}
    double = sum(1 for count in runs.values() if count > 1)
    undecided = 0
    for call_id in runs:
        outcome = decided.get(call_id)
        if outcome == "allowed":
            continue
        if outcome == "pending" and call_of_approval.get(call_id) in approved:
            continue
        undecided += 1
    lost_approvals = sum(1 for a in tally.approvals if a not in approvals_in_ledger)
    lost_notes = 0
    for token in sorted(tally.notes):
        recalled = ask(
            box.home,
            "broker",
            ToolRequest(
                f"q-{token}",
                "soak-check",
                f"q-{token}",
                "memory",
                json.dumps({"action": "recall", "query": token}),
            ),
            time.monotonic() + 30,
        )
        found = recalled.outcome if isinstance(recalled, ToolResponse) else None
        if not (isinstance(found, Done) and token in found.output):
            lost_notes += 1
    verify = box.bxctl("audit", "verify")
    return {
        "double runs": double,
        "runs without a durable decision": undecided,
        "lost approvals": lost_approvals,
        "lost notes": lost_notes,
        "chain breaks": 0 if verify.returncode == 0 else 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--kill-every", type=float, default=4.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=None)
    options = parser.parse_args()
    seed = options.seed if options.seed is not None else random.randrange(2**32)
    root = Path(tempfile.mkdtemp(prefix="bx-soak-", dir="/tmp"))
    box = Box(root)
    box.prepare()
    try:
        tally, counted = _soak(box, options, seed)
    finally:
        box.stop()
    answers = Counter(_answer(outcome) for outcome in tally.answered.values())
    print(f"soak: {options.minutes:g} min, seed {seed}, home {root}")
    print(f"  calls: {dict(tally.calls)}; answers: {dict(answers)}")
    print(f"  kills: {sum(tally.kills.values())} {dict(tally.kills)}")
    print(f"  restarts (a new pid seen): {sum(tally.restarts.values())} {dict(tally.restarts)}")
    for name, count in counted.items():
        print(f"  {name}: {count}")
    failed = any(counted.values())
    print("  => " + ("FAILED" if failed else "ok: nothing ran twice, nothing was lost"))
    sys.exit(1 if failed else 0)


def _soak(box: Box, options: argparse.Namespace, seed: int) -> tuple[Tally, dict[str, int]]:
    """The box up, the workers and the killer for `options.minutes`, then the counts."""
    box.up()
    tally = Tally()
    stop = threading.Event()
    rng = random.Random(seed)
    threads = [
        threading.Thread(target=worker, args=(box, tally, i, stop, random.Random(rng.random())))
        for i in range(options.workers)
    ]
    threads.append(
        threading.Thread(
            target=killer, args=(box, tally, stop, random.Random(rng.random()), options.kill_every)
        )
    )
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        while time.monotonic() - started < options.minutes * 60:
            time.sleep(1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    box.up()  # whatever the last kill left
    time.sleep(2)
    return tally, analyse(box, tally)


def _answer(outcome: Any) -> str:
    if outcome is None:
        return "unanswered"
    if isinstance(outcome, Failed):
        return f"Failed: {outcome.message}"
    return type(outcome).__name__


if __name__ == "__main__":
    main()
