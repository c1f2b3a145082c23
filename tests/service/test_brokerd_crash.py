"""brokerd killed with SIGKILL at random moments (SPEC §16 crash safety; I1, I8, §7).

The stream: 500 calls (allowed write_file and shell, a deny grant, invalid arguments) from
6 client threads, each with its own DEALER, one call at a time; some calls are sent by two
clients at once. Each call is sent until it is answered (SPEC §3.1's Lazy Pirate: no answer
in 0.5 s, a fresh socket and the same session and call under a new request id). The killer
spreads 24 kills over the stream (kill k once k/26 of the answers are in, then a random
pause of up to 60 ms, so it lands while calls are deciding, writing, running or answering),
restarts brokerd and waits for its pong. A SIGKILL rarely tears a ledger write (only inside
a page copy), so on about a third of the kills the test tears the tail itself, the way such
a kill would. After every restart, and at the end, `check` holds: the ledger verifies (a
torn tail cut and a `recovered` record saying so), every answer has its records, nothing
ran without its decision or twice, and every `done` matches the disk. Last, after a clean
restart, every call is sent again and gets its recorded answer, and nothing runs.

How a second run would show. `write_file` replaces a file, so its content cannot tell one
run from two. The test watches the marker folders with inotify (plain `ctypes`) and counts
IN_CLOSE_WRITE per file: the toolkit opens, writes and closes its file once a run, the kernel
reports the close through the sandbox's bind mount, and nothing else writes there, so the
count of a call's marker is the number of times that call ran. Shell calls are counted by
the line each run appends to a log (`echo <call> >> runs.log`). Both are watched from outside
brokerd, so they need no cooperation from the code under test.

The seed of the plan, the pauses and the tears is printed and attached to any failure;
`BX_CRASH_SEED=<n>` replays them (the moments are the same; the scheduling is the machine's).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import random
import secrets
import shutil
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from bxcore.clock import now_ms
from bxcore.home.layout import Home
from bxcore.labels import SESSION_DEFAULT
from bxcore.wire import codec as wire
from bxcore.wire.messages import Denied, Done, Failed, Outcome, ToolRequest, ToolResponse
from services.brokerd.core import records
from services.brokerd.core.chain import ChainReport
from services.brokerd.core.records import Head
from services.brokerd.core.replay import ALREADY_RAN, UNKNOWN
from services.brokerd.ledger.verify import verify
from tests.support.brokerd import write_grant
from tests.support.daemons import Daemon, init_home, start, tool_owned

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bwrap is not installed (in CI this fails instead, §15)",
)

CALLS = 500
CLIENTS = 6
KILLS = 24  # more than the 20 the issue asks for: the last ones may find the stream ended
MIN_KILLS_IN_STREAM = 20
RETRY_S = 0.5  # Lazy Pirate: no answer in this long, a new socket and the same call again
STREAM_DEADLINE_S = 150.0
RESULTS_KEPT = 40

IN_CLOSE_WRITE = 0x8
IN_Q_OVERFLOW = 0x4000
_EVENT = struct.Struct("iIII")


class FileWrites:
    """IN_CLOSE_WRITE events per file, in some folders (inotify through `ctypes`)."""

    def __init__(self, *folders: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._folders: dict[int, Path] = {}
        for folder in folders:
            wd = libc.inotify_add_watch(self._fd, os.fsencode(folder), IN_CLOSE_WRITE)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
            self._folders[wd] = folder
        self.counts: Counter[Path] = Counter()

    def drain(self) -> Counter[Path]:
        """Reads every event queued so far; the counts of all of them."""
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return self.counts
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
                offset += _EVENT.size + size
                assert not mask & IN_Q_OVERFLOW, "inotify lost events: the count is unknown"
                if mask & IN_CLOSE_WRITE and wd in self._folders:
                    self.counts[self._folders[wd] / os.fsdecode(name)] += 1

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class Planned:
    """One call of the stream, and what its side effect would be."""

    call: str
    session: str
    kind: str  # write (allowed), shell (allowed), deny (a deny grant), invalid (bad arguments)
    tool: str
    arguments: str
    marker: Path | None = None  # the file a write_file call names (None: shell)
    content: str = ""
    twice: bool = False  # also sent, at about the same time, by a second client

    def request(self, request_id: str) -> ToolRequest:
        return ToolRequest(request_id, self.session, self.call, self.tool, self.arguments)


@dataclass
class Place:
    """The folders of one test: a home, and what the grants name."""

    root: Path
    home: Path = field(init=False)
    files: Path = field(init=False)  # write_file allow
    denied: Path = field(init=False)  # write_file deny, inside `files`
    shell: Path = field(init=False)  # shell allow

    def __post_init__(self) -> None:
        # Few answers kept, so that repeats are also answered from the ledger between crashes.
        self.home = init_home(self.root / "h", f"[broker]\nresults_kept = {RESULTS_KEPT}\n")
        self.files = self.root / "f"
        self.denied = self.files / "deny"
        self.shell = self.root / "s"
        for folder in (self.files, self.denied, self.shell):
            folder.mkdir(parents=True)
        tool_owned(self.files, self.shell)  # the tools write there
        write_grant(self.home, "crash-write", tool="write_file", mode="allow", path=str(self.files))
        write_grant(self.home, "crash-deny", tool="write_file", mode="deny", path=str(self.denied))
        write_grant(self.home, "crash-shell", tool="shell", mode="allow", path=str(self.shell))

    @property
    def ledger(self) -> Path:
        return Home(self.home).ledger

    @property
    def log(self) -> Path:
        return self.shell / "runs.log"


class Lives:
    """The brokerd of a test across its crashes; whatever runs is stopped at the end."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self.current: Daemon | None = None

    def start(self) -> int:
        """A new brokerd, once it answers ping; its pid."""
        assert self.current is None or self.current.process.poll() is not None
        self.current = start("brokerd", self.place.home)
        return self.current.wait_ready().pid

    def kill(self) -> None:
        assert self.current is not None
        self.current.kill()

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()


@pytest.fixture
def lives(short_tmp: Path) -> Iterator[Lives]:
    held = Lives(Place(short_tmp))
    try:
        yield held
    finally:
        held.stop()


def plan(place: Place, rng: random.Random) -> list[Planned]:
    """The stream: mostly allowed writes, some allowed shell runs, some denials of each kind."""
    calls = []
    for n in range(CALLS):
        call = f"c{n:03d}"
        session = f"crash-{rng.choice('abc')}"
        twice = rng.random() < 0.08
        roll = rng.random()
        if roll < 0.78:
            marker = place.files / f"{call}.txt"
            content = f"{call} {rng.randrange(10**9)}"
            arguments = json.dumps({"path": str(marker), "content": content})
            planned = Planned(call, session, "write", "write_file", arguments, marker, content)
        elif roll < 0.90:
            arguments = json.dumps({"command": f"echo {call} >> runs.log", "cwd": str(place.shell)})
            planned = Planned(call, session, "shell", "shell", arguments)
        elif roll < 0.95:
            marker = place.denied / f"{call}.txt"
            arguments = json.dumps({"path": str(marker), "content": "no"})
            planned = Planned(call, session, "deny", "write_file", arguments, marker)
        else:
            marker = place.files / f"{call}.txt"
            arguments = json.dumps({"path": str(marker), "text": "no"})
            planned = Planned(call, session, "invalid", "write_file", arguments, marker)
        calls.append(dataclasses.replace(planned, twice=twice))
    return calls


def shares(calls: list[Planned]) -> list[list[Planned]]:
    """Each client's calls, in order: every CLIENTS-th call, and the next client's calls that
    are sent twice, at about the same place in the stream."""
    return [
        [c for n, c in enumerate(calls) if n % CLIENTS == k or (c.twice and n % CLIENTS == k - 1)]
        for k in range(CLIENTS)
    ]


def ask_once(ctx: zmq.Context[Any], endpoint: str, request: ToolRequest, wait_s: float) -> Any:
    """One Lazy Pirate attempt: a fresh DEALER, one request, the answer or None."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    try:
        dealer.connect(endpoint)
        dealer.send(wire.encode(request))
        if not dealer.poll(int(wait_s * 1000)):
            return None
        answer = wire.decode(dealer.recv())
    finally:
        dealer.close(linger=0)
    assert isinstance(answer, ToolResponse) and answer.id == request.id, (request, answer)
    return answer.outcome


class Stream:
    """The clients: each sends its share of the calls, one at a time, each until answered."""

    def __init__(self, endpoint: str, calls: list[Planned]) -> None:
        self.endpoint = endpoint
        self.calls = calls
        self.answers: dict[str, list[Outcome]] = {}
        self.attempts = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._shares = shares(calls)
        self.total = sum(len(share) for share in self._shares)
        self._threads = [
            threading.Thread(target=self._client, args=(share,), daemon=True)
            for share in self._shares
        ]

    def __enter__(self) -> Stream:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._ctx.destroy(linger=0)

    @property
    def answered(self) -> int:
        with self._lock:
            return sum(len(outcomes) for outcomes in self.answers.values())

    def snapshot(self) -> dict[str, list[Outcome]]:
        with self._lock:
            return {call: list(outcomes) for call, outcomes in self.answers.items()}

    def _client(self, share: list[Planned]) -> None:
        deadline = time.monotonic() + STREAM_DEADLINE_S
        try:
            for planned in share:
                attempt = 0
                while not self.stop.is_set():
                    assert time.monotonic() < deadline, f"{planned.call} was never answered"
                    attempt += 1
                    request = planned.request(f"{planned.call}.{attempt}")
                    outcome = ask_once(self._ctx, self.endpoint, request, RETRY_S)
                    if outcome is not None:
                        with self._lock:
                            self.answers.setdefault(planned.call, []).append(outcome)
                            self.attempts += attempt
                        break
        except BaseException as error:  # handed to the test's thread, which fails with it
            self.errors.append(error)
            self.stop.set()

    def raise_errors(self) -> None:
        if self.errors:
            raise self.errors[0]


@dataclass
class Seen:
    """The ledger and the side effects as they stood at one check."""

    report: ChainReport
    decisions: dict[str, list[dict[str, Any]]]
    executed: dict[str, list[dict[str, Any]]]
    records: list[dict[str, Any]]


def read_ledger(path: Path, *, live: bool) -> Seen:
    """The ledger's records. `live`: brokerd may be appending, so only the lines that have
    ended are read, and they must verify whole; else the file must verify as it is."""
    data = path.read_bytes()
    if live:
        data = data[: data.rfind(b"\n") + 1]
        copy = path.with_name("snapshot.jsonl")
        copy.write_bytes(data)
        report = verify(copy)
        copy.unlink()
    else:
        report = verify(path)
    assert report.ok and not report.torn, f"the ledger does not verify: {report}"
    records = [json.loads(line) for line in data.splitlines()]
    decisions: dict[str, list[dict[str, Any]]] = {}
    executed: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["kind"] == "decision":
            decisions.setdefault(record["call"], []).append(record)
        elif record["kind"] == "executed":
            executed.setdefault(record["call"], []).append(record)
    return Seen(report, decisions, executed, records)


def check(
    place: Place,
    calls: list[Planned],
    answers: dict[str, list[Outcome]],
    writes: FileWrites,
    *,
    live: bool,
) -> None:
    """What must hold at every check: answered calls have their records, nothing ran without
    its decision (I1), nothing ran twice (I8), and every `done` matches what is on disk.
    Order matters: answers, then side effects, then the ledger, each newer than the last."""
    counts = writes.drain()
    runs = Counter(place.log.read_text().split()) if place.log.exists() else Counter()
    seen = read_ledger(place.ledger, live=live)
    assert set(seen.decisions) <= {c.call for c in calls}, "a decision for a call never sent"
    for planned in calls:
        name = planned.call
        decided = seen.decisions.get(name, [])
        ran = seen.executed.get(name, [])
        effects = runs[name] if planned.marker is None else counts[planned.marker]
        why = (
            f"{name} ({planned.kind}): answer {answers.get(name)!r}; decisions "
            f"{[(d['seq'], d['outcome']) for d in decided]}; executed "
            f"{[(e['seq'], e['ok']) for e in ran]}; side effects {effects}"
        )
        assert len(decided) <= 1 and len(ran) <= 1, f"decided or recorded twice: {why}"
        assert effects <= 1, f"ran twice: {why}"
        if effects:
            assert decided and decided[0]["outcome"] == "allowed", f"ran undecided (I1): {why}"
        if ran:
            assert decided and decided[0]["outcome"] == "allowed", f"executed, not allowed: {why}"
        if name not in answers:
            continue
        assert decided, f"answered with no decision: {why}"
        for outcome in answers[name]:
            check_answer(planned, outcome, decided[0], ran, effects, why)
        done = {o for o in answers[name] if isinstance(o, Done)}
        assert len(done) <= 1, f"two different done answers: {why}"


def check_answer(
    planned: Planned,
    outcome: Outcome,
    decision: dict[str, Any],
    ran: list[dict[str, Any]],
    effects: int,
    why: str,
) -> None:
    if planned.kind in ("deny", "invalid"):
        reason = "denied_by_grant" if planned.kind == "deny" else "invalid_arguments"
        assert isinstance(outcome, Denied) and outcome.reason == reason, why
        assert decision["outcome"] == "denied" and decision["reason"] == reason, why
        assert (outcome.detail is not None) == (planned.kind == "invalid"), why
        assert not ran and effects == 0, why
        return
    assert decision["outcome"] == "allowed", why
    if isinstance(outcome, Failed) and outcome.message == UNKNOWN:
        assert not ran, f"unknown, yet executed is recorded: {why}"
        return
    assert ran and ran[0]["ok"] is True and effects == 1, f"done but not run once: {why}"
    if isinstance(outcome, Failed):
        assert outcome.message == ALREADY_RAN, why
        return
    assert isinstance(outcome, Done) and outcome.ok, why
    data = outcome.output.encode()
    assert ran[0]["output_bytes"] == len(data), why
    assert ran[0]["output_sha256"] == hashlib.sha256(data).hexdigest(), why
    if planned.kind == "write":
        assert planned.marker is not None and planned.marker.read_text() == planned.content, why
        written = len(planned.content.encode())
        assert outcome.output == f"wrote {written} bytes to {planned.marker}", why
    else:
        assert outcome.output == "[exit status 0]", why


def tear(ledger: Path, head: Head, k: int, rng: random.Random) -> int:
    """What a kill in the middle of a write leaves: the start of the next record, no newline.
    (A SIGKILL tears a write only when it lands inside the copy of a page, which is rare.)"""
    kind, fields = records.decision(
        session="crash-torn",
        call=f"torn-{k}",
        tool="write_file",
        arguments="{}",
        label=SESSION_DEFAULT,
        outcome="allowed",
    )
    line = records.build(head.seq + 1, records.format_at(now_ms()), head.hash, kind, fields)
    cut = rng.randrange(1, len(line))
    with open(ledger, "ab") as f:
        f.write(line[:cut])
    return cut


def ledger_bytes(ledger: Path, report: ChainReport) -> int:
    """The length of the good lines a report counted."""
    data, offset = ledger.read_bytes(), 0
    for _ in range(report.records):
        offset = data.index(b"\n", offset) + 1
    return offset


def check_restart(place: Place, before: ChainReport, torn: int, pid: int) -> None:
    """The restarted brokerd cut the torn tail (`torn` bytes), said so, and recorded its
    start, before anything else."""
    seen = read_ledger(place.ledger, live=True)
    new = [r for r in seen.records if r["seq"] > before.records]
    expected = ["recovered", "started"] if before.torn else ["started"]
    assert [r["kind"] for r in new[: len(expected)]] == expected, (before, new[:3])
    assert new[len(expected) - 1]["pid"] == pid, new[: len(expected)]
    if before.torn:
        assert new[0]["cut_bytes"] == torn, (torn, new[0])


def wait_for(condition: Any, deadline_s: float, stream: Stream, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        stream.raise_errors()
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.005)


def test_sigkill_at_random_moments_loses_no_record_and_runs_no_call_twice(
    lives: Lives,
) -> None:
    seed = int(os.environ.get("BX_CRASH_SEED") or secrets.randbits(32))
    print(f"crash test seed {seed} (replay with BX_CRASH_SEED={seed})")
    try:
        run_crash_stream(lives, random.Random(seed))
    except BaseException as error:
        error.add_note(f"crash test seed {seed}: replay with BX_CRASH_SEED={seed}")
        raise


def run_crash_stream(lives: Lives, rng: random.Random) -> None:
    place = lives.place
    calls = plan(place, rng)
    by_call = {c.call: c for c in calls}
    writes = FileWrites(place.files, place.denied)
    began = time.monotonic()
    kills_in_stream = 0
    try:
        lives.start()
        with Stream(Home(place.home).endpoint("broker"), calls) as stream:
            for k in range(1, KILLS + 1):
                mark = k * stream.total // (KILLS + 2)
                wait_for(lambda m=mark: stream.answered >= m, 60, stream, f"{mark} answers")
                pause = rng.uniform(0.0, 0.06)
                time.sleep(pause)  # the random moment: deciding, writing, running, answering
                answered = stream.answered
                lives.kill()
                kills_in_stream += answered < stream.total
                before = verify(place.ledger)
                assert before.ok or before.torn, f"after kill {k}: {before}"
                torn, by = 0, "kill"
                if before.torn:  # the kill tore a write
                    torn = place.ledger.stat().st_size - ledger_bytes(place.ledger, before)
                elif rng.random() < 0.3:
                    torn, by = tear(place.ledger, before.head, k, rng), "test"
                    before = verify(place.ledger)
                    assert before.torn, before
                pid = lives.start()
                moment = f"at {answered} answers (+{pause * 1000:.0f} ms)"
                print(f"kill {k} {moment}: {before}" + (f" ({by}: {torn} bytes)" if torn else ""))
                check_restart(place, before, torn, pid)
                check(place, calls, stream.snapshot(), writes, live=True)
            wait_for(
                lambda: stream.answered == stream.total, STREAM_DEADLINE_S, stream, "all answers"
            )
            stream.raise_errors()
            answers = stream.snapshot()
            attempts, sent = stream.attempts, stream.total
        lives.stop()
        check(place, calls, answers, writes, live=False)
        streamed = time.monotonic() - began
        # Once more, after a clean restart: every call gets its recorded answer, nothing runs.
        lives.start()
        ctx: zmq.Context[Any] = zmq.Context()
        try:
            endpoint = Home(place.home).endpoint("broker")
            again = {
                c.call: ask_once(ctx, endpoint, c.request(f"{c.call}.again"), 10.0) for c in calls
            }
        finally:
            ctx.destroy(linger=0)
        lives.stop()
        check(place, calls, answers, writes, live=False)
        for name, outcome in again.items():
            first = answers[name]
            ran_before = any(isinstance(o, Done) or o == Failed(ALREADY_RAN) for o in first)
            expected = Failed(ALREADY_RAN) if ran_before else first[0]
            assert outcome == expected, (by_call[name], first, outcome)
    finally:
        writes.close()
    kinds = Counter(_kind(outcome) for outcomes in answers.values() for outcome in outcomes)
    print(
        f"{KILLS} kills ({kills_in_stream} during the stream); {CALLS} calls, {sent} sends, "
        f"{attempts} attempts; answers {dict(kinds)}; stream {streamed:.1f} s, "
        f"all {time.monotonic() - began:.1f} s"
    )
    assert kills_in_stream >= MIN_KILLS_IN_STREAM, f"only {kills_in_stream} kills hit the stream"


def _kind(outcome: Outcome) -> str:
    if isinstance(outcome, Failed):
        return {UNKNOWN: "unknown", ALREADY_RAN: "already ran"}.get(outcome.message, "error")
    return type(outcome).__name__.lower()


def test_a_call_running_when_brokerd_dies_is_unknown_after_restart_and_never_runs_again(
    lives: Lives,
) -> None:
    place = lives.place
    command = "echo start >> runs.log; sleep 2; echo end >> runs.log"
    slow = Planned(
        "slow",
        "crash-d",
        "shell",
        "shell",
        json.dumps({"command": command, "cwd": str(place.shell)}),
    )
    endpoint = Home(place.home).endpoint("broker")
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        lives.start()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        dealer.send(wire.encode(slow.request("r1")))
        deadline = time.monotonic() + 10
        while not (place.log.exists() and place.log.read_text() == "start\n"):
            assert time.monotonic() < deadline, "the shell call never started"
            time.sleep(0.01)
        lives.kill()
        killed = time.monotonic()
        assert not dealer.poll(0), "an answer came from a brokerd that was killed mid-run"
        dealer.close(linger=0)
        seen = read_ledger(place.ledger, live=False)
        assert [d["outcome"] for d in seen.decisions["slow"]] == ["allowed"]
        assert "slow" not in seen.executed
        lives.start()
        assert ask_once(ctx, endpoint, slow.request("r2"), 10) == Failed(UNKNOWN)
        # Past the moment the first run would have ended: it died with brokerd, and the
        # restarted brokerd did not run it again.
        time.sleep(max(0.0, killed + 2.5 - time.monotonic()))
        assert ask_once(ctx, endpoint, slow.request("r3"), 10) == Failed(UNKNOWN)
        assert place.log.read_text() == "start\n"
        lives.stop()
        seen = read_ledger(place.ledger, live=False)
        assert len(seen.decisions["slow"]) == 1 and "slow" not in seen.executed
    finally:
        ctx.destroy(linger=0)
