"""What brokerd remembers of each call (I8): the answer being made, and answers already given.

A call is named by (session, call). While its answer is being made, a repeat waits for the
same answer; once made, the answer is kept (the newest ones, within a byte budget) so a
repeat gets it again; older answers are rebuilt from the ledger's records by `replay`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import anyio

from bxcore.deny import DenyReason
from bxcore.messages import Denied, Done, Failed, Outcome, Pending
from services.brokerd.core import args as argsmod
from services.brokerd.index import CallRecords

Key = tuple[str, str]

ALREADY_RAN = "this call already ran; its output is no longer held"
UNKNOWN = "the outcome of this call is unknown after a restart"
MAX_KEPT_BYTES = 64 * 1024 * 1024


class Answer:
    """An answer being made; every asker waits for the one answer. The event is made only
    when a repeat comes to wait: most calls are asked once."""

    __slots__ = ("_done", "outcome")

    def __init__(self) -> None:
        self._done: anyio.Event | None = None
        self.outcome: Outcome | None = None

    def give(self, outcome: Outcome) -> None:
        self.outcome = outcome
        if self._done is not None:
            self._done.set()

    async def wait(self) -> Outcome:
        if self.outcome is None:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        assert self.outcome is not None
        return self.outcome


class Calls:
    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._making: dict[Key, Answer] = {}
        self._answers: OrderedDict[Key, Outcome] = OrderedDict()
        self._bytes = 0

    def __repr__(self) -> str:
        return f"Calls({len(self._making)} in flight, {len(self._answers)} answers kept)"

    def making(self, key: Key) -> Answer | None:
        return self._making.get(key)

    def start(self, key: Key) -> Answer:
        answer = Answer()
        self._making[key] = answer
        return answer

    def finish(self, key: Key, outcome: Outcome) -> None:
        """The call's answer is made: keep it (unless it only says pending) and wake waiters."""
        answer = self._making.pop(key, None)
        if not isinstance(outcome, Pending):
            self._keep(key, outcome)
        if answer is not None:
            answer.give(outcome)

    def kept(self, key: Key) -> Outcome | None:
        return self._answers.get(key)

    def _keep(self, key: Key, outcome: Outcome) -> None:
        size = len(outcome.output) if isinstance(outcome, Done) else 0
        old = self._answers.pop(key, None)
        if isinstance(old, Done):
            self._bytes -= len(old.output)
        self._answers[key] = outcome
        self._bytes += size
        while len(self._answers) > self._kept or self._bytes > MAX_KEPT_BYTES:
            _, dropped = self._answers.popitem(last=False)
            if isinstance(dropped, Done):
                self._bytes -= len(dropped.output)


def replay(records: CallRecords) -> Outcome:
    """The recorded answer of a call decided earlier whose answer is no longer kept."""
    decision = records.decision
    if decision["outcome"] == "denied":
        reason = DenyReason(str(decision["reason"]))
        return Denied(reason, _detail(decision) if reason is DenyReason.INVALID_ARGUMENTS else None)
    verdict = records.verdict
    if decision["outcome"] == "pending":
        if verdict is None:
            return Pending(str(decision["approval"]))
        if verdict["outcome"] == "denied":
            return Denied(DenyReason(str(verdict["reason"])))
    return Failed(ALREADY_RAN if records.executed is not None else UNKNOWN)


def _detail(decision: Mapping[str, object]) -> str | None:
    """The detail of an invalid call, found again from the arguments the ledger kept."""
    try:
        argsmod.parse(str(decision["tool"]), str(decision["arguments"]))
    except argsmod.ArgsError as error:
        return error.detail()
    except ValueError:
        return None
    return None
