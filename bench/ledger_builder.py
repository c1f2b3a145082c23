"""A big ledger, built honestly with the project's own record builder (issue 10): every line
is `records.build_record`'s canonical line, chained with `records.line_hash`, so what
`bxctl audit verify` checks is what brokerd would have written. Not through the broker
socket: brokerd would spend its fsyncs, not its checks, and the figure is the verifier's.

`build(path, n)` writes n records (~420 bytes each, ~0.4 GB for a million) the way brokerd
writes them: a `started` record, then calls decided and executed, a few asked and approved,
in group commits that share one `at`. Run `python -m bench.ledger_builder PATH N` alone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import BinaryIO

from bxcore.labels import DataClass, Label
from services.brokerd.core import records
from services.brokerd.core.records import GENESIS, Entry, Head, format_at, line_hash

T0_MS = 1_796_006_070_123  # 2026-11-30T02:34:30.123Z
PRIVATE = Label(DataClass.PRIVATE, False)
TAINTED = Label(DataClass.PRIVATE, True)
GRANT_SHA = "5f" * 32
_BUFFER = 8 * 1024 * 1024


def _call(i: int) -> list[Entry]:
    """The records one call leaves: decided and executed; every 50th asked and approved."""
    session, call = f"chat-{i // 200}", f"call-{i}"
    arguments = f'{{"path":"/home/owner/workspace/notes/2026/plan-{i % 977}.md"}}'
    if i % 50 == 0:
        approval = f"ap-{i}"
        return [
            records.decision(
                session=session, call=call, tool="read_file", arguments=arguments,
                label=PRIVATE, outcome="pending", grant="notes", grant_sha256=GRANT_SHA,
                approval=approval, why="the grant asks",
            ),
            records.verdict(
                approval=approval, approve=True, by="owner", scope="once", outcome="allowed",
                grant="notes", grant_sha256=GRANT_SHA,
            ),
        ]  # fmt: skip
    return [
        records.decision(
            session=session, call=call, tool="read_file", arguments=arguments, label=PRIVATE,
            outcome="allowed", grant="notes", grant_sha256=GRANT_SHA,
        ),
        records.executed(
            session=session, call=call, ok=True, exit_code=0, output_sha256=GRANT_SHA,
            output_bytes=1000 + i % 5000, label=TAINTED, ms=3 + i % 40,
        ),
    ]  # fmt: skip


def build(path: Path, n: int) -> tuple[Head, int]:
    """Writes a ledger of exactly `n` records at `path` (replacing it); its head and size."""
    head, size = Head(0, GENESIS), 0
    pending: list[bytes] = []
    buffered = 0
    call = 0
    with open(path, "wb") as f:
        batch: list[Entry] = [records.started(pid=4242, version="0.1.0")]
        while head.seq < n:
            at = format_at(T0_MS + head.seq)  # one `at` a group commit, as brokerd writes
            for kind, fields in batch[: n - head.seq]:
                line, _ = records.build_record(head.seq + 1, at, head.hash, kind, fields)
                head = Head(head.seq + 1, line_hash(line))
                pending.append(line)
                buffered += len(line) + 1
            if buffered >= _BUFFER:
                size += _flush(f, pending)
                pending, buffered = [], 0
            call += 1
            batch = _call(call)
        size += _flush(f, pending)
    return head, size


def _flush(f: BinaryIO, lines: list[bytes]) -> int:
    if not lines:
        return 0
    data = b"\n".join(lines) + b"\n"
    f.write(data)
    return len(data)


def main() -> None:
    path, n = Path(sys.argv[1]), int(sys.argv[2])
    started = time.perf_counter()
    head, size = build(path, n)
    took = time.perf_counter() - started
    print(f"{path}: {head.seq} records, {size / 1e6:.1f} MB, head {head} in {took:.1f} s")


if __name__ == "__main__":
    main()
