"""A turn (SPEC §10.1, §10.3, §10.5): the model answers, its tool calls go to brokerd one by
one, and what comes back is what the model reads next; until it answers without a call or
`max_steps` is reached. Every step is in the session's history before the next begins, so a
turn cut off by a crash resumes where it was, re-sending open calls with their ids (§10.6).
What happens when is the turn's machine (`core.turn`, a pure table); `Turns` is its driver:
it carries out each step's effects (asks the model, asks brokerd, appends records, emits
events) and feeds back what they produced. The model is offered the built-in tools and the
MCP tools brokerd decides now, asked once at the turn's start (§18.4). How brokerd is asked,
and how long it is waited for, is `broker_link`'s.

The owner may stop a running turn (`cancel`, §12.2): its model request or its wait on brokerd
is abandoned, every call left without a result reads `CANCELLED_RESULT`, and the turn, and
each of its sub-agents' running turns, ends `cancelled`.

A turn whose history cannot be written (a full disk, issue 28), or that fails unforeseen
(`broke`), ends with an `error` event and `turn_end`, shown at once, written when it can be.

Each answer's cost is recorded with it and counted in the day's tally (`usage.py`); a turn past
its own token budget, or the one that reaches `[loop] max_tokens_per_day`, ends `budget` after
that answer, and no turn starts once the day's cap is reached (issue 16).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import anyio

from bxcore.client import Client
from bxcore.config.file import Config
from bxcore.errors import one_line
from bxcore.ids import descends, parent_of_sub, valid_session
from bxcore.tools import BROKERED, SPAWN
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    AssistantText,
    Denied,
    Done,
    Event,
    Failed,
    Outcome,
    OwnerSaid,
    Pending,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
    TurnEvent,
    short,
)
from services.loopd import room
from services.loopd.ask import ask_model
from services.loopd.broker_link import BrokerGone, BrokerLink
from services.loopd.core import turn_events
from services.loopd.core.turn import Turn, begin, call_id, step
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
    FinalOutcome,
    Halted,
    Held,
    Keep,
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
from services.loopd.history import (
    ModelReply,
    RecordTooLarge,
    SessionLog,
    Spawned,
    ToolResultRecord,
    encode,
)
from services.loopd.history_write import HistoryUnwritable
from services.loopd.model import Model, ModelError, Offer
from services.loopd.tools import (
    CANCELLED_RESULT,
    CallResult,
    cap_result,
    failed,
    result_of,
    shown_output,
    task_of,
    too_many_calls,
    too_many_calls_said,
)
from services.loopd.usage import BUDGET_RESULT, Meter, Tally

log = logging.getLogger("loopd")

CANCEL_WAIT_S = 10.0  # how long `cancel` waits for a stopped turn to write its end


@dataclass(eq=False)
class Running:
    """A turn being run: what stops it, what says it has ended, and its machine as it stands
    (what a stop steps)."""

    turn: int
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    max_tokens: int | None = None  # its token budget, which its sub-agents spend from too
    ended: anyio.Event = field(default_factory=anyio.Event)
    state: Turn = field(default_factory=lambda: Turn(0, limit=0, cap=0))  # set by `run`

    def __repr__(self) -> str:
        state = "ended" if self.ended.is_set() else "stopping" if self.scope.cancel_called else ""
        return f"Running(turn {self.turn}{', ' + state if state else ''})"


@dataclass(eq=False)
class _Drive:
    """What one run of a turn holds between its steps: the tools offered the model, and the
    client of the call with brokerd (across its approval's polls)."""

    session: SessionLog
    turn: int
    depth: int
    tools: list[Offer] | None = None
    client: Client | None = None


def depth_of(session: str) -> int:
    """How deep a sub-agent is: `sub-<parent>-<n>` is one deeper than its parent (§6.3)."""
    depth = 0
    while (parent := parent_of_sub(session)) is not None:
        session, depth = parent, depth + 1
    return depth


class Turns:
    def __init__(
        self,
        config: Config,
        model: Model,
        broker: Callable[[], Client],
        held: Callable[[str], AbstractContextManager[SessionLog]],
        publish: Callable[[TurnEvent], None],
        has_history: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
        meter: Meter | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.brokerd = BrokerLink(config, broker, clock)
        self._held = held  # a session's history, kept loaded while the context lasts
        self._publish = publish
        self._has_history = has_history  # a session that exists, on disk or in memory
        self._running: dict[str, Running] = {}  # session -> its turn being run now
        cap = config.loop.max_tokens_per_day
        self.meter = meter if meter is not None else Meter(Tally(datetime.UTC), cap)

    def __repr__(self) -> str:
        return f"Turns(model={type(self.model).__name__}, {len(self._running)} running)"

    def running(self, session: str) -> bool:
        """Whether a turn of `session` is being run now (a job's run too, which has no
        worker of its own)."""
        return session in self._running

    async def cancel(self, session: str, waiting: int | None = None) -> int | None:
        """Stop `session`'s running turn and its sub-agents' (§12.2), and wait until each has
        written its end; the session's turn that was running, or None. `waiting`: the turn the
        session's worker is about to run, stopped before it begins (a Stop pressed right after
        Send must not miss it)."""
        own = self._running.get(session)
        if own is None and waiting is not None:
            own = self._running[session] = Running(waiting)  # `run` finds it stopped
        stopping = [r for name, r in self._running.items() if descends(name, session)]
        for running in stopping:
            running.scope.cancel()
        with anyio.move_on_after(CANCEL_WAIT_S):
            for running in stopping:
                await running.ended.wait()
        return own.turn if own is not None else None

    def emit(self, session: SessionLog, turn: int, event: Event, *, owe: bool = False) -> None:
        self._publish(session.event(turn, event, owe=owe))

    async def run(
        self,
        session: SessionLog,
        turn: int,
        *,
        max_steps: int | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """Run (or resume) `turn` of `session` to its end; the model's last words (none when
        the owner stopped it). A job's run gives its own limits (§19): `max_steps`, the
        turn's model calls (else `[loop] max_steps`); `max_tokens`, its token budget, past
        which it ends `budget` after the answer that went past it
        (`session.turn_tokens(turn)` says what it spent)."""
        running = self._running.get(session.session)
        if running is None or running.turn != turn or running.ended.is_set():
            running = self._running[session.session] = Running(turn)
        running.max_tokens = max_tokens
        depth = depth_of(session.session)
        loop = self.config.loop
        limit = loop.max_steps if max_steps is None else max_steps
        cap = loop.max_calls_per_reply
        running.state = begin(turn, limit, cap, max_tokens, words=depth == 0)
        ran = False
        try:
            if running.scope.cancel_called:
                return ""  # stopped before it began: the model is never asked
            with running.scope:
                try:
                    said = await self._drive(session, running, depth)
                except HistoryUnwritable as error:
                    said = room.turn_stopped(error.why, room=error.room)
                    running.state = self._halt(session, running.state, said)
                    said = ""
                ran = True
                return said
            return ""  # the owner's cancel (caught here unless a parent's was cancelled too)
        finally:
            if not ran and running.scope.cancel_called:
                self._stopped(session, running)
            if self._running.get(session.session) is running:
                del self._running[session.session]
            running.ended.set()

    def _stopped(self, session: SessionLog, running: Running) -> None:
        """The end of a turn the owner stopped (the machine's `stop`)."""
        turn = running.state.turn
        running.state = self._settle(session, running.state, Stopped(self._open(session, turn)))
        log.info("%s turn %d stopped by the owner", session.session, turn)

    def broke(self, session: SessionLog, turn: int, error: Exception) -> None:
        """End `turn`, which failed for a reason no one foresaw (its worker logged it)."""
        said = room.turn_stopped(f"loopd failed during this turn: {one_line(error)}", room=False)
        self._halt(session, Turn(turn, limit=0, cap=0), said)  # its run is over: only its end

    def _halt(self, session: SessionLog, state: Turn, said: str) -> Turn:
        """End the turn with an error (the machine's `halt`)."""
        state = self._settle(session, state, Halted(said, self._open(session, state.turn)))
        log.warning("%s turn %d stopped: %s", session.session, state.turn, said)
        return state

    def _settle(self, session: SessionLog, state: Turn, event: Stopped | Halted) -> Turn:
        """Step the turn by an end, which asks only for what is written at once, and write it."""
        state, effects = step(state, event)
        for effect in effects:
            self._show(session, state.turn, effect)
        return state

    @staticmethod
    def _open(session: SessionLog, turn: int) -> tuple[str, ...]:
        """The calls the history holds without a result."""
        return tuple(call.id for call, _ in session.open_calls(turn))

    async def _drive(self, session: SessionLog, running: Running, depth: int) -> str:
        """Step the turn from what its history holds until it ends, carrying out each step's
        effects in order and feeding back what they produced; the model's last words."""
        turn = running.state.turn
        began = Began(
            session.final_answer(turn),
            session.steps(turn),
            tuple(session.open_calls(turn)),
            tuple(call.id for call in session.reply_calls(turn)),
            session.last_text(turn),
            self.meter.refusal(),
        )
        running.state, effects = step(running.state, began)
        drive = _Drive(session, turn, depth)
        try:
            while True:
                fed: turn_events.Event | None = None
                for effect in effects:
                    if isinstance(effect, AskModel | Count | OwnerWords | Ask | Await | Spawn):
                        fed = await self._ask(drive, effect)
                    else:
                        self._show(session, turn, effect)
                if fed is None:
                    return running.state.said
                if drive.client is not None and not isinstance(fed, Held):  # answered
                    drive.client.close()
                    drive.client = None
                running.state, effects = step(running.state, fed)
        finally:
            if drive.client is not None:  # abandoned: its socket is closed, never reused
                drive.client.close()

    async def _ask(
        self, drive: _Drive, effect: AskModel | Count | OwnerWords | Ask | Await | Spawn
    ) -> turn_events.Event | None:
        """Carry out an effect that asks the model, brokerd or a sub-agent, or weighs the
        budgets; what it produced, to feed back (none for the owner's words)."""
        session, turn = drive.session, drive.turn
        if isinstance(effect, AskModel):
            if drive.tools is None:  # asked of brokerd before the model is first asked
                drive.tools = [*self._builtins(drive.depth), *await self.brokerd.mcp_tools()]
            return await self._ask_model(drive, effect.step, drive.tools)
        if isinstance(effect, Count):  # a budget needs its sub-agents' histories read too
            budget = effect.max_tokens
            used = self.spent(session, turn) if budget is not None else 0
            return Counted(self.meter.stop(used, budget))
        if isinstance(effect, OwnerWords):
            await self.brokerd.owner_words(session.session, session.owner_text)
            return None
        if isinstance(effect, Ask):
            drive.client = self.brokerd.client()
            return await _brokered(self.brokerd.call(drive.client, session.session, effect.call))
        if isinstance(effect, Await):
            assert drive.client is not None
            waited = self.brokerd.wait(drive.client, session.session, effect.approval)
            return await _brokered(waited)
        return await self._spawn(session, turn, effect.call, drive.depth)

    def _builtins(self, depth: int) -> list[Offer]:
        return [*BROKERED.values(), *([SPAWN] if depth < self.config.loop.max_depth else [])]

    async def _ask_model(
        self, drive: _Drive, step_: int, tools: list[Offer]
    ) -> Replied | NotReplied:
        """The model's answer for step `step_`, recorded (its calls named by `call_id`)
        before it is fed back; its cost counted today, whether kept or not."""
        session, turn, loop = drive.session, drive.turn, self.config.loop
        system = loop.system_prompt if drive.depth == 0 else loop.subagent_prompt
        asked = session.transcript(turn)
        try:
            reply = await ask_model(self.model, self.config.model, system, asked, tools)
            calls = tuple(
                SentCall(call_id(turn, step_, n), c.id, c.name, c.arguments)
                for n, c in enumerate(reply.tool_calls, 1)
            )
            spent = self.meter.spend(reply.usage)  # paid for, whether kept or not
            session.append(ModelReply(turn, reply.text, calls, spent))
        except (ModelError, RecordTooLarge) as error:
            return NotReplied(str(error))
        return Replied(reply.text, calls)

    def _show(self, session: SessionLog, turn: int, effect: Effect) -> None:
        """Carry out an effect that only shows the owner or records: at once, in order."""
        if isinstance(effect, Say):  # the owner's view is cut as the model's reads are
            self.emit(session, turn, AssistantText(cap_result(effect.text)))
        elif isinstance(effect, Warn):
            self.emit(session, turn, TurnError(short(effect.message)), owe=effect.owe)
        elif isinstance(effect, TooMany):  # each refused call's result says it too
            self.emit(session, turn, TurnError(too_many_calls_said(effect.asked, effect.cap)))
        elif isinstance(effect, End):
            ended = TurnEnd(effect.reason, session.turn_tokens(turn))
            self.emit(session, turn, ended, owe=effect.owe)
        elif isinstance(effect, Close):
            content = self._closed(effect)
            session.append(ToolResultRecord(turn, effect.call, content), owe=effect.owe)
        elif isinstance(effect, Called):
            self.emit(session, turn, ToolCalled(effect.tool, cap_result(effect.arguments)))
        elif isinstance(effect, Waits):
            self.emit(session, turn, ToolPending(effect.tool, effect.approval))
        elif isinstance(effect, Tell):
            self._tell_owner(session, turn, effect.tool, effect.outcome)
        elif isinstance(effect, Keep):
            outcome = effect.outcome
            if isinstance(outcome, SubAnswered):
                content = outcome.content
            else:
                content = result_of(outcome).content
            session.append(ToolResultRecord(turn, effect.call, content))
        else:
            raise AssertionError(f"{effect!r} is not carried out at once")

    def _closed(self, effect: Close) -> str:
        """What the model reads of a call closed without its own result."""
        if effect.why is Why.TOO_MANY:
            return too_many_calls(self.config.loop.max_calls_per_reply).content
        if effect.why is Why.BUDGET:
            return BUDGET_RESULT
        if effect.why is Why.CANCELLED:
            return CANCELLED_RESULT
        return room.call_stopped(effect.said)

    def _tell_owner(
        self, session: SessionLog, turn: int, tool: str, outcome: FinalOutcome | SubAnswered
    ) -> None:
        if isinstance(outcome, SubAnswered):
            size = len(outcome.content.encode())
            shown = shown_output(outcome.content)
            self.emit(session, turn, ToolDone(tool, outcome.ok, size, shown))
        elif isinstance(outcome, Done):
            size = len(outcome.output.encode("utf-8", "replace"))
            shown = shown_output(outcome.output)
            self.emit(session, turn, ToolDone(tool, outcome.ok, size, shown))
        elif isinstance(outcome, Denied):  # the reason only, never the detail (§3.5)
            self.emit(session, turn, ToolDenied(tool, outcome.reason))
        elif isinstance(outcome, Failed):
            self.emit(session, turn, TurnError(short(f"{tool}: {outcome.message}")))

    async def _spawn(
        self, parent: SessionLog, turn: int, call: SentCall, depth: int
    ) -> SubAnswered | NoBroker:
        try:
            result = await self._sub_agent(parent, turn, call, depth)
        except BrokerGone as gone:
            return NoBroker(str(gone))
        return SubAnswered(result.content, result.ok)

    async def _sub_agent(
        self, parent: SessionLog, turn: int, call: SentCall, depth: int
    ) -> CallResult:
        """A sub-agent's turn; its answer reaches the parent only after `absorb` (§6.4)."""
        task = task_of(call.arguments)
        if task is None:
            return failed('spawn takes {"task": "…"}: one string field, nothing else.')
        if depth + 1 > self.config.loop.max_depth:
            return failed(f"sub-agents may be nested at most {self.config.loop.max_depth} deep.")
        child_id = parent.spawns.get(call.id)
        if child_id is None:
            child_id = self._fresh_child(parent)
            if child_id is None:
                return failed("this session's id is too long to start a sub-agent from.")
            first = TurnEvent(child_id, 1, 1, OwnerSaid(task))
            if len(encode(first)) > wire.MAX_MESSAGE // 2:  # it must fit in an event and a page
                return failed("the task is too long for a sub-agent's first message.")
            parent.append(Spawned(turn, call.id, child_id))
        with self._held(child_id) as child:
            if child.turns == 0:
                self.emit(child, 1, OwnerSaid(task))
            left = self._left(parent, turn)
            ran = child.ended(1)
            text = child.last_text(1) if ran else await self.run(child, 1, max_tokens=left)
            failure = child.failure(1)
            stopped = child.stopped(1)
        if not await self.brokerd.absorb(parent.session, child_id):
            return failed("the sub-agent's label could not be taken on, so its answer is held.")
        if stopped:
            return failed("the owner stopped the sub-agent before it answered.")
        if failure is not None:  # a failed spawn is a result the model reads (§10.5)
            return failed(f"the sub-agent stopped with an error: {failure}")
        return CallResult(cap_result(text or "(the sub-agent gave no answer)"), ok=True)

    def spent(self, session: SessionLog, turn: int) -> int:
        """What `turn` has cost: its own answers, and all its session's sub-agents' (a job's
        run is one turn, so its sub-agents are all the session's)."""
        return (session.turn_tokens(turn) or 0) + self._spent_below(session)

    def _spent_below(self, session: SessionLog) -> int:
        total = 0
        for child_id in session.spawns.values():
            if self._has_history(child_id):
                with self._held(child_id) as child:
                    total += (child.tokens or 0) + self._spent_below(child)
        return total

    def _left(self, parent: SessionLog, turn: int) -> int | None:
        """What a sub-agent may spend: what is left of its parent's turn's budget, if any."""
        running = self._running.get(parent.session)
        if running is None or running.max_tokens is None:
            return None
        return max(0, running.max_tokens - self.spent(parent, turn))

    def _fresh_child(self, parent: SessionLog) -> str | None:
        """The next `sub-<parent>-<n>` (n from the spawns so far + 1) that no session has
        used: a spawn never takes over a session with a history (an owner's, from before
        owner sessions were refused the `sub-` form, or another child's). None when the id
        would be too long."""
        n = len(parent.spawns) + 1
        given = set(parent.spawns.values())
        while valid_session(child := f"sub-{parent.session}-{n}"):
            if child not in given and not self._has_history(child):
                return child
            n += 1
        return None


async def _brokered(asked: Awaitable[Outcome]) -> Answered | Held | NoBroker:
    """brokerd's answer to a call, as the turn machine is fed it."""
    try:
        outcome = await asked
    except BrokerGone as gone:
        return NoBroker(str(gone))
    if isinstance(outcome, Pending):
        return Held(outcome.approval)
    return Answered(outcome)
