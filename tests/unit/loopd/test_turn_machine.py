"""The turn machine (`core.turn`) cell by cell, and a turn's rules as table tests: the step
limit, the budgets (the day's cap before a turn starts, a turn's or the day's after an
answer), the per-reply cap (also when resumed), approvals waited on, the owner's stop, a
history that cannot be written, and resume after a crash. Pure: each test runs in
microseconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN
from bxcore.wire.messages import Denied, Done, EndReason, Failed
from services.loopd.core.turn import (
    TABLE,
    UNKNOWN_TOOL,
    Phase,
    Rule,
    Turn,
    Unexpected,
    begin,
    call_id,
    final_answer,
    open_calls,
    step,
    table_markdown,
)
from services.loopd.core.turn_events import (
    Answered,
    Ask,
    AskModel,
    Await,
    Began,
    Called,
    Close,
    Count,
    Counted,
    Effect,
    End,
    Event,
    Halted,
    Held,
    Keep,
    Kind,
    NoBroker,
    NotReplied,
    OwnerWords,
    Replied,
    Say,
    SentCall,
    Spawn,
    Stopped,
    SubAnswered,
    Tell,
    TooMany,
    Waits,
    Warn,
    Why,
)

READ = '{"path":"/w/a.md"}'
DONE = Done(True, "the file's text", CLEAN)


def fresh(limit: int = 10, cap: int = 2, max_tokens: int | None = None, words: bool = True) -> Turn:
    return begin(1, limit, cap, max_tokens, words=words)


def call(n: int = 1, name: str = "read_file", step_: int = 0) -> SentCall:
    return SentCall(call_id(1, step_, n), f"m{n}", name, READ)


def walk(turn: Turn, *events: Event) -> tuple[Turn, list[Effect]]:
    """Every effect of every step, in order."""
    every: list[Effect] = []
    for event in events:
        turn, effects = step(turn, event)
        every += effects
    return turn, every


FED = (AskModel, Count, Ask, Await, Spawn)

# --- every cell ---------------------------------------------------------------------------------

SAMPLE_EVENTS: dict[Kind, Event] = {
    Kind.BEGAN: Began(),
    Kind.REPLIED: Replied("reading", (call(),)),
    Kind.NOT_REPLIED: NotReplied("the model server answered 500"),
    Kind.COUNTED: Counted(),
    Kind.ANSWERED: Answered(DONE),
    Kind.HELD: Held("k3v9qz2m"),
    Kind.SUB_ANSWERED: SubAnswered("the child's answer", True),
    Kind.NO_BROKER: NoBroker("brokerd is not reachable"),
    Kind.STOPPED: Stopped(("1-0-1",)),
    Kind.HALTED: Halted("the disk is full; the turn stopped.", ("1-0-1",)),
}


def in_phase(phase: Phase) -> Turn:
    """A turn as it stands in `phase`, reached the way the shell reaches it."""
    paths: dict[Phase, list[Event]] = {
        Phase.BEGUN: [],
        Phase.ASKING: [Began()],
        Phase.COUNTING: [Began(), Replied("", (call(),))],
        Phase.CALLING: [Began(), Replied("", (call(),)), Counted()],
        Phase.WAITING: [Began(), Replied("", (call(),)), Counted(), Held("k3v9qz2m")],
        Phase.ENDED: [Began(), Replied("done")],
    }
    turn, _ = walk(fresh(), *paths[phase])
    assert turn.phase is phase
    return turn


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("kind", list(Kind))
def test_every_cell_is_a_rule_or_an_unexpected_event(phase: Phase, kind: Kind) -> None:
    turn = in_phase(phase)
    event = SAMPLE_EVENTS[kind]
    if (phase, kind) not in TABLE:
        with pytest.raises(Unexpected):
            step(turn, event)
        return
    after, effects = step(turn, event)
    fed = [e for e in effects if isinstance(e, FED)]
    assert len(fed) <= 1 and (not fed or effects[-1] is fed[0]), "a fed effect comes last"
    ends = [e for e in effects if isinstance(e, End)]
    assert (after.phase is Phase.ENDED) == bool(ends) or phase is Phase.ENDED
    assert not ends or effects[-1] is ends[0], "a turn's end is the last thing it shows"
    assert after.phase is Phase.ENDED or fed, "a live turn always waits on something"


def test_every_live_phase_a_turn_awaits_in_takes_the_owner_s_stop() -> None:
    """The shell is stopped in what it awaits: the model, brokerd or a sub-agent, and a turn
    stopped before it began. Weighing the budgets awaits nothing, and an ended turn nothing."""
    stoppable = {phase for phase, kind in TABLE if kind is Kind.STOPPED}
    assert stoppable == {Phase.BEGUN, Phase.ASKING, Phase.CALLING, Phase.WAITING}
    assert {phase for phase, kind in TABLE if kind is Kind.HALTED} == set(Phase)


def test_the_table_renders_as_markdown_with_a_row_a_phase() -> None:
    text = table_markdown()
    assert len(text.splitlines()) == 2 + len(Phase)
    assert "| waiting | " in text and "wait_again" in text


def test_docs_architecture_holds_the_table_as_the_code_draws_it() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
    assert table_markdown() in docs.read_text()


# --- steps and the step limit --------------------------------------------------------------------


def test_a_turn_asks_the_model_then_its_call_goes_to_brokerd_after_the_owner_s_words() -> None:
    turn, effects = walk(fresh(), Began())
    assert effects == [AskModel(0)] and turn.phase is Phase.ASKING
    turn, effects = walk(turn, Replied("let me read", (call(),)), Counted())
    assert effects == [
        Say("let me read"),
        Count(None),
        Called("read_file", READ),
        OwnerWords(),
        Ask(call()),
    ]
    turn, effects = walk(turn, Answered(DONE))
    assert effects == [Tell("read_file", DONE), Keep("1-0-1", DONE), AskModel(1)]
    turn, effects = walk(turn, Replied("it says hello"))
    assert effects == [Say("it says hello"), End(EndReason.DONE)]
    assert (turn.phase, turn.said, turn.steps) == (Phase.ENDED, "it says hello", 2)


def test_a_sub_agent_s_calls_go_without_the_owner_s_words() -> None:
    _, effects = walk(fresh(words=False), Began(), Replied("", (call(),)), Counted())
    assert OwnerWords() not in effects and effects[-1] == Ask(call())


def test_an_answer_without_words_shows_nothing_but_its_end() -> None:
    _, effects = walk(fresh(), Began(), Replied(""))
    assert effects == [AskModel(0), End(EndReason.DONE)]


def test_max_steps_answers_end_the_turn_with_the_model_s_last_words() -> None:
    turn, effects = walk(fresh(limit=1), Began(), Replied("one", (call(),)), Counted())
    turn, effects = walk(turn, Answered(DONE))
    assert effects[-1] == End(EndReason.MAX_STEPS)
    assert (turn.phase, turn.said) == (Phase.ENDED, "one")


def test_a_limit_of_no_steps_ends_the_turn_before_the_model_is_asked() -> None:
    turn, effects = walk(fresh(limit=0), Began())
    assert effects == [End(EndReason.MAX_STEPS)] and turn.said == ""


def test_call_ids_name_the_turn_the_step_and_the_call() -> None:
    assert call_id(3, 0, 1) == "3-0-1" and call_id(12, 4, 2) == "12-4-2"


# --- failures ------------------------------------------------------------------------------------


def test_a_model_that_fails_ends_the_turn_error_with_its_reason() -> None:
    turn, effects = walk(fresh(), Began(), NotReplied("the model server answered 500"))
    assert effects[1:] == [Warn("the model server answered 500"), End(EndReason.ERROR)]
    assert turn.said == ""


@pytest.mark.parametrize("held", [False, True])
def test_brokerd_gone_ends_the_turn_error(held: bool) -> None:
    turn, _ = walk(fresh(), Began(), Replied("", (call(),)), Counted())
    if held:
        turn, _ = walk(turn, Held("k3v9qz2m"))
    turn, effects = walk(turn, NoBroker("brokerd is not reachable"))
    assert effects == [Warn("brokerd is not reachable"), End(EndReason.ERROR)]
    assert (turn.phase, turn.said) == (Phase.ENDED, "")


def test_a_tool_whose_name_the_wire_cannot_carry_is_denied_without_brokerd() -> None:
    bad = SentCall("1-0-1", "m1", "x" * 300, "{}")
    _, effects = walk(fresh(), Began(), Replied("", (bad, call(2))), Counted())
    assert effects[2:] == [
        Called("?", "{}"),
        Tell("?", UNKNOWN_TOOL),
        Keep("1-0-1", UNKNOWN_TOOL),
        Called("read_file", READ),
        OwnerWords(),
        Ask(call(2)),
    ]
    assert Denied(DenyReason.UNKNOWN_TOOL) == UNKNOWN_TOOL


# --- budgets -------------------------------------------------------------------------------------


def test_a_turn_the_day_s_cap_keeps_from_starting_ends_budget_unasked() -> None:
    turn, effects = walk(fresh(), Began(refused="the box has used 100 tokens today"))
    assert effects == [Warn("the box has used 100 tokens today"), End(EndReason.BUDGET)]
    assert turn.said == ""


def test_a_turn_that_had_begun_resumes_past_the_day_s_cap() -> None:
    """The cap keeps a turn from starting; one that began before goes on to its end."""
    began = Began(steps=1, last_text="half", refused="the box has used 100 tokens today")
    _, effects = walk(fresh(), began)
    assert effects == [AskModel(1)]


def test_an_answer_past_the_budget_is_kept_and_its_calls_never_run() -> None:
    turn = fresh(max_tokens=10)
    turn, effects = walk(turn, Began(), Replied("costly", (call(1), call(2))))
    assert effects[-1] == Count(10)
    turn, effects = walk(turn, Counted("this turn used 12 tokens"))
    assert effects == [
        Close("1-0-1", Why.BUDGET),
        Close("1-0-2", Why.BUDGET),
        Warn("this turn used 12 tokens"),
        End(EndReason.BUDGET),
    ]
    assert turn.said == "costly"


# --- the per-reply cap ---------------------------------------------------------------------------


def test_calls_past_the_cap_are_refused_without_brokerd_the_owner_told_once() -> None:
    calls = (call(1), call(2), call(3))
    turn, _ = walk(fresh(cap=1), Began(), Replied("", calls))
    turn, effects = walk(turn, Counted())
    assert effects == [TooMany(3, 1), Called("read_file", READ), OwnerWords(), Ask(call(1))]
    turn, effects = walk(turn, Answered(DONE))
    assert effects == [
        Tell("read_file", DONE),
        Keep("1-0-1", DONE),
        Close("1-0-2", Why.TOO_MANY),
        Close("1-0-3", Why.TOO_MANY),
        AskModel(1),
    ]


def test_a_resumed_reply_keeps_its_cap_and_resends_only_the_calls_without_a_result() -> None:
    """After a crash: the second call had been shown, the third is past the cap."""
    began = Began(
        steps=1,
        open=((call(2), True), (call(3), False)),
        reply=("1-0-1", "1-0-2", "1-0-3"),
        last_text="reading",
    )
    turn, effects = walk(fresh(cap=2), began)
    assert effects == [OwnerWords(), Ask(call(2))]  # shown already: not called again
    _, effects = walk(turn, Answered(DONE))
    assert effects[2:] == [Close("1-0-3", Why.TOO_MANY), AskModel(1)]


# --- resume after a crash ------------------------------------------------------------------------


@pytest.mark.parametrize(("shown", "said"), [(False, [Say("all done")]), (True, [])])
def test_a_turn_the_model_had_answered_only_lacks_its_end(shown: bool, said: list[Effect]) -> None:
    turn, effects = walk(fresh(), Began(final=("all done", shown), steps=3))
    assert effects == [*said, End(EndReason.DONE)]
    assert (turn.phase, turn.said) == (Phase.ENDED, "all done")


def test_the_open_calls_are_those_without_a_result_the_first_shown_ones_shown() -> None:
    calls = (call(1), call(2), call(3))
    assert open_calls(calls, {"1-0-1"}, 2) == [(call(2), True), (call(3), False)]
    assert open_calls(calls, {"1-0-1", "1-0-2", "1-0-3"}, 3) == []


def test_only_a_reply_without_calls_is_a_final_answer() -> None:
    assert final_answer("all done", (), True) == ("all done", True)
    assert final_answer("", (), False) == ("", False)
    assert final_answer("reading", (call(),), False) is None


def test_a_resumed_turn_at_its_step_limit_ends_with_the_last_words() -> None:
    turn, effects = walk(fresh(limit=2), Began(steps=2, last_text="so far"))
    assert effects == [End(EndReason.MAX_STEPS)] and turn.said == "so far"


# --- approvals waited on -------------------------------------------------------------------------


def test_a_held_call_is_shown_pending_once_and_polled_until_answered() -> None:
    turn, _ = walk(fresh(), Began(), Replied("", (call(),)), Counted())
    turn, effects = walk(turn, Held("k3v9qz2m"))
    assert effects == [Waits("read_file", "k3v9qz2m"), Await("k3v9qz2m")]
    turn, effects = walk(turn, Held("k3v9qz2m"))
    assert effects == [Await("k3v9qz2m")] and turn.phase is Phase.WAITING
    denied = Denied(DenyReason.OWNER_DENIED)
    _, effects = walk(turn, Answered(denied))
    assert effects == [Tell("read_file", denied), Keep("1-0-1", denied), AskModel(1)]


# --- sub-agents ----------------------------------------------------------------------------------


def test_a_spawn_goes_to_a_sub_agent_and_its_answer_is_kept() -> None:
    spawn = SentCall("1-0-1", "m1", "spawn", '{"task":"look"}')
    turn, effects = walk(fresh(), Began(), Replied("", (spawn,)), Counted())
    assert effects[-2:] == [Called("spawn", '{"task":"look"}'), Spawn(spawn)]
    answer = SubAnswered("Error: the owner stopped the sub-agent before it answered.", False)
    _, effects = walk(turn, answer)
    assert effects == [Tell("spawn", answer), Keep("1-0-1", answer), AskModel(1)]


# --- the owner's stop, and a history that cannot be written -------------------------------------


@pytest.mark.parametrize("phase", [Phase.BEGUN, Phase.ASKING, Phase.CALLING, Phase.WAITING])
def test_a_stop_closes_the_open_calls_and_ends_cancelled_written_when_it_can_be(
    phase: Phase,
) -> None:
    turn, effects = step(in_phase(phase), Stopped(("1-0-1",)))
    assert effects == [Close("1-0-1", Why.CANCELLED, owe=True), End(EndReason.CANCELLED, owe=True)]
    assert (turn.phase, turn.said) == (Phase.ENDED, "")


@pytest.mark.parametrize("phase", list(Phase))
def test_a_history_that_cannot_be_written_ends_the_turn_error_shown_at_once(phase: Phase) -> None:
    said = "the disk is full; the turn stopped."
    turn, effects = step(in_phase(phase), Halted(said, ("1-0-1",)))
    assert effects == [
        Close("1-0-1", Why.HALTED, said, owe=True),
        Warn(said, owe=True),
        End(EndReason.ERROR, owe=True),
    ]
    assert (turn.phase, turn.said) == (Phase.ENDED, "")


def test_an_ended_turn_takes_no_more_steps_but_an_unwritten_end() -> None:
    turn = in_phase(Phase.ENDED)
    for kind, event in SAMPLE_EVENTS.items():
        if kind is Kind.HALTED:
            continue
        with pytest.raises(Unexpected):
            step(turn, event)


def test_a_failed_outcome_is_told_and_kept_as_any_other() -> None:
    turn, _ = walk(fresh(), Began(), Replied("", (call(),)), Counted())
    failed = Failed("brokerd refused the request: busy")
    _, effects = walk(turn, Answered(failed))
    assert effects[:2] == [Tell("read_file", failed), Keep("1-0-1", failed)]


def test_rules_are_named_in_the_table_and_each_is_used() -> None:
    assert set(TABLE.values()) == set(Rule)
