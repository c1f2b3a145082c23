"""The approval desk and the broker in one process (SPEC §9, I1, I5, I8): the real call book,
driver, group commit, ledger, label files and grants folder, with a courier that only counts
and a clock the test moves. What the socket tests prove through processes, these prove in
milliseconds: expiry, redecide, session scope, once per call, a restart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    ApprovalRequested,
    ApprovalSettled,
    ApprovalState,
    AwaitApproval,
    Denied,
    Done,
    Error,
    ErrorCode,
    Failed,
    Pending,
    Scope,
    Settled,
    ToolRequest,
    ToolResponse,
    VerdictRequest,
)
from services.brokerd.broker import Broker
from services.brokerd.calls import CallBook
from services.brokerd.core.policy import Allowed
from services.brokerd.core.replay import ALREADY_RAN
from services.brokerd.courier import Result
from services.brokerd.desk import Desk
from services.brokerd.driver import Driver
from services.brokerd.grants_folder import GrantsFolder
from services.brokerd.judge import Judge
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import Ledger
from services.brokerd.state import StateStore
from services.brokerd.words import WordsBook

pytestmark = pytest.mark.anyio
TTL_S = 60.0
START_MS = 1_796_006_070_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class CountingCourier:
    """Runs nothing: says every call ran, and counts them."""

    ran: list[tuple[str, str]] = field(default_factory=list)

    async def run(self, session: str, call: str, allowed: Allowed) -> Result:
        self.ran.append((session, call))
        return Result(True, f"ran {call}", exit=0, ms=1, started=True)


@dataclass
class Box:
    folder: Path
    broker: Broker
    desk: Desk
    courier: CountingCourier
    ledger: Ledger
    said: list[Any]
    now: list[int]

    async def call(self, call: str, tool: str = "shell", session: str = "s") -> Any:
        arguments = {"command": "ls", "cwd": str(self.folder / "work")}
        if tool == "write_file":
            arguments = {"path": str(self.folder / "work" / "f"), "content": "x"}
        request = ToolRequest(f"r-{call}", session, call, tool, json.dumps(arguments))
        return await self.broker.tool_request(request)

    async def verdict(self, approval: str, approve: bool, scope: Scope = Scope.ONCE) -> Any:
        return await self.desk.verdict(VerdictRequest("v", approval, approve, scope, "owner"))

    async def answer(self, approval: str, session: str = "s") -> Any:
        found = await self.desk.await_approval(AwaitApproval("w", session, approval, 5_000))
        return found.outcome if isinstance(found, ToolResponse) else found


def grants(folder: Path, **files: str) -> Path:
    place = folder / "grants"
    place.mkdir(exist_ok=True)
    for name, text in files.items():
        (place / f"{name}.toml").write_text(text)
    return place


def shell_asks(folder: Path) -> str:
    return f'tool = "shell"\nmode = "ask"\npath = "{folder / "work"}"\n'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    grants(tmp_path, shell=shell_asks(tmp_path))
    write = f'tool = "write_file"\nmode = "allow"\npath = "{tmp_path / "work"}"\n'
    grants(tmp_path, write=write)
    return tmp_path


@pytest.fixture
async def box(folder: Path) -> AsyncIterator[Box]:
    async with running_box(folder) as made:
        yield made


class running_box:
    """A desk and a broker over the files in `folder`, the desk's expiry loop running."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def __aenter__(self) -> Box:
        now = [START_MS]
        said: list[Any] = []
        ledger = Ledger.open(self.folder / "audit" / "ledger.jsonl", now_ms=lambda: now[0])
        committer = Committer(ledger, lambda head: None)
        labels = StateStore(self.folder / "state" / "broker")
        book = CallBook(ledger, 100)
        judge = Judge(labels, GrantsFolder(self.folder / "grants"))
        courier = CountingCourier()
        driver = Driver(committer, courier, labels, book)  # type: ignore[arg-type]
        desk = Desk(
            book=book, driver=driver, judge=judge, publish=said.append, ttl_s=TTL_S,
            clock=lambda: now[0],
        )  # fmt: skip
        desk.rebuild(ledger.unsettled(), ledger.scoped())
        words = WordsBook(committer, judge.jobs)
        broker = Broker(
            book=book, committer=committer, driver=driver, judge=judge, labels=labels, desk=desk,
            words=words,
        )  # fmt: skip
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(desk.run)
        await anyio.wait_all_tasks_blocked()
        self._ledger = ledger
        return Box(self.folder, broker, desk, courier, ledger, said, now)

    async def __aexit__(self, *exc: object) -> None:
        self._tasks.cancel_scope.cancel()
        await self._tasks.__aexit__(None, None, None)
        self._ledger.close()


def kinds(ledger: Ledger) -> list[str]:
    return [str(record["kind"]) for record in ledger.tail(100)]


async def settled(box: Box) -> None:
    """Until the approved call's run, which goes on past the verdict's reply, has ended."""
    await anyio.wait_all_tasks_blocked()


# --- the approval's life ------------------------------------------------------------------------


async def test_an_approved_call_runs_once_after_its_verdict_is_recorded(box: Box) -> None:
    pending = await box.call("c1")
    assert isinstance(pending, Pending) and box.courier.ran == []
    assert isinstance(box.said[-1], ApprovalRequested)
    reply = await box.verdict(pending.approval, approve=True)
    assert reply == Settled("v", pending.approval, ApprovalState.APPROVED)
    done = await box.answer(pending.approval)
    assert isinstance(done, Done) and done.output == "ran c1"
    assert box.courier.ran == [("s", "c1")]
    assert kinds(box.ledger) == ["decision", "verdict", "executed"]
    assert isinstance(box.said[-1], ApprovalSettled)


async def test_a_refused_call_never_runs_and_is_answered_owner_denied(box: Box) -> None:
    pending = await box.call("c1")
    reply = await box.verdict(pending.approval, approve=False)
    assert reply == Settled("v", pending.approval, ApprovalState.REFUSED, DenyReason.OWNER_DENIED)
    assert await box.answer(pending.approval) == Denied(DenyReason.OWNER_DENIED)
    assert box.courier.ran == []


async def test_an_unanswered_approval_expires_by_the_desks_clock(box: Box) -> None:
    pending = await box.call("c1")
    box.now[0] += int(TTL_S * 1000) - 1
    await box.desk.expire_due()
    assert box.desk.approvals.get(pending.approval).state is ApprovalState.PENDING
    box.now[0] += 1
    await box.desk.expire_due()
    assert await box.answer(pending.approval) == Denied(DenyReason.APPROVAL_EXPIRED)
    late = await box.verdict(pending.approval, approve=True)
    assert isinstance(late, Error) and late.code is ErrorCode.ALREADY_SETTLED
    assert box.courier.ran == []


async def test_an_approval_is_redecided_and_a_denial_that_arose_meanwhile_wins(
    box: Box,
) -> None:
    pending = await box.call("c1")
    deny = f'tool = "shell"\nmode = "deny"\npath = "{box.folder / "work"}"\n'
    grants(box.folder, shell=deny)
    reply = await box.verdict(pending.approval, approve=True)
    assert isinstance(reply, Settled) and reply.state is ApprovalState.APPROVED
    assert reply.reason is DenyReason.DENIED_BY_GRANT
    assert await box.answer(pending.approval) == Denied(DenyReason.DENIED_BY_GRANT)
    assert box.courier.ran == []


async def test_a_session_wide_approval_covers_the_same_grant_in_that_session_only(
    box: Box,
) -> None:
    first = await box.call("c1")
    await box.verdict(first.approval, approve=True, scope=Scope.SESSION)
    await settled(box)
    assert isinstance(await box.call("c2"), Done)  # no question asked again
    assert isinstance(await box.call("c3", session="other"), Pending)
    assert box.courier.ran == [("s", "c1"), ("s", "c2")]


async def test_two_verdicts_at_once_settle_the_approval_once(box: Box) -> None:
    pending = await box.call("c1")
    replies: list[Any] = []

    async def say(approve: bool) -> None:
        replies.append(await box.verdict(pending.approval, approve=approve))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(say, True)
        tasks.start_soon(say, False)
    assert sum(isinstance(reply, Settled) for reply in replies) == 1
    assert [r.code for r in replies if isinstance(r, Error)] == [ErrorCode.ALREADY_SETTLED]
    assert kinds(box.ledger).count("verdict") == 1


# --- once, and after a restart -----------------------------------------------------------------


async def test_a_call_sent_again_gets_its_answer_and_runs_once(box: Box) -> None:
    first = await box.call("w1", tool="write_file")
    assert isinstance(first, Done)
    assert await box.call("w1", tool="write_file") == first
    assert box.courier.ran == [("s", "w1")]


async def test_after_a_restart_a_pending_approval_is_the_owners_and_answers_come_from_the_ledger(
    folder: Path,
) -> None:
    async with running_box(folder) as box:
        pending = await box.call("c1")
        assert isinstance(await box.call("w1", tool="write_file"), Done)
    async with running_box(folder) as again:
        assert await again.call("c1") == pending  # still waiting for the owner
        assert await again.call("w1", tool="write_file") == Failed(ALREADY_RAN)
        reply = await again.verdict(pending.approval, approve=True)
        assert isinstance(reply, Settled)
        assert isinstance(await again.answer(pending.approval), Done)
        assert again.courier.ran == [("s", "c1")]


# --- I5 ---------------------------------------------------------------------------------------


async def test_untrusted_content_makes_even_an_allowed_write_wait_for_the_owner(
    box: Box,
) -> None:
    labels = box.broker.labels
    labels.raise_("s", labels.read("s"), Label(DataClass.PRIVATE, True))
    answer = await box.call("w1", tool="write_file")
    assert isinstance(answer, Pending) and box.courier.ran == []


# --- a read-only shell (issue 15) --------------------------------------------------------------


async def test_a_shell_card_says_how_its_folder_is_bound_and_keeps_it_after_a_restart(
    folder: Path,
) -> None:
    read_only = shell_asks(folder) + "write = false\n"
    grants(folder, shell=read_only)
    async with running_box(folder) as box:
        pending = await box.call("c1")
        assert isinstance(pending, Pending)
        assert [a.info().write for a in box.desk.approvals.pending()] == [False]
        assert box.said[-1] == ApprovalRequested(box.desk.approvals.pending()[0].info())
    async with running_box(folder) as again:  # rebuilt from the ledger, the grant unchanged
        assert [a.info().write for a in again.desk.approvals.pending()] == [False]
    grants(folder, shell=shell_asks(folder))  # another version of the grant: not known
    async with running_box(folder) as changed:
        assert [a.info().write for a in changed.desk.approvals.pending()] == [None]
