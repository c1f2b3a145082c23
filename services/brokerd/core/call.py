"""One tool call's life (SPEC §1 I1 I3 I8, §5–§9) as a table of (phase, event) -> step, in the
spirit of h11's state machine: pure, no I/O, no clock. The shell (`services.brokerd.driver`)
carries out the effects of each step in order and feeds back what they produced.

    arrived --found--> judging --decided--> recording --durable--> running --ran--> raising
       |                  |                     |                     |               |
       +--> answered      +--> answered         +--> pending          +--> closing <--+
                                                |      |                       |
                                                +------+--verdict/expired--> settling
                                                                              --durable-->
                                                                              running | answered

The order the invariants depend on is this table's: a decision is made durable before
anything runs (I1); the session is raised by what ran before that is recorded, and both
before the answer (I3); a call found in the ledger is answered from it and never decided or
run again (I8); a verdict is durable before anything follows from it (§9).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from bxcore import state_table
from bxcore.deny import DenyReason
from bxcore.labels import CLEAN, Label
from bxcore.wire import codec as wire
from bxcore.wire.messages import ApprovalState, Denied, Done, Failed, Outcome, Pending, Scope, short
from services.brokerd.core import policy, records
from services.brokerd.core.approvals import Move
from services.brokerd.core.call_events import (
    Answer,
    Ask,
    Decided,
    Effect,
    Event,
    Found,
    Kind,
    NotRaised,
    Raise,
    Raised,
    Ran,
    Record,
    Refuse,
    Run,
    Settle,
    Unlabelled,
    Verdict,
)
from services.brokerd.core.grants import Grant, InvalidGrant
from services.brokerd.core.records import Entry
from services.brokerd.core.replay import replay
from services.brokerd.core.targets import Target

AUDIT_UNAVAILABLE = Denied(DenyReason.AUDIT_UNAVAILABLE)
NOT_RECORDED = "the call ran, but the audit log cannot record it, so its output is held"
EXPIRED_BY = "brokerd (no answer in time)"
#: Room left in a 4 MiB frame for everything in a response but the output.
MAX_OUTPUT_JSON = wire.MAX_MESSAGE - 64 * 1024


class Phase(enum.StrEnum):
    ARRIVED = "arrived"  # asked; the shell looks for an earlier record of the call
    JUDGING = "judging"  # never decided: the shell reads the label and decides
    RECORDING = "recording"  # the decision is being made durable
    RUNNING = "running"  # allowed, and durably so: the runner runs it
    RAISING = "raising"  # it ran: the session is being raised by what it read
    CLOSING = "closing"  # the execution (and the raise) is being made durable
    PENDING = "pending"  # recorded pending: the owner decides
    SETTLING = "settling"  # the owner's verdict, or the expiry, is being made durable
    ANSWERED = "answered"  # the call's answer is final


# --- the call ---------------------------------------------------------------------------------


class Call(NamedTuple):
    """One call's state. `arguments`: as the ledger keeps them, once decided. A named tuple,
    not a dataclass: a step makes a new one (`_replace`, which mypy checks field by field;
    three of them a denied call), for a fraction of what `dataclasses.replace` costs (1.7
    against 8.7 µs)."""

    session: str
    call: str
    tool: str
    arguments: str
    phase: Phase = Phase.ARRIVED
    label: Label | None = None  # the session's label when decided
    decision: policy.Decision | None = None
    approval: str | None = None
    allowed: policy.Allowed | None = None  # what runs
    settling: Settle | None = None  # what a durable verdict settles
    execution: Entry | None = None  # the `executed` record, while the session is raised
    started: bool = False  # a sandbox started: the tool may have read what the grant shows
    answer: Outcome | None = None  # what is answered once the execution is durable

    @property
    def key(self) -> tuple[str, str]:
        return (self.session, self.call)


def pending_again(approval: str, session: str, call: str, tool: str, arguments: str) -> Call:
    """A call recorded pending before a restart, waiting for the owner again."""
    return Call(session, call, tool, arguments, Phase.PENDING, approval=approval)


Step = tuple[Call, list[Effect]]


class Rule(enum.Enum):
    """A cell whose step depends on the event's data."""

    ANSWER_FOUND = "answer_found"
    ANSWER_UNAVAILABLE = "answer_unavailable"
    RECORD_DECISION = "record_decision"
    ANSWER_UNLABELLED = "answer_unlabelled"
    FOLLOW_DECISION = "follow_decision"
    CLOSE_RUN = "close_run"
    RECORD_EXECUTION = "record_execution"
    ANSWER_NOT_RAISED = "answer_not_raised"
    ANSWER_CLOSED = "answer_closed"
    ANSWER_NOT_CLOSED = "answer_not_closed"
    RECORD_VERDICT = "record_verdict"
    RECORD_EXPIRY = "record_expiry"
    FOLLOW_VERDICT = "follow_verdict"
    STAY_PENDING = "stay_pending"
    BEING_SETTLED = "being_settled"
    ALREADY_SETTLED = "already_settled"
    IGNORE = "ignore"


class Unexpected(Exception):
    """An event that cannot happen in this phase: the shell's mistake, never the peer's."""


_P = Phase
_K = Kind
TABLE: Mapping[tuple[Phase, Kind], Rule] = MappingProxyType(
    {
        (_P.ARRIVED, _K.FOUND): Rule.ANSWER_FOUND,
        (_P.ARRIVED, _K.UNAVAILABLE): Rule.ANSWER_UNAVAILABLE,
        (_P.JUDGING, _K.DECIDED): Rule.RECORD_DECISION,
        (_P.JUDGING, _K.UNLABELLED): Rule.ANSWER_UNLABELLED,
        (_P.RECORDING, _K.DURABLE): Rule.FOLLOW_DECISION,
        (_P.RECORDING, _K.NOT_DURABLE): Rule.ANSWER_UNAVAILABLE,
        (_P.RUNNING, _K.RAN): Rule.CLOSE_RUN,
        (_P.RAISING, _K.RAISED): Rule.RECORD_EXECUTION,
        (_P.RAISING, _K.NOT_RAISED): Rule.ANSWER_NOT_RAISED,
        (_P.CLOSING, _K.DURABLE): Rule.ANSWER_CLOSED,
        (_P.CLOSING, _K.NOT_DURABLE): Rule.ANSWER_NOT_CLOSED,
        (_P.PENDING, _K.VERDICT): Rule.RECORD_VERDICT,
        (_P.PENDING, _K.EXPIRED): Rule.RECORD_EXPIRY,
        (_P.SETTLING, _K.DURABLE): Rule.FOLLOW_VERDICT,
        (_P.SETTLING, _K.NOT_DURABLE): Rule.STAY_PENDING,
        (_P.SETTLING, _K.VERDICT): Rule.BEING_SETTLED,
        (_P.SETTLING, _K.EXPIRED): Rule.IGNORE,  # the owner's verdict is being recorded
        (_P.RUNNING, _K.VERDICT): Rule.ALREADY_SETTLED,
        (_P.RAISING, _K.VERDICT): Rule.ALREADY_SETTLED,
        (_P.CLOSING, _K.VERDICT): Rule.ALREADY_SETTLED,
        (_P.ANSWERED, _K.VERDICT): Rule.ALREADY_SETTLED,
        (_P.RUNNING, _K.EXPIRED): Rule.IGNORE,
        (_P.RAISING, _K.EXPIRED): Rule.IGNORE,
        (_P.CLOSING, _K.EXPIRED): Rule.IGNORE,
        (_P.ANSWERED, _K.EXPIRED): Rule.IGNORE,
    }
)


def step(call: Call, event: Event) -> Step:
    """The call after `event`, and the effects the shell must carry out, in order. At most
    one effect feeds an event back (`Record`, `Run`, `Raise`), and it comes last."""
    rule = _STEPS.get((call.phase, event.KIND))
    if rule is None:
        raise Unexpected(f"{event.KIND} in phase {call.phase} of {call.key}")
    return rule(call, event)


def _answer(call: Call, outcome: Outcome) -> Step:
    return call._replace(phase=Phase.ANSWERED, answer=outcome), [Answer(outcome)]


def _answer_found(call: Call, event: Event) -> Step:
    assert isinstance(event, Found)
    if event.records is None:
        return call._replace(phase=Phase.JUDGING), []
    return _answer(call, replay(event.records, event.mcp))


def _answer_unavailable(call: Call, event: Event) -> Step:
    return _answer(call, AUDIT_UNAVAILABLE)


def _record_decision(call: Call, event: Event) -> Step:
    assert isinstance(event, Decided)
    decision = event.decision
    canonical = decision.args.canonical_json() if decision.args is not None else None
    call = call._replace(
        phase=Phase.RECORDING,
        arguments=records.ledger_arguments(call.arguments, canonical),
        label=event.label,
        decision=decision,
        approval=event.approval,
    )
    if isinstance(decision, policy.Denied):
        entry = _decision(call, "denied", decision.grant, reason=decision.reason.value)
    elif isinstance(decision, policy.Allowed):
        entry = _decision(call, "allowed", decision.winner, decision.targets)
        call = call._replace(allowed=decision)
    elif event.covered is not None:  # a session-scoped approval covers it: allowed, under it
        targets = decision.targets
        entry = _decision(call, "allowed", decision.winner, targets, approval=event.approval)
        call = call._replace(allowed=event.covered)
    else:
        why = decision.why.value
        entry = _decision(
            call, "pending", decision.winner, decision.targets, approval=event.approval, why=why
        )
    return call, [Record((entry,))]


def _decision(
    call: Call,
    outcome: records.DecisionOutcome,
    grant: Grant | InvalidGrant | None,
    targets: tuple[Target, ...] = (),
    **more: str | None,
) -> Entry:
    assert call.label is not None
    return records.decision(
        targets=[{"at": t.at, "origin": t.origin} for t in targets] if targets else None,
        session=call.session,
        call=call.call,
        tool=call.tool,
        arguments=call.arguments,
        label=call.label,
        outcome=outcome,
        grant=grant.id if grant else None,
        grant_sha256=grant.sha256 if grant else None,
        **more,
    )


def _answer_unlabelled(call: Call, event: Event) -> Step:
    assert isinstance(event, Unlabelled)
    return _answer(call, Failed(short(f"the session's label cannot be read: {event.why}")))


def _follow_decision(call: Call, event: Event) -> Step:
    decision = call.decision
    if isinstance(decision, policy.Denied):
        return _answer(call, Denied(decision.reason, decision.detail))
    if call.allowed is not None:
        return call._replace(phase=Phase.RUNNING), [Run(call.allowed)]
    assert isinstance(decision, policy.Ask) and call.approval is not None and call.label
    return call._replace(phase=Phase.PENDING, answer=Pending(call.approval)), [
        Ask(call.approval, decision, call.label),
        Answer(Pending(call.approval)),
    ]


def _close_run(call: Call, event: Event) -> Step:
    """A run that failed before any sandbox started is recorded and answered as it is; one
    that started raises the session by the winner's label first, whatever the outcome."""
    assert isinstance(event, Ran) and call.allowed is not None
    if event.error is not None and not event.started:
        entry = records.executed(
            session=call.session, call=call.call, ok=False, exit_code=event.exit, ms=event.ms
        )
        answer = Failed(short(event.error))  # it may quote a long path
        return call._replace(phase=Phase.CLOSING, answer=answer), [Record((entry,))]
    label = call.allowed.label or event.label or CLEAN
    failed = event.error is not None
    output = "" if failed else fit_output(event.output)
    data = output.encode("utf-8", "replace")
    execution = records.executed(
        session=call.session,
        call=call.call,
        ok=event.ok and not failed,
        exit_code=event.exit,
        output_sha256=None if failed else hashlib.sha256(data).hexdigest(),
        output_bytes=None if failed else len(data),
        label=label,
        ms=event.ms,
    )
    outcome: Outcome = Failed(short(event.error or "")) if failed else Done(event.ok, output, label)
    call = call._replace(phase=Phase.RAISING, answer=outcome, execution=execution, started=True)
    return call, [Raise(label)]


def _record_execution(call: Call, event: Event) -> Step:
    assert isinstance(event, Raised) and call.execution is not None
    entries = [call.execution]
    if event.after != event.before:
        entries.append(records.raised(session=call.session, from_=event.before, to=event.after))
    return call._replace(phase=Phase.CLOSING, execution=None), [Record(tuple(entries))]


def _answer_not_raised(call: Call, event: Event) -> Step:
    assert isinstance(event, NotRaised)
    text = f"the session's label cannot be raised, so the output is held: {event.why}"
    return _answer(call._replace(execution=None), Failed(short(text)))


def _answer_closed(call: Call, event: Event) -> Step:
    assert call.answer is not None
    return _answer(call, call.answer)


def _answer_not_closed(call: Call, event: Event) -> Step:
    """What ran in a sandbox is held when its record cannot be written; a run that never
    started has nothing to hold."""
    assert call.answer is not None
    return _answer(call, Failed(NOT_RECORDED) if call.started else call.answer)


def _record_verdict(call: Call, event: Event) -> Step:
    assert isinstance(event, Verdict) and call.approval is not None
    approval, scope = call.approval, event.scope
    decision = event.decision
    if not event.approve:
        refused = ApprovalState.REFUSED
        settle = Settle(approval, Move.REFUSE, refused, DenyReason.OWNER_DENIED, scope)
        entry = _verdict(call, event, "denied", reason=DenyReason.OWNER_DENIED)
    elif isinstance(decision, policy.Allowed):
        settle = Settle(approval, Move.APPROVE, ApprovalState.APPROVED, None, scope)
        entry = _verdict(call, event, "allowed", grant=decision.winner)
        call = call._replace(allowed=decision)
    else:
        reason = decision.reason if isinstance(decision, policy.Denied) else None
        assert reason is not None, "an approval is redecided: allowed or denied"
        settle = Settle(approval, Move.APPROVE, ApprovalState.APPROVED, reason, scope)
        entry = _verdict(call, event, "denied", reason=reason)
    return call._replace(phase=Phase.SETTLING, settling=settle), [Record((entry,))]


def _verdict(
    call: Call,
    event: Verdict,
    outcome: records.VerdictOutcome,
    *,
    reason: DenyReason | None = None,
    grant: Grant | None = None,
) -> Entry:
    assert call.approval is not None
    return records.verdict(
        approval=call.approval,
        approve=event.approve,
        by=event.by,
        scope=event.scope.value,
        outcome=outcome,
        reason=reason.value if reason is not None else None,
        grant=grant.id if grant else None,
        grant_sha256=grant.sha256 if grant else None,
    )


def _record_expiry(call: Call, event: Event) -> Step:
    assert call.approval is not None
    reason = DenyReason.APPROVAL_EXPIRED
    settle = Settle(call.approval, Move.EXPIRE, ApprovalState.EXPIRED, reason, Scope.ONCE)
    entry = records.verdict(
        approval=call.approval,
        approve=False,
        by=EXPIRED_BY,
        scope=Scope.ONCE.value,
        outcome="denied",
        reason=reason.value,
    )
    return call._replace(phase=Phase.SETTLING, settling=settle), [Record((entry,))]


def _follow_verdict(call: Call, event: Event) -> Step:
    settle = call.settling
    assert settle is not None
    if settle.reason is None:
        assert call.allowed is not None
        return call._replace(phase=Phase.RUNNING), [settle, Run(call.allowed)]
    call, effects = _answer(call, Denied(settle.reason))
    return call, [settle, *effects]


def _stay_pending(call: Call, event: Event) -> Step:
    call = call._replace(phase=Phase.PENDING, settling=None, allowed=None)
    return call, [Refuse("audit unavailable", unavailable=True)]


def _being_settled(call: Call, event: Event) -> Step:
    return call, [Refuse(f"approval {call.approval} is already being settled")]


def _already_settled(call: Call, event: Event) -> Step:
    return call, [Refuse(f"approval {call.approval} is already settled")]


def _ignore(call: Call, event: Event) -> Step:
    return call, []


_RULES = {
    Rule.ANSWER_FOUND: _answer_found,
    Rule.ANSWER_UNAVAILABLE: _answer_unavailable,
    Rule.RECORD_DECISION: _record_decision,
    Rule.ANSWER_UNLABELLED: _answer_unlabelled,
    Rule.FOLLOW_DECISION: _follow_decision,
    Rule.CLOSE_RUN: _close_run,
    Rule.RECORD_EXECUTION: _record_execution,
    Rule.ANSWER_NOT_RAISED: _answer_not_raised,
    Rule.ANSWER_CLOSED: _answer_closed,
    Rule.ANSWER_NOT_CLOSED: _answer_not_closed,
    Rule.RECORD_VERDICT: _record_verdict,
    Rule.RECORD_EXPIRY: _record_expiry,
    Rule.FOLLOW_VERDICT: _follow_verdict,
    Rule.STAY_PENDING: _stay_pending,
    Rule.BEING_SETTLED: _being_settled,
    Rule.ALREADY_SETTLED: _already_settled,
    Rule.IGNORE: _ignore,
}
#: `TABLE` with each cell's rule as its function, so that a step looks up one cell (a
#: `Rule`, a plain Enum, hashes in Python: three of them a denied call).
_STEPS = {cell: _RULES[rule] for cell, rule in TABLE.items()}


def fit_output(output: str) -> str:
    """`output`, cut so that its JSON form fits in one frame (escaping can grow it 6 times)."""
    if len(output.encode("utf-8", "replace")) * 6 <= MAX_OUTPUT_JSON:
        return output
    note = "\n[… cut to fit in one message]"
    cut = output
    while len(json.dumps(cut, ensure_ascii=False).encode("utf-8", "replace")) > MAX_OUTPUT_JSON:
        cut = cut[: len(cut) // 2]
    return cut + note


def table_markdown() -> str:
    """The table as Markdown, for the docs (`bxcore.state_table`)."""
    return state_table.markdown(TABLE, Phase, Kind)
