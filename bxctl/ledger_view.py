"""What `bxctl status` and `bxctl up` say of the ledger (SPEC §7, issues 10 and 28): brokerd's
own word, asked of it now (`ledger_link`), never a copy that may be stale; the room on the
ledger's disk; and a line for each of the home's disks that is full. Pure: it is given what
was asked and measured, and only says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bxcore.home import disk
from bxcore.wire.messages import LedgerStatus, ServiceInfo, ServiceState

FREE_SOME_SPACE = "free some space (`bxctl logs` and docs/operations.md say what grows)"


@dataclass(frozen=True)
class LedgerView:
    """The ledger's state: brokerd's word (`ok`, `loading`, `failed`, `broken`, `closed`), or
    `unknown` when brokerd does not run or did not answer; with the room on its disk (`free`,
    under `folder`) when brokerd said it."""

    state: str
    problem: str | None = None
    seq: int | None = None
    free: int | None = None
    folder: Path | None = None

    @property
    def full(self) -> bool:
        """The ledger's disk is full: a record may not fit, and its call is then denied."""
        return disk.is_full(self.free)

    @property
    def bad(self) -> bool:
        """Not ok, or ok on a full disk: `status` exits 3. Unknown alone is not bad."""
        return self.state not in ("ok", "unknown") or self.full

    def json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "problem": self.problem,
            "seq": self.seq,
            "free": self.free,
            "full": self.full,
        }

    def line(self) -> tuple[str, str]:
        """The line `status` prints, and its style."""
        why = f": {self.problem}" if self.problem else ""
        if self.state == "ok" and self.full:
            where = disk.full(self.folder or Path("?"), self.free)
            return (
                f"ledger at risk (seq {self.seq}): disk full: {where}: a call is denied "
                f"audit_unavailable as soon as its record does not fit; {FREE_SOME_SPACE}",
                "red",
            )
        if self.state == "ok":
            return f"ledger ok (seq {self.seq})", "green"
        if self.state == "loading":
            return f"ledger loading{why}: calls wait until it is read", "yellow"
        if self.state == "unknown":
            return f"ledger state unknown{why}", "yellow"
        if self.state == "failed":
            then = (
                f"{FREE_SOME_SPACE}: brokerd writes again by itself"
                if self.full or (self.problem and " is full" in self.problem)
                else "see `bxctl logs brokerd`"
            )
            return f"ledger failed{why}: every call is denied audit_unavailable; {then}", "red"
        if self.state == "broken":
            return (
                f"ledger broken{why}: every call is denied audit_unavailable until the owner "
                "decides: `bxctl audit verify` shows it, `bxctl audit accept` takes it as it is",
                "red",
            )
        return f"ledger {self.state}{why}", "red"

    def up_problem(self) -> str | None:
        """The one line `bxctl up` fails with when the box cannot run a call (None: it can)."""
        if self.state in ("failed", "broken") or (self.state == "ok" and self.full):
            return self.line()[0]
        return None


def ledger_view(
    answer: LedgerStatus | str | None, brokerd: ServiceInfo | None, folder: Path
) -> LedgerView | None:
    """What `status` says of the ledger: `answer` is brokerd's (or why there is none);
    `brokerd`, its service, None when this box has none (no line then); `folder`, where the
    ledger is."""
    if brokerd is None:
        return None
    if brokerd.state is not ServiceState.RUNNING:
        return LedgerView("unknown", "brokerd is not running")
    if not isinstance(answer, LedgerStatus):
        return LedgerView("unknown", answer or "brokerd did not say")
    return LedgerView(answer.state.value, answer.problem, answer.seq, answer.free, folder)


def disk_lines(disks: list[disk.Disk]) -> list[str]:
    """`disk full: …` for each full disk of the home's."""
    return [f"disk full: {place.sentence()}; {FREE_SOME_SPACE}" for place in disks if place.full]


def disk_json(disks: list[disk.Disk]) -> list[dict[str, Any]]:
    return [
        {"folder": str(d.folder), "holds": list(d.holds), "free": d.free, "full": d.full}
        for d in disks
    ]
