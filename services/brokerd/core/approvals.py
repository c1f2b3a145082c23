"""Approvals (SPEC §9) as data: each is `pending` until the owner approves or refuses it, or
it expires; a table says which moves exist, and nothing else moves an approval.

Pure: no I/O, no clock (`now_ms` is passed in) and no randomness (ids are drawn by the caller
through `new_id`). brokerd rebuilds the pending ones and the session scopes from the ledger at
start; of the settled ones it keeps the newest (`forget_settled`), the ledger has the rest.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Iterable
from dataclasses import replace

from bxcore.clock import rfc3339
from bxcore.frozen import frozen
from bxcore.labels import Label
from bxcore.wire.messages import ApprovalInfo, ApprovalState, AskWhy, TargetInfo

ALPHABET = "abcdefghijklmnopqrstuvwxyz23456789"
ID_LENGTH = 8
KEPT_SETTLED = 10_000  # settled approvals kept in memory; older ones are read from the ledger


class Move(enum.StrEnum):
    APPROVE = "approve"
    REFUSE = "refuse"
    EXPIRE = "expire"


#: The whole life of an approval: (state, move) -> next state. Anything else is refused.
TABLE: dict[tuple[ApprovalState, Move], ApprovalState] = {
    (ApprovalState.PENDING, Move.APPROVE): ApprovalState.APPROVED,
    (ApprovalState.PENDING, Move.REFUSE): ApprovalState.REFUSED,
    (ApprovalState.PENDING, Move.EXPIRE): ApprovalState.EXPIRED,
}


class AlreadySettled(Exception):
    pass


class UnknownApproval(Exception):
    pass


def random_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


@frozen
class Approval:
    id: str
    session: str
    call: str
    tool: str
    arguments: str  # canonical: exactly what runs if the owner approves
    grant: str
    grant_sha256: str
    label: Label
    why: AskWhy
    requested_ms: int
    expires_ms: int
    state: ApprovalState = ApprovalState.PENDING
    preview: str | None = None  # write_file: what it would change (§12.2), not in the ledger
    write: bool | None = None  # shell: whether its winner binds the folder writable (issue 15)
    job: str | None = None  # a job's run: whose, and the grants it sees (§19), not in the ledger
    targets: tuple[TargetInfo, ...] | None = None  # asked because untrusted: each target (§20)

    def info(self) -> ApprovalInfo:
        return ApprovalInfo(
            self.id,
            self.session,
            self.call,
            self.tool,
            self.arguments,
            self.grant,
            self.label,
            self.why,
            rfc3339(self.requested_ms),
            rfc3339(self.expires_ms),
            self.preview,
            self.write,
            self.job,
            self.targets,
        )

    def __repr__(self) -> str:
        return f"Approval({self.id} {self.state}: {self.tool} for {self.session}/{self.call})"


class Approvals:
    """Every approval brokerd knows, and the session-scoped approvals (§9.2)."""

    def __init__(self, new_id: Callable[[], str] = random_id) -> None:
        self._new_id = new_id
        self._all: dict[str, Approval] = {}
        self._settled = 0  # how many of `_all` are settled
        self._scopes: dict[tuple[str, str, str], str] = {}  # (session, grant, sha) -> approval

    def __repr__(self) -> str:
        return f"Approvals({len(self.pending())} pending of {len(self._all)})"

    def fresh_id(self, taken: Callable[[str], bool] = lambda _: False) -> str:
        """A new approval id, used by no approval here nor, per `taken`, ever before."""
        while True:
            candidate = self._new_id()
            if candidate not in self._all and not taken(candidate):
                return candidate

    def add(self, approval: Approval) -> None:
        old = self._all.get(approval.id)
        if old is not None and old.state is not ApprovalState.PENDING:
            self._settled -= 1
        self._all[approval.id] = approval
        if approval.state is not ApprovalState.PENDING:
            self._settled += 1

    def get(self, approval_id: str) -> Approval:
        try:
            return self._all[approval_id]
        except KeyError:
            raise UnknownApproval(f"no approval {approval_id}") from None

    def pending(self) -> list[Approval]:
        return [a for a in self._all.values() if a.state is ApprovalState.PENDING]

    def move(self, approval_id: str, move: Move) -> Approval:
        """Apply `move` by the table; AlreadySettled when the approval has left `pending`."""
        current = self.get(approval_id)
        state = TABLE.get((current.state, move))
        if state is None:
            raise AlreadySettled(f"approval {approval_id} is already {current.state}")
        moved = replace(current, state=state)
        del self._all[approval_id]  # to the end: the dict's order is the order of settling
        self._all[approval_id] = moved
        self._settled += 1
        return moved

    def forget_settled(self, keep: int = KEPT_SETTLED) -> list[str]:
        """Drop the oldest settled approvals beyond `keep` (the ledger still has them);
        their ids."""
        dropped: list[str] = []
        if self._settled <= keep:
            return dropped
        for approval_id, approval in list(self._all.items()):
            if self._settled <= keep:
                break
            if approval.state is not ApprovalState.PENDING:
                del self._all[approval_id]
                self._settled -= 1
                dropped.append(approval_id)
        return dropped

    def due(self, now_ms: int) -> list[Approval]:
        """The pending approvals whose time is up."""
        return [a for a in self.pending() if a.expires_ms <= now_ms]

    def next_expiry(self) -> int | None:
        times = [a.expires_ms for a in self.pending()]
        return min(times) if times else None

    def remember_scope(self, approval: Approval) -> None:
        """A session-scoped approval covers later asks of the same grant version (§9.2)."""
        if approval.why is AskWhy.GRANT_ASKS:
            self._scopes[(approval.session, approval.grant, approval.grant_sha256)] = approval.id

    def covering(self, session: str, grant: str, sha256: str, why: AskWhy) -> str | None:
        """The session-scoped approval that covers this ask, if any; never an untrusted one."""
        if why is not AskWhy.GRANT_ASKS:
            return None
        return self._scopes.get((session, grant, sha256))

    def load(self, approvals: Iterable[Approval]) -> None:
        for approval in approvals:
            self.add(approval)
