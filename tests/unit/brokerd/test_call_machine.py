"""The call machine (`core.call`) cell by cell, and the invariants as table tests: I1 (decided,
durably, before anything runs), I3 (raised before the execution is recorded, both before the
answer), I5 (untrusted content needs the owner), I8 (a call found is answered, never run), and
the approval's life (§9). Pure: each test runs in microseconds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN, DataClass, Label
from bxcore.wire.messages import ApprovalState, Denied, Done, Failed, Pending, Scope
from services.brokerd.core import policy
from services.brokerd.core.approvals import Move
from services.brokerd.core.call import (
    AUDIT_UNAVAILABLE,
    NOT_RECORDED,
    TABLE,
    Call,
    Phase,
    Rule,
    Unexpected,
    fit_output,
    step,
    table_markdown,
)
from services.brokerd.core.call_events import (
    Answer,
    Decided,
    Durable,
    Effect,
    Event,
    Expired,
    Found,
    Kind,
    NotDurable,
    NotRaised,
    Raise,
    Raised,
    Ran,
    Record,
    Refuse,
    Run,
    Settle,
    Unavailable,
    Unlabelled,
    Verdict,
)
from services.brokerd.core.grants import Grant, parse_grant
from services.brokerd.core.records import CallRecords
from services.brokerd.core.replay import ALREADY_RAN, UNKNOWN

PRIVATE = Label(DataClass.PRIVATE, False)
TAINTED = Label(DataClass.PRIVATE, True)
WORK = "/home/owner/workspace"


def grant(text: str, grant_id: str = "work") -> Grant:
    parsed = parse_grant(grant_id, text.encode())
    assert isinstance(parsed, Grant), parsed
    return parsed


READ = grant(f'tool = "read_file"\nmode = "allow"\npath = "{WORK}"\nclass = "private"\n', "read")
WRITE = grant(f'tool = "write_file"\nmode = "allow"\npath = "{WORK}"\n', "write")
SHELL_ASK = grant(f'tool = "shell"\nmode = "ask"\npath = "{WORK}"\n', "shell")
GRANTS = (READ, WRITE, SHELL_ASK)

READ_ARGS = f'{{"path":"{WORK}/a.txt"}}'
WRITE_ARGS = f'{{"path":"{WORK}/a.txt","content":"x"}}'
SHELL_ARGS = f'{{"command":"ls","cwd":"{WORK}"}}'


def arrived(tool: str = "read_file", arguments: str = READ_ARGS) -> Call:
    return Call("s", "c1", tool, arguments)


def decided(call: Call, label: Label = CLEAN, **more: object) -> Decided:
    decision = policy.decide(label, call.tool, call.arguments, GRANTS)
    if isinstance(decision, policy.Ask) and "approval" not in more:
        more["approval"] = "ap1"
    return Decided(label, decision, **more)  # type: ignore[arg-type]


def walk(call: Call, *events: Event) -> tuple[Call, list[Effect]]:
    """Every effect of every step, in order."""
    every: list[Effect] = []
    for event in events:
        call, effects = step(call, event)
        every += effects
    return call, every


def kinds_of(effects: list[Effect]) -> list[str]:
    shown = []
    for effect in effects:
        if isinstance(effect, Record):
            shown += [f"record {kind}" for kind, _ in effect.entries]
        else:
            shown.append(type(effect).__name__.lower())
    return shown


def ran_ok(output: str = "hello") -> Ran:
    return Ran(True, output, 0, 3, True)


# --- every cell ---------------------------------------------------------------------------------

SAMPLE_EVENTS: dict[Kind, Event] = {
    Kind.FOUND: Found(None),
    Kind.UNAVAILABLE: Unavailable(),
    Kind.DECIDED: Decided(CLEAN, policy.decide(CLEAN, "read_file", READ_ARGS, GRANTS)),
    Kind.UNLABELLED: Unlabelled("cannot read"),
    Kind.DURABLE: Durable(),
    Kind.NOT_DURABLE: NotDurable(),
    Kind.RAN: ran_ok(),
    Kind.RAISED: Raised(CLEAN, PRIVATE),
    Kind.NOT_RAISED: NotRaised("cannot write"),
    Kind.VERDICT: Verdict(False, "owner", Scope.ONCE),
    Kind.EXPIRED: Expired(),
}


def in_phase(phase: Phase) -> Call:
    """A call as it stands in `phase`, reached the way the shell reaches it."""
    read = arrived()
    allowed = policy.decide(CLEAN, "read_file", READ_ARGS, GRANTS)
    assert isinstance(allowed, policy.Allowed)
    shell = arrived("shell", SHELL_ARGS)
    paths: dict[Phase, tuple[Call, list[Event]]] = {
        Phase.ARRIVED: (read, []),
        Phase.JUDGING: (read, [Found(None)]),
        Phase.RECORDING: (read, [Found(None), decided(read)]),
        Phase.RUNNING: (read, [Found(None), decided(read), Durable()]),
        Phase.RAISING: (read, [Found(None), decided(read), Durable(), ran_ok()]),
        Phase.CLOSING: (
            read,
            [Found(None), decided(read), Durable(), ran_ok(), Raised(CLEAN, PRIVATE)],
        ),
        Phase.PENDING: (shell, [Found(None), decided(shell), Durable()]),
        Phase.SETTLING: (
            shell,
            [Found(None), decided(shell), Durable(), Verdict(False, "o", Scope.ONCE)],
        ),
        Phase.ANSWERED: (read, [Unavailable()]),
    }
    start, events = paths[phase]
    call, _ = walk(start, *events)
    assert call.phase is phase
    return call


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("kind", list(Kind))
def test_every_cell_is_a_rule_or_an_unexpected_event(phase: Phase, kind: Kind) -> None:
    call = in_phase(phase)
    event = SAMPLE_EVENTS[kind]
    if (phase, kind) not in TABLE:
        with pytest.raises(Unexpected):
            step(call, event)
        return
    after, effects = step(call, event)
    fed = [e for e in effects if isinstance(e, Record | Run | Raise)]
    assert len(fed) <= 1 and (not fed or effects[-1] is fed[0]), "a fed effect comes last"
    if TABLE[(phase, kind)] is Rule.IGNORE:
        assert (after, effects) == (call, [])


def test_the_table_renders_as_markdown_with_a_row_a_phase() -> None:
    text = table_markdown()
    assert len(text.splitlines()) == 2 + len(Phase)
    assert "| pending | " in text and "record_verdict" in text


# --- I1: decided, durably, before anything runs --------------------------------------------------


def test_an_allowed_call_is_recorded_then_run_then_raised_then_recorded_then_answered() -> None:
    call = arrived()
    call, effects = walk(call, Found(None), decided(call), Durable(), ran_ok())
    assert kinds_of(effects) == ["record decision", "run", "raise"]
    call, more = walk(call, Raised(CLEAN, PRIVATE), Durable())
    assert kinds_of(more) == ["record executed", "record raised", "answer"]
    assert more[-1] == Answer(Done(True, "hello", PRIVATE))
    assert call.phase is Phase.ANSWERED


def test_a_decision_that_cannot_be_recorded_is_audit_unavailable_and_nothing_runs() -> None:
    call = arrived()
    call, effects = walk(call, Found(None), decided(call), NotDurable())
    assert kinds_of(effects) == ["record decision", "answer"]
    assert effects[-1] == Answer(AUDIT_UNAVAILABLE)


def test_a_denial_is_recorded_before_it_is_answered() -> None:
    call = arrived("read_file", '{"path":"/etc/passwd"}')
    call, effects = walk(call, Found(None), decided(call), Durable())
    assert kinds_of(effects) == ["record decision", "answer"]
    assert effects[-1] == Answer(Denied(DenyReason.NO_GRANT))


def test_a_ledger_that_cannot_say_answers_audit_unavailable_at_once() -> None:
    assert walk(arrived(), Unavailable())[1] == [Answer(AUDIT_UNAVAILABLE)]


def test_a_label_that_cannot_be_read_is_answered_failed_and_nothing_is_recorded() -> None:
    _, effects = walk(arrived(), Found(None), Unlabelled("damaged"))
    assert effects == [Answer(Failed("the session's label cannot be read: damaged"))]


# --- I3: raised before recorded, both before the answer -----------------------------------------


def test_a_raise_that_fails_holds_the_output() -> None:
    call = arrived()
    _, effects = walk(call, Found(None), decided(call), Durable(), ran_ok(), NotRaised("disk"))
    assert kinds_of(effects)[-1] == "answer"
    assert effects[-1] == Answer(
        Failed("the session's label cannot be raised, so the output is held: disk")
    )


def test_a_run_whose_record_fails_holds_its_output() -> None:
    call = arrived()
    events = [Found(None), decided(call), Durable(), ran_ok(), Raised(CLEAN, PRIVATE)]
    _, effects = walk(call, *events, NotDurable())
    assert effects[-1] == Answer(Failed(NOT_RECORDED))


def test_a_sandbox_that_started_and_failed_still_raises_by_the_winner() -> None:
    call = arrived()
    failed = Ran(False, "", None, 5, True, error="the tool ran out of time")
    call, effects = walk(call, Found(None), decided(call), Durable(), failed)
    assert effects[-1] == Raise(PRIVATE)  # the winner's class: it may have read the file
    _, more = walk(call, Raised(CLEAN, PRIVATE), Durable())
    assert more[-1] == Answer(Failed("the tool ran out of time"))


def test_a_run_that_never_started_is_recorded_failed_and_raises_nothing() -> None:
    call = arrived()
    never = Ran(False, "", None, 0, False, error="sandbox unavailable: no bwrap")
    call, effects = walk(call, Found(None), decided(call), Durable(), never)
    assert kinds_of(effects) == ["record decision", "run", "record executed"]
    assert walk(call, NotDurable())[1] == [Answer(Failed("sandbox unavailable: no bwrap"))]


def test_the_execution_record_holds_the_hash_and_size_of_what_is_answered() -> None:
    call = arrived()
    events = [Found(None), decided(call), Durable(), ran_ok("héllo"), Raised(CLEAN, PRIVATE)]
    _, effects = walk(call, *events)
    record = effects[-1]
    assert isinstance(record, Record)
    _, executed = record.entries[0]
    assert executed["output_sha256"] == hashlib.sha256("héllo".encode()).hexdigest()
    assert executed["output_bytes"] == len("héllo".encode())


def test_an_output_too_large_for_one_message_is_cut_and_says_so() -> None:
    cut = fit_output("x" * 5_000_000)
    assert cut.endswith("[… cut to fit in one message]") and len(cut) < 5_000_000


# --- I5 and the approval's life ---------------------------------------------------------------


def test_untrusted_content_makes_a_write_wait_for_the_owner() -> None:
    call = arrived("write_file", WRITE_ARGS)
    call, effects = walk(call, Found(None), decided(call, TAINTED), Durable())
    assert call.phase is Phase.PENDING
    assert kinds_of(effects) == ["record decision", "ask", "answer"]
    assert effects[-1] == Answer(Pending("ap1"))
    assert not [e for e in effects if isinstance(e, Run)]


def pending_shell() -> Call:
    call = arrived("shell", SHELL_ARGS)
    call, _ = walk(call, Found(None), decided(call), Durable())
    return call


def test_an_approval_is_recorded_before_it_is_said_and_before_the_call_runs() -> None:
    call = pending_shell()
    allowed = policy.redecide(CLEAN, "shell", SHELL_ARGS, GRANTS)
    call, effects = walk(call, Verdict(True, "owner", Scope.ONCE, allowed))
    assert kinds_of(effects) == ["record verdict"] and call.phase is Phase.SETTLING
    call, effects = walk(call, Durable())
    assert kinds_of(effects) == ["settle", "run"]
    assert effects[0] == Settle("ap1", Move.APPROVE, ApprovalState.APPROVED, None, Scope.ONCE)


def test_a_refusal_is_recorded_then_said_then_answered_and_nothing_runs() -> None:
    call, effects = walk(pending_shell(), Verdict(False, "owner", Scope.ONCE), Durable())
    assert kinds_of(effects) == ["record verdict", "settle", "answer"]
    assert effects[-1] == Answer(Denied(DenyReason.OWNER_DENIED))
    assert call.phase is Phase.ANSWERED


def test_an_approval_never_overrides_a_denial_that_arose_meanwhile() -> None:
    denied = policy.Denied(DenyReason.NO_GRANT)
    _, effects = walk(pending_shell(), Verdict(True, "owner", Scope.ONCE, denied), Durable())
    settle = effects[1]
    assert isinstance(settle, Settle) and settle.state is ApprovalState.APPROVED
    assert settle.reason is DenyReason.NO_GRANT
    assert effects[-1] == Answer(Denied(DenyReason.NO_GRANT))


def test_an_unanswered_approval_expires_recorded_as_brokerd() -> None:
    _, effects = walk(pending_shell(), Expired(), Durable())
    record = effects[0]
    assert isinstance(record, Record) and record.entries[0][1]["by"] == (
        "brokerd (no answer in time)"
    )
    assert effects[-1] == Answer(Denied(DenyReason.APPROVAL_EXPIRED))


def test_a_second_verdict_while_the_first_is_recorded_changes_nothing() -> None:
    call, _ = walk(pending_shell(), Verdict(False, "owner", Scope.ONCE))
    after, effects = step(call, Verdict(True, "owner", Scope.ONCE))
    assert after == call and effects == [Refuse("approval ap1 is already being settled")]
    assert step(call, Expired()) == (call, [])


def test_a_verdict_that_cannot_be_recorded_leaves_the_approval_pending() -> None:
    call, effects = walk(pending_shell(), Verdict(False, "owner", Scope.ONCE), NotDurable())
    assert call.phase is Phase.PENDING
    assert effects[-1] == Refuse("audit unavailable", unavailable=True)


def test_a_call_a_session_scope_covers_is_recorded_allowed_under_it_and_runs() -> None:
    call = arrived("shell", SHELL_ARGS)
    ask = policy.decide(CLEAN, "shell", SHELL_ARGS, GRANTS)
    assert isinstance(ask, policy.Ask)
    covered = policy.approved(ask, GRANTS)
    call, effects = walk(call, Found(None), Decided(CLEAN, ask, "ap0", covered), Durable())
    record = effects[0]
    assert isinstance(record, Record)
    assert record.entries[0][1]["outcome"] == "allowed"
    assert record.entries[0][1]["approval"] == "ap0"
    assert isinstance(effects[-1], Run) and call.phase is Phase.RUNNING


# --- I8: once ---------------------------------------------------------------------------------


def found(decision: dict[str, object], **more: dict[str, object]) -> Found:
    return Found(CallRecords(decision, more.get("verdict"), more.get("executed")))


@pytest.mark.parametrize(
    ("records", "answer"),
    [
        (found({"outcome": "allowed"}, executed={"ok": True}), Failed(ALREADY_RAN)),
        (found({"outcome": "allowed"}), Failed(UNKNOWN)),
        (found({"outcome": "denied", "reason": "no_grant"}), Denied(DenyReason.NO_GRANT)),
        (found({"outcome": "pending", "approval": "ap9"}), Pending("ap9")),
        (
            found(
                {"outcome": "pending", "approval": "ap9"},
                verdict={"outcome": "denied", "reason": "owner_denied"},
            ),
            Denied(DenyReason.OWNER_DENIED),
        ),
    ],
)
def test_a_call_found_in_the_ledger_is_answered_from_it_and_never_decided_again(
    records: Found, answer: object
) -> None:
    call, effects = step(arrived(), records)
    assert effects == [Answer(answer)]  # type: ignore[arg-type]
    assert call.phase is Phase.ANSWERED


def test_an_answered_call_takes_no_more_steps() -> None:
    call = in_phase(Phase.ANSWERED)
    for kind, event in SAMPLE_EVENTS.items():
        if (Phase.ANSWERED, kind) in TABLE:
            assert step(call, event)[0] == call
        else:
            with pytest.raises(Unexpected):
                step(call, event)


def test_the_decision_record_keeps_the_canonical_arguments() -> None:
    call = arrived("read_file", f'{{ "path" : "{WORK}/a.txt" }}')
    _, effects = walk(call, Found(None), decided(call))
    record = effects[0]
    assert isinstance(record, Record)
    assert record.entries[0][1]["arguments"] == READ_ARGS


def test_docs_architecture_holds_the_table_as_the_code_draws_it() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
    assert table_markdown() in docs.read_text()
