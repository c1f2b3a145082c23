"""Group commit: callers that are ready together share one fsync; failures fail closed."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import pytest

from bxcore.labels import SESSION_DEFAULT
from services.brokerd.core import records
from services.brokerd.core.records import Head
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import Ledger, LedgerUnavailable

pytestmark = pytest.mark.anyio


def entry(call: str) -> records.Entry:
    return records.decision(
        session="s", call=call, tool="read_file", arguments="{}", label=SESSION_DEFAULT,
        outcome="denied", reason="no_grant",
    )  # fmt: skip


class Fsyncs:
    def __init__(self, fail_after: int | None = None) -> None:
        self.count = 0
        self.fail_after = fail_after

    def __call__(self, fd: int) -> None:
        self.count += 1
        if self.fail_after is not None and self.count > self.fail_after:
            raise OSError(errno.EIO, "injected")


async def test_callers_ready_together_share_one_fsync(tmp_path: Path) -> None:
    fsyncs = Fsyncs()
    ledger = Ledger.open(tmp_path / "l.jsonl", now_ms=lambda: 0, fsync=fsyncs)
    heads: list[Head] = []
    committer = Committer(ledger, heads.append)
    before = fsyncs.count
    async with anyio.create_task_group() as tasks:
        for n in range(16):
            tasks.start_soon(committer.append, [entry(f"c{n}")])
    assert fsyncs.count - before == 1
    assert committer.batches == 1 and heads == [ledger.head] and ledger.head.seq == 16


async def test_a_failed_fsync_fails_the_batch_and_every_later_call(tmp_path: Path) -> None:
    fsyncs = Fsyncs()
    ledger = Ledger.open(tmp_path / "l.jsonl", now_ms=lambda: 0, fsync=fsyncs)
    fsyncs.fail_after = fsyncs.count + 1
    committer = Committer(ledger, lambda head: None, clock=lambda: 0.0)
    await committer.append([entry("c1")])
    with pytest.raises(LedgerUnavailable):
        await committer.append([entry("c2")])
    assert not committer.available
    with pytest.raises(LedgerUnavailable):
        await committer.append([entry("c3")])


async def test_an_entry_no_record_can_hold_fails_only_its_own_caller(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "l.jsonl", now_ms=lambda: 0)
    committer = Committer(ledger, lambda head: None)
    bad = ("decision", {"session": "s"})
    results: dict[str, object] = {}

    async def append(name: str, entries: list[records.Entry]) -> None:
        try:
            results[name] = await committer.append(entries)
        except LedgerUnavailable as error:
            results[name] = error

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(append, "good-1", [entry("c1")])
        tasks.start_soon(append, "bad", [bad])
        tasks.start_soon(append, "good-2", [entry("c2")])
    assert isinstance(results["bad"], LedgerUnavailable)
    assert isinstance(results["good-1"], list) and isinstance(results["good-2"], list)
    assert ledger.head.seq == 2 and committer.available
