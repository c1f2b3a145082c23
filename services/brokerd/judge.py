"""The facts a decision is made of (SPEC §5.2): the session's label (`StateStore`), the grants
as they are now (`GrantsFolder`), checked against the owner's pins (`grant_check`), boxmaker's
own places, and for a job's run the grants its job names (`JobFolder`, §19); and the decision
on them (`job_scope.decide`, which is `policy.decide` confined to a job's grants). Shared by
the broker socket, the desk, the admin socket's grant list and `explain`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from bxcore import mcp_tools
from bxcore.labels import Label
from services.brokerd.core import grant_check, job_scope, policy
from services.brokerd.core.grant_check import CheckedGrants
from services.brokerd.core.grants import GrantSet
from services.brokerd.core.job_scope import JobScope
from services.brokerd.core.owner_words import NO_WORDS, Words
from services.brokerd.core.targets import UNKNOWN, Seen, Target
from services.brokerd.core.view import NO_PLACES, OwnPlaces
from services.brokerd.grants_folder import GrantsFolder
from services.brokerd.job_folder import JobFolder
from services.brokerd.state import StateStore

log = logging.getLogger(__name__)


class Judge:
    def __init__(
        self,
        labels: StateStore,
        grants: GrantsFolder,
        own: OwnPlaces = NO_PLACES,
        mcp: Callable[[], mcp_tools.Catalog] = lambda: mcp_tools.NO_TOOLS,
        jobs: JobFolder | None = None,
        words: Callable[[str], Words] = lambda session: NO_WORDS,
        seen: Callable[[str, str], Seen | None] = lambda session, text: None,
    ) -> None:
        self.labels = labels
        self.grants = grants
        self.own = own  # boxmaker's own places: never a tool's, whatever the grants say
        self.mcp = mcp  # the MCP tools as they are now (§18.3)
        # the jobs folder beside the grants folder, as `Home` lays them out (§2.2)
        self.jobs = jobs if jobs is not None else JobFolder(Path(grants.folder).parent / "jobs")
        self.words = words  # the owner's words of a session (§20)
        self.seen = seen  # the call whose untrusted result first held a text, if kept
        # the last check of the grants, with no pins (built-in tools) and with the pins now
        self._checked: dict[bool, tuple[GrantSet, mcp_tools.Catalog, CheckedGrants]] = {}
        self._told: set[tuple[str, str, str]] = set()

    def _words(self, session: str, label: Label) -> Words:
        """The session's owner's words, looked up only where they can matter (§20)."""
        return self.words(session) if label.untrusted else NO_WORDS

    def traced(self, session: str, decision: policy.Decision) -> policy.Decision:
        """`decision` with each target the owner did not give named by the result it first
        appeared in (`untrusted: call <id>`), where a kept result holds it (§20)."""
        if not isinstance(decision, policy.Ask) or not any(
            t.origin == UNKNOWN for t in decision.targets
        ):
            return decision
        return dataclasses.replace(
            decision, targets=tuple(self._origin(session, t) for t in decision.targets)
        )

    def _origin(self, session: str, target: Target) -> Target:
        if target.origin != UNKNOWN or isinstance(target.value, bool):
            return target
        seen = self.seen(session, str(target.value))
        if seen is None:
            return target
        return dataclasses.replace(target, origin=seen.origin(session), tool=seen.tool)

    def __repr__(self) -> str:
        return f"Judge({self.labels!r}, {self.grants!r}, {self.jobs!r})"

    def scope(self, session: str) -> JobScope | None:
        """The grants a job's run may use (§19); None for any other session."""
        return self.jobs.scope(session, self.grants.current().valid)

    def mcp_for(self, tool: str) -> mcp_tools.Catalog:
        """The MCP tools a call of `tool` is decided against: none for a built-in tool, which
        `policy.decide` decides without them, so its decision never looks at the pins."""
        return self.mcp() if mcp_tools.split_name(tool) is not None else mcp_tools.NO_TOOLS

    def checked(self, mcp: mcp_tools.Catalog) -> CheckedGrants:
        """The grants now, checked against the pins of `mcp` (`grant_check`): made again only
        when the grants or the catalog changed (each is a new object then), never per call.
        A built-in tool's decision gets the check without pins, which is all it needs: no
        MCP grant covers a built-in tool, and what blocks one does not depend on pins."""
        grants = self.grants.current()
        held = self._checked.get(mcp is mcp_tools.NO_TOOLS)
        if held is not None and held[0] is grants and held[1] is mcp:
            return held[2]
        checked = grant_check.check(grants, mcp.pins)
        self._checked[mcp is mcp_tools.NO_TOOLS] = (grants, mcp, checked)
        for invalid in checked.found:  # the parser's findings are the folder's to log
            if (invalid.id, invalid.sha256, invalid.problem) not in self._told:
                self._told.add((invalid.id, invalid.sha256, invalid.problem))
                log.warning("%s", grant_check.said(invalid))
        return checked

    def decide(self, session: str, tool: str, arguments: str) -> tuple[Label, policy.Decision]:
        """The session's label and the decision on it; `StateError` when the label cannot
        be read."""
        label = self.labels.read(session)
        mcp = self.mcp_for(tool)
        checked = self.checked(mcp)
        scope = self.jobs.scope(session, self.grants.current().valid)
        decision = job_scope.decide(
            label, tool, arguments, checked.valid, scope, None, self.own, mcp, checked.blocked,
            self._words(session, label),
        )  # fmt: skip
        return label, self.traced(session, decision)

    def redecide(self, session: str, tool: str, arguments: str) -> policy.Decision:
        """An approved call decided again now (§9.2); `StateError` as `decide`."""
        label = self.labels.read(session)
        mcp = self.mcp_for(tool)
        checked = self.checked(mcp)
        scope = self.jobs.scope(session, self.grants.current().valid)
        words = self._words(session, label)
        return job_scope.redecide(
            label, tool, arguments, checked.valid, scope, self.own, mcp, checked.blocked, words
        )

    def approved(self, ask: policy.Ask) -> policy.Allowed:
        """What a call the owner approved for its whole session runs as (§9.2)."""
        return policy.approved(ask, self.grants.current().valid, self.own)

    def explain(
        self, session: str, label: Label, tool: str, arguments: str, trace: list[str]
    ) -> policy.Decision:
        """`decide` with every step written to `trace`, and nothing else touched."""
        mcp = self.mcp_for(tool)
        checked = self.checked(mcp if mcp is not mcp_tools.NO_TOOLS else self.mcp())
        never = [g.id for g in checked.invalid if not g.denies]
        if never:
            trace.append(f"invalid grants, never matching: {', '.join(never)}")
        denying = [f"{g.id} ({', '.join(g.denies)})" for g in checked.invalid if g.denies]
        if denying:
            trace.append(
                "invalid deny grants, each denying every call of what it names until it is "
                f"mended: {', '.join(denying)}"
            )
        scope = self.jobs.scope(session, self.grants.current().valid)
        decision = job_scope.decide(
            label, tool, arguments, checked.valid, scope, trace, self.own, mcp, checked.blocked,
            self._words(session, label),
        )  # fmt: skip
        traced = self.traced(session, decision)
        if isinstance(traced, policy.Ask) and traced is not decision:
            said = "; ".join(target.said() for target in traced.targets)
            trace.append(f"where each target came from: {said}")
        return traced
