"""One turn's life (SPEC §10.1, §10.3, §10.5, §10.6, §12.2, §19) as a table of (phase, event) ->
step, as brokerd's call machine (`services.brokerd.core.call`) is: pure, no I/O, no clock. The
shell (`services.loopd.turn.Turns`) carries out the effects of each step in order and feeds
back what they produced.

    begun     --began-->      asking | calling (a resumed reply's open calls) | ended
    asking    --replied-->    counting (an answer with calls) | ended (one without)
    counting  --counted-->    calling | asking | ended (a budget spent)
    calling   --answered-->   calling (the reply's next call) | asking | ended (max_steps)
    calling   --held-->       waiting  --held--> waiting  --answered--> as from calling

A turn ends at once on the owner's stop (`stopped`, in whatever it awaits) or on a history that
cannot be written (`halted`); a model or brokerd that fails ends it `error`.

What the order depends on is this table's: each step is in the history before the next
begins (the shell records a reply before it feeds `Replied`, a result before the next call), so
a turn cut off by a crash resumes where it was (`begin`: a reply that called no tool only lacks
its end; its open calls are sent again with their ids). A turn the day's cap keeps from
starting ends `budget` before the model is asked; one whose answer spent a budget ends
`budget` after it, that answer's calls never run. Of one reply's calls only the first
`max_calls_per_reply` go to brokerd, also when resumed; `max_steps` answers end the turn.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from bxcore import state_table
from bxcore.deny import DenyReason
from bxcore.ids import MAX_TOOL_NAME, byte_length_between
from bxcore.tools import SPAWN
from bxcore.wire.messages import Denied, EndReason
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

UNKNOWN_TOOL = Denied(DenyReason.UNKNOWN_TOOL)


class Phase(enum.StrEnum):
    BEGUN = "begun"  # run or resumed: the shell reads what the history holds of the turn
    ASKING = "asking"  # the model is asked for the next step's answer
    COUNTING = "counting"  # an answer with calls: the shell weighs the budgets
    CALLING = "calling"  # a call is with brokerd, or with a sub-agent
    WAITING = "waiting"  # brokerd holds the call for the owner's approval
    ENDED = "ended"  # the turn's end is shown; the model's last words are `said`


def call_id(turn: int, step: int, n: int) -> str:
    """loopd's id of the `n`-th call (from 1) of step `step`'s answer (from 0) in `turn`:
    unique in the session, what brokerd sees (I8); the model's own id is kept beside it."""
    return f"{turn}-{step}-{n}"


def tool_shown(name: str) -> str:
    """A call's tool as the owner is shown it: `?` for a name the wire cannot carry."""
    return name if byte_length_between(name, 1, MAX_TOOL_NAME) else "?"


# --- resume after a crash: what a turn's last reply says, read from its history -----------------


def open_calls(
    calls: Sequence[SentCall], answered: Collection[str], calls_shown: int
) -> list[tuple[SentCall, bool]]:
    """The calls of a turn's last reply without a result yet, each with whether the owner was
    shown it called (calls run one after another, so the first `calls_shown` were)."""
    return [
        (call, index < calls_shown) for index, call in enumerate(calls) if call.id not in answered
    ]


def final_answer(text: str, calls: Sequence[SentCall], text_shown: bool) -> tuple[str, bool] | None:
    """When a turn's last reply called no tool, the turn only lacks its end (a crash came
    first): that reply's text, and whether the owner was shown it. Else None."""
    return None if calls else (text, text_shown)


# --- the turn ---------------------------------------------------------------------------------


class Turn(NamedTuple):
    """One turn's state. `limit`: the model's answers it may take (`max_steps`); `cap`: a
    reply's calls that run (`max_calls_per_reply`); `max_tokens`: its own budget (a job's);
    `words`: the owner's words go to brokerd before each call (a session of the owner's, not a
    sub-agent's, whose task is the model's)."""

    turn: int
    limit: int
    cap: int
    max_tokens: int | None = None
    words: bool = True
    phase: Phase = Phase.BEGUN
    steps: int = 0  # the model's answers so far
    queue: tuple[tuple[SentCall, bool], ...] = ()  # the reply's calls still to run, and if shown
    beyond: frozenset[str] = frozenset()  # the reply's calls past `cap`
    call: SentCall | None = None  # the call with brokerd or a sub-agent
    said: str = ""  # the model's last words


Step = tuple[Turn, list[Effect]]


class Rule(enum.Enum):
    """A cell whose step depends on the event's data."""

    BEGIN = "begin"
    FOLLOW_REPLY = "follow_reply"
    WEIGH_BUDGET = "weigh_budget"
    KEEP_RESULT = "keep_result"
    WAIT_FOR_OWNER = "wait_for_owner"
    WAIT_AGAIN = "wait_again"
    FAIL = "fail"
    STOP = "stop"
    HALT = "halt"


class Unexpected(Exception):
    """An event that cannot happen in this phase: the shell's mistake."""


_P = Phase
_K = Kind
TABLE: Mapping[tuple[Phase, Kind], Rule] = MappingProxyType(
    {
        (_P.BEGUN, _K.BEGAN): Rule.BEGIN,
        (_P.BEGUN, _K.STOPPED): Rule.STOP,  # stopped before it began: the model is never asked
        (_P.BEGUN, _K.HALTED): Rule.HALT,  # failed unforeseen, found after its run (`broke`)
        (_P.ASKING, _K.REPLIED): Rule.FOLLOW_REPLY,
        (_P.ASKING, _K.NOT_REPLIED): Rule.FAIL,
        (_P.ASKING, _K.STOPPED): Rule.STOP,
        (_P.ASKING, _K.HALTED): Rule.HALT,
        (_P.COUNTING, _K.COUNTED): Rule.WEIGH_BUDGET,
        (_P.COUNTING, _K.HALTED): Rule.HALT,  # the reply's words could not be shown
        (_P.CALLING, _K.ANSWERED): Rule.KEEP_RESULT,
        (_P.CALLING, _K.SUB_ANSWERED): Rule.KEEP_RESULT,
        (_P.CALLING, _K.HELD): Rule.WAIT_FOR_OWNER,
        (_P.CALLING, _K.NO_BROKER): Rule.FAIL,
        (_P.CALLING, _K.STOPPED): Rule.STOP,
        (_P.CALLING, _K.HALTED): Rule.HALT,
        (_P.WAITING, _K.ANSWERED): Rule.KEEP_RESULT,
        (_P.WAITING, _K.HELD): Rule.WAIT_AGAIN,
        (_P.WAITING, _K.NO_BROKER): Rule.FAIL,
        (_P.WAITING, _K.STOPPED): Rule.STOP,
        (_P.WAITING, _K.HALTED): Rule.HALT,
        (_P.ENDED, _K.HALTED): Rule.HALT,  # its end (or last words) could not be written
    }
)


def begin(turn: int, limit: int, cap: int, max_tokens: int | None = None, *, words: bool) -> Turn:
    """A turn about to run or resume, before the history is read."""
    return Turn(turn, limit, cap, max_tokens, words)


def step(turn: Turn, event: Event) -> Step:
    """The turn after `event`, and the effects the shell must carry out, in order. At most one
    effect feeds an event back (`AskModel`, `Count`, `Ask`, `Await`, `Spawn`), and it comes
    last."""
    rule = _STEPS.get((turn.phase, event.KIND))
    if rule is None:
        raise Unexpected(f"{event.KIND} in phase {turn.phase} of turn {turn.turn}")
    return rule(turn, event)


def _end(turn: Turn, reason: EndReason, said: str, effects: list[Effect]) -> Step:
    return turn._replace(phase=Phase.ENDED, call=None, queue=(), said=said), [
        *effects,
        End(reason),
    ]


def _begin(turn: Turn, event: Event) -> Step:
    """A turn the model had answered only lacks its end (its words, if the owner missed
    them); one not yet begun is refused at the day's cap; else its open calls are answered
    (none, for a turn not yet begun), then the model is asked."""
    assert isinstance(event, Began)
    if event.final is not None:
        text, shown = event.final
        return _end(turn, EndReason.DONE, text, [Say(text)] if text and not shown else [])
    if event.refused is not None and event.steps == 0:
        return _end(turn, EndReason.BUDGET, "", [Warn(event.refused)])
    turn = turn._replace(steps=event.steps, said=event.last_text)
    return _run_calls(turn, event.open, frozenset(event.reply[turn.cap :]), [])


def _follow_reply(turn: Turn, event: Event) -> Step:
    """The owner sees the answer's words; one without a call ends the turn, one with calls
    is weighed against the budgets before any runs."""
    assert isinstance(event, Replied)
    turn = turn._replace(steps=turn.steps + 1, said=event.text)
    effects: list[Effect] = [Say(event.text)] if event.text else []
    if not event.calls:
        return _end(turn, EndReason.DONE, event.text, effects)
    queue = tuple((call, False) for call in event.calls)
    return turn._replace(phase=Phase.COUNTING, queue=queue), [*effects, Count(turn.max_tokens)]


def _weigh_budget(turn: Turn, event: Event) -> Step:
    """An answer past a budget is kept and its calls never run; else the reply's calls run,
    the first `cap` of them (the owner told once when there are more)."""
    assert isinstance(event, Counted)
    calls = [call for call, _ in turn.queue]
    if event.over is not None:
        closed: list[Effect] = [Close(call.id, Why.BUDGET) for call in calls]
        return _end(turn, EndReason.BUDGET, turn.said, [*closed, Warn(event.over)])
    effects: list[Effect] = [TooMany(len(calls), turn.cap)] if len(calls) > turn.cap else []
    beyond = frozenset(call.id for call in calls[turn.cap :])
    return _run_calls(turn, turn.queue, beyond, effects)


def _run_calls(
    turn: Turn,
    queue: tuple[tuple[SentCall, bool], ...],
    beyond: frozenset[str],
    effects: list[Effect],
) -> Step:
    """Give each call of `queue` its result, in the model's order, until one must be waited
    for: a call past the cap is closed `too_many` and goes nowhere; a tool no one has (a name
    the wire cannot carry) is denied at once; a `spawn` goes to a sub-agent, the rest to
    brokerd (after the owner's words, in an owner's session). When none is left: the model
    is asked again, or the turn ends at `max_steps`."""
    for index, (call, shown) in enumerate(queue):
        if call.id in beyond:
            effects.append(Close(call.id, Why.TOO_MANY))
            continue
        tool = tool_shown(call.name)
        if not shown:
            effects.append(Called(tool, call.arguments))
        rest = queue[index + 1 :]
        if call.name == SPAWN.name:
            turn = turn._replace(phase=Phase.CALLING, queue=rest, beyond=beyond, call=call)
            return turn, [*effects, Spawn(call)]
        if tool == "?":
            effects += [Tell(tool, UNKNOWN_TOOL), Keep(call.id, UNKNOWN_TOOL)]
            continue
        turn = turn._replace(phase=Phase.CALLING, queue=rest, beyond=beyond, call=call)
        return turn, [*effects, *([OwnerWords()] if turn.words else []), Ask(call)]
    turn = turn._replace(queue=(), beyond=frozenset(), call=None)
    if turn.steps >= turn.limit:
        return _end(turn, EndReason.MAX_STEPS, turn.said, effects)
    return turn._replace(phase=Phase.ASKING), [*effects, AskModel(turn.steps)]


def _keep_result(turn: Turn, event: Event) -> Step:
    """The owner is told how the call ended, its result is recorded, and the next call goes."""
    assert isinstance(event, Answered | SubAnswered) and turn.call is not None
    outcome = event.outcome if isinstance(event, Answered) else event
    call = turn.call
    effects: list[Effect] = [Tell(tool_shown(call.name), outcome), Keep(call.id, outcome)]
    return _run_calls(turn, turn.queue, turn.beyond, effects)


def _wait_for_owner(turn: Turn, event: Event) -> Step:
    assert isinstance(event, Held) and turn.call is not None
    waits = Waits(turn.call.name, event.approval)
    return turn._replace(phase=Phase.WAITING), [waits, Await(event.approval)]


def _wait_again(turn: Turn, event: Event) -> Step:
    """A long poll ended with the approval still pending: poll again, the owner told once."""
    assert isinstance(event, Held)
    return turn, [Await(event.approval)]


def _fail(turn: Turn, event: Event) -> Step:
    """The model failed, or brokerd is gone: the turn ends `error`, saying why."""
    assert isinstance(event, NotReplied | NoBroker)
    return _end(turn, EndReason.ERROR, "", [Warn(event.why)])


def _stop(turn: Turn, event: Event) -> Step:
    """The owner's stop: a call left without a result reads that the turn was stopped (a
    result that comes later is never sent to the model)."""
    assert isinstance(event, Stopped)
    closed: list[Effect] = [Close(call, Why.CANCELLED, owe=True) for call in event.open]
    ended = turn._replace(phase=Phase.ENDED, call=None, queue=(), said="")
    return ended, [*closed, End(EndReason.CANCELLED, owe=True)]


def _halt(turn: Turn, event: Event) -> Step:
    """End with an error the owner is shown at once, written when it can be; a call left
    without a result reads it too."""
    assert isinstance(event, Halted)
    said = event.said
    closed: list[Effect] = [Close(call, Why.HALTED, said, owe=True) for call in event.open]
    ended = turn._replace(phase=Phase.ENDED, call=None, queue=(), said="")
    return ended, [*closed, Warn(said, owe=True), End(EndReason.ERROR, owe=True)]


_RULES = {
    Rule.BEGIN: _begin,
    Rule.FOLLOW_REPLY: _follow_reply,
    Rule.WEIGH_BUDGET: _weigh_budget,
    Rule.KEEP_RESULT: _keep_result,
    Rule.WAIT_FOR_OWNER: _wait_for_owner,
    Rule.WAIT_AGAIN: _wait_again,
    Rule.FAIL: _fail,
    Rule.STOP: _stop,
    Rule.HALT: _halt,
}
#: `TABLE` with each cell's rule as its function, so that a step looks up one cell.
_STEPS = {cell: _RULES[rule] for cell, rule in TABLE.items()}


def table_markdown() -> str:
    """The table as Markdown, for the docs (`bxcore.state_table`)."""
    return state_table.markdown(TABLE, Phase, Kind)
