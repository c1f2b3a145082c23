"""A job's least privilege (SPEC §19, issue 16): the sessions of a job's run (`job-<id>-<n>`
and their sub-agents) are decided against only the grants the job's file names.

`scope_of` turns what brokerd read of the job's file into a `JobScope`; `decide` and
`redecide` are `policy`'s confined to it (`confine`). A call is decided on all of the owner's
grants first, so that everything a grant means for every session still holds in a job's (a deny, a
narrower `ask`, what a sandbox covers and the label of what it shows); then the grant that
decided it must be one the job names, else the call is `no_grant`. So a job's run can never
do more than the owner's own session could, and only through its own grants. An invalid deny
that denies a whole tool (`core.grant_check`) denies it in a job's run too, and says so.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set

from bxcore import mcp_tools
from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.ids import job_run_of
from bxcore.jobs.job import InvalidJob, Job, check_grants
from bxcore.labels import Label
from services.brokerd.core import policy
from services.brokerd.core.grant_check import NO_BLOCKS
from services.brokerd.core.grants import Grant, InvalidGrant
from services.brokerd.core.owner_words import NO_WORDS, Words
from services.brokerd.core.view import NO_PLACES, OwnPlaces

Note = Callable[[Callable[[], str]], None]


@frozen
class JobScope:
    """The grants a job's run may use: `grants` (none when `problem` says why: a missing or
    invalid job file gives no grant at all)."""

    job: str
    run: int
    grants: frozenset[str] = frozenset()
    problem: str | None = None

    def describe(self) -> str:
        """One line for `explain` and the approval cards."""
        head = f"job {self.job}'s run {self.run}"
        if self.problem is not None:
            return f"{head}: no grant at all ({self.problem})"
        if not self.grants:
            return f"{head}: the job names no grant, so no call is allowed"
        return f"{head}: sees only the grants {', '.join(sorted(self.grants))}"


def scope_of(session: str, job: Job | InvalidJob | None, known: Set[str]) -> JobScope | None:
    """The scope of `session`: None for a session that is no job's run; else the grants of
    `job` (what the job's file holds, None when there is no file), checked against `known`,
    the ids of the owner's valid grants (a job naming a missing grant is invalid, §19)."""
    run = job_run_of(session)
    if run is None:
        return None
    job_id, n = run
    if job is None:
        return JobScope(job_id, n, problem=f"there is no job file {job_id}.toml")
    if job.id != job_id:
        raise ValueError(f"job {job.id!r} given for session {session!r}")
    checked = check_grants(job, known)
    if isinstance(checked, InvalidJob):
        return JobScope(job_id, n, problem=f"the job is invalid: {checked.problem}")
    return JobScope(job_id, n, frozenset(checked.grants))


def confine(decision: policy.Decision, scope: JobScope, note: Note) -> policy.Decision:
    """`decision`, or `no_grant` when the grant that decided it is not one of the job's. A
    denial no grant decided (an unknown tool, invalid arguments, no match, a protected place)
    stands as it is, and so does one by an invalid deny, which denies for every session."""
    deciding = decision.grant if isinstance(decision, policy.Denied) else decision.winner
    if deciding is None or isinstance(deciding, InvalidGrant) or deciding.id in scope.grants:
        return decision
    note(lambda: f"{deciding.id} is not one of the job's grants: no_grant")
    return policy.Denied(DenyReason.NO_GRANT, args=decision.args)


def decide(
    label: Label,
    tool: str,
    arguments: str,
    grants: Sequence[Grant],
    scope: JobScope | None,
    trace: list[str] | None = None,
    own: OwnPlaces = NO_PLACES,
    mcp: mcp_tools.Catalog = mcp_tools.NO_TOOLS,
    blocked: Mapping[str, InvalidGrant] = NO_BLOCKS,
    words: Words = NO_WORDS,
) -> policy.Decision:
    """`policy.decide` on all of `grants`, then, for a job's run, `confine`d to its scope;
    the scope is the trace's first step."""

    def note(words: Callable[[], str]) -> None:
        if trace is not None:
            trace.append(words())

    if scope is not None:
        note(lambda: f"session of {scope.describe()}")
    decision = policy.decide(
        label, tool, arguments, grants, trace, own, mcp, blocked=blocked, words=words
    )
    return decision if scope is None else confine(decision, scope, note)


def redecide(
    label: Label,
    tool: str,
    arguments: str,
    grants: Sequence[Grant],
    scope: JobScope | None,
    own: OwnPlaces = NO_PLACES,
    mcp: mcp_tools.Catalog = mcp_tools.NO_TOOLS,
    blocked: Mapping[str, InvalidGrant] = NO_BLOCKS,
    words: Words = NO_WORDS,
) -> policy.Allowed | policy.Denied:
    """`policy.redecide` confined as `decide`: an approval never widens a job's grants."""
    decision = decide(
        label, tool, arguments, grants, scope, own=own, mcp=mcp, blocked=blocked, words=words
    )
    if isinstance(decision, policy.Ask):
        return policy.approved(decision, grants, own)
    return decision
