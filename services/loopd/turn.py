"""A turn (SPEC §10.1, §10.3, §10.5): the model answers, its tool calls go to brokerd one by
one, and what comes back is what the model reads next; until it answers without a call or
`max_steps` is reached. Every step is in the session's history before the next begins, so a
turn cut off by a crash resumes where it was, re-sending open calls with their ids (§10.6).
What happens when is the turn's machine (`core.turn`, a pure table); `Turns` is its driver:
it carries out each step's effects (asks the model or brokerd; a `spawn` is run by
`sub_agents`, what is only shown or recorded by `turn_show`) and feeds back what they
produced. The model is offered the built-in tools and the MCP tools brokerd decides now, asked
once at the turn's start (§18.4). How brokerd is asked, and how long it is waited for, is
`broker_link`'s.

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
from bxcore.ids import descends
from bxcore.tools import BROKERED, SPAWN
from bxcore.wire.messages import Event, Outcome, Pending, TurnEvent
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
    Count,
    Counted,
    Halted,
    Held,
    NoBroker,
    NotReplied,
    OwnerWords,
    Replied,
    SentCall,
    Spawn,
    Stopped,
)
from services.loopd.history import SessionLog
from services.loopd.history_records import ModelReply, RecordTooLarge
from services.loopd.history_write import HistoryUnwritable
from services.loopd.model import Model, ModelError, Offer
from services.loopd.sub_agents import SubAgents, depth_of
from services.loopd.turn_show import show
from services.loopd.usage import Meter, Tally

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
    """What one run of a turn holds between its steps: its depth and token budget, the tools
    offered the model, and the client of the call with brokerd (across its approval's polls)."""

    session: SessionLog
    turn: int
    depth: int
    budget: int | None  # its token budget (`Running.max_tokens`)
    tools: list[Offer] | None = None
    client: Client | None = None


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
        self._publish = publish
        self._running: dict[str, Running] = {}  # session -> its turn being run now
        self.sub_agents = SubAgents(
            config,
            self.brokerd,
            held,
            has_history,
            publish,
            lambda child, budget: self.run(child, 1, max_tokens=budget),  # its one turn
        )
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
        cap = self.config.loop.max_calls_per_reply
        for effect in effects:
            show(session, state.turn, effect, self._publish, cap)
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
        drive = _Drive(session, turn, depth, running.max_tokens)
        cap = self.config.loop.max_calls_per_reply
        try:
            while True:
                fed: turn_events.Event | None = None
                for effect in effects:
                    if isinstance(effect, AskModel | Count | OwnerWords | Ask | Await | Spawn):
                        fed = await self._ask(drive, effect)
                    else:
                        show(session, turn, effect, self._publish, cap)
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
            used = self.sub_agents.spent(session, turn) if budget is not None else 0
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
        return await self.sub_agents.spawn(session, turn, effect.call, drive.depth, drive.budget)

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


async def _brokered(asked: Awaitable[Outcome]) -> Answered | Held | NoBroker:
    """brokerd's answer to a call, as the turn machine is fed it."""
    try:
        outcome = await asked
    except BrokerGone as gone:
        return NoBroker(str(gone))
    if isinstance(outcome, Pending):
        return Held(outcome.approval)
    return Answered(outcome)
