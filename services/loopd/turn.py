"""A turn (SPEC §10.1, §10.3, §10.5): the model answers, its tool calls go to brokerd one by
one, and what comes back is what the model reads next; until it answers without a call or
`max_steps` is reached. Every step is in the session's history before the next begins, so a
turn cut off by a crash resumes where it was, re-sending open calls with their ids (§10.6).
The model is offered the built-in tools and the MCP tools brokerd decides now, asked once at
the turn's start (§18.4). How brokerd is asked, and how long it is waited for, is
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
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import anyio

from bxcore import wire
from bxcore.client import Client
from bxcore.config import Config
from bxcore.deny import DenyReason
from bxcore.errors import one_line
from bxcore.ids import MAX_TOOL_NAME, byte_length_between, descends, parent_of_sub, valid_session
from bxcore.messages import (
    AssistantText,
    Denied,
    Done,
    EndReason,
    Event,
    Failed,
    OwnerSaid,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
    TurnEvent,
    short,
)
from bxcore.tools import BROKERED, SPAWN
from services.loopd import room
from services.loopd.ask import ask_model
from services.loopd.broker_link import BrokerGone, BrokerLink
from services.loopd.history import (
    Call,
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
    FinalOutcome,
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
    """A turn being run: what stops it, and what says it has ended."""

    turn: int
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    max_tokens: int | None = None  # its token budget, which its sub-agents spend from too
    ended: anyio.Event = field(default_factory=anyio.Event)

    def __repr__(self) -> str:
        state = "ended" if self.ended.is_set() else "stopping" if self.scope.cancel_called else ""
        return f"Running(turn {self.turn}{', ' + state if state else ''})"


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
        ran = False
        try:
            if running.scope.cancel_called:
                return ""  # stopped before it began: the model is never asked
            with running.scope:
                try:
                    said = await self._run(session, turn, max_steps, max_tokens)
                except HistoryUnwritable as error:
                    self._halt(session, turn, room.turn_stopped(error.why, room=error.room))
                    said = ""
                ran = True
                return said
            return ""  # the owner's cancel (caught here unless a parent's was cancelled too)
        finally:
            if not ran and running.scope.cancel_called:
                self._stopped(session, turn)
            if self._running.get(session.session) is running:
                del self._running[session.session]
            running.ended.set()

    def _stopped(self, session: SessionLog, turn: int) -> None:
        """The end of a turn the owner stopped: a call left without a result reads that the
        turn was stopped (a result that comes later is never sent to the model)."""
        for call, _ in session.open_calls(turn):
            session.append(ToolResultRecord(turn, call.id, CANCELLED_RESULT), owe=True)
        self._end(session, turn, EndReason.CANCELLED, owe=True)
        log.info("%s turn %d stopped by the owner", session.session, turn)

    def broke(self, session: SessionLog, turn: int, error: Exception) -> None:
        """End `turn`, which failed for a reason no one foresaw (its worker logged it)."""
        said = room.turn_stopped(f"loopd failed during this turn: {one_line(error)}", room=False)
        self._halt(session, turn, said)

    def _halt(self, session: SessionLog, turn: int, said: str) -> None:
        """End `turn` with an error; a call left without a result reads it too."""
        for call, _ in session.open_calls(turn):
            session.append(ToolResultRecord(turn, call.id, room.call_stopped(said)), owe=True)
        self.emit(session, turn, TurnError(short(said)), owe=True)
        self._end(session, turn, EndReason.ERROR, owe=True)
        log.warning("%s turn %d stopped: %s", session.session, turn, said)

    def _end(self, session: SessionLog, turn: int, reason: EndReason, *, owe: bool = False) -> None:
        self.emit(session, turn, TurnEnd(reason, session.turn_tokens(turn)), owe=owe)

    async def _run(
        self, session: SessionLog, turn: int, max_steps: int | None, max_tokens: int | None
    ) -> str:
        depth = depth_of(session.session)
        loop = self.config.loop
        limit = loop.max_steps if max_steps is None else max_steps
        system = loop.system_prompt if depth == 0 else loop.subagent_prompt
        builtins: list[Offer] = [*BROKERED.values(), *([SPAWN] if depth < loop.max_depth else [])]
        tools: list[Offer] | None = None  # asked of brokerd before the model is first asked
        final = session.final_answer(turn)
        if final is not None:  # the model had answered: only the turn's end is missing
            text, shown = final
            if text and not shown:
                self.emit(session, turn, AssistantText(cap_result(text)))
            self._end(session, turn, EndReason.DONE)
            return text
        refused = self.meter.refusal() if session.steps(turn) == 0 else None
        if refused is not None:  # a turn the day's cap keeps from starting
            self.emit(session, turn, TurnError(short(refused)))
            self._end(session, turn, EndReason.BUDGET)
            return ""
        try:
            open_calls = session.open_calls(turn)
            await self._answer(session, turn, depth, open_calls, session.reply_calls(turn))
            while True:
                step = session.steps(turn)
                if step >= limit:
                    self._end(session, turn, EndReason.MAX_STEPS)
                    return session.last_text(turn)
                if tools is None:
                    tools = [*builtins, *await self.brokerd.mcp_tools()]
                asked = session.transcript(turn)
                try:
                    reply = await ask_model(self.model, self.config.model, system, asked, tools)
                    calls = tuple(
                        Call(f"{turn}-{step}-{n}", c.id, c.name, c.arguments)
                        for n, c in enumerate(reply.tool_calls, 1)
                    )
                    spent = self.meter.spend(reply.usage)  # paid for, whether kept or not
                    session.append(ModelReply(turn, reply.text, calls, spent))
                except (ModelError, RecordTooLarge) as error:
                    self.emit(session, turn, TurnError(short(str(error))))
                    self._end(session, turn, EndReason.ERROR)
                    return ""
                if reply.text:  # the owner's view is cut as the model's reads are
                    self.emit(session, turn, AssistantText(cap_result(reply.text)))
                if not calls:
                    self._end(session, turn, EndReason.DONE)
                    return reply.text
                # a budget needs what the turn spent, its sub-agents' histories read for it
                used = self.spent(session, turn) if max_tokens is not None else 0
                over = self.meter.stop(used, max_tokens)
                if over is not None:  # the answer is kept; its calls never run
                    for call in calls:
                        session.append(ToolResultRecord(turn, call.id, BUDGET_RESULT))
                    self.emit(session, turn, TurnError(short(over)))
                    self._end(session, turn, EndReason.BUDGET)
                    return reply.text
                cap = loop.max_calls_per_reply
                if len(calls) > cap:  # once a reply; each refused call's result says it too
                    self.emit(session, turn, TurnError(too_many_calls_said(len(calls), cap)))
                await self._answer(session, turn, depth, [(c, False) for c in calls], calls)
        except BrokerGone as gone:
            self.emit(session, turn, TurnError(short(str(gone))))
            self._end(session, turn, EndReason.ERROR)
            return ""

    async def _answer(
        self,
        session: SessionLog,
        turn: int,
        depth: int,
        open_calls: Sequence[tuple[Call, bool]],
        reply_calls: Sequence[Call],
    ) -> None:
        """Give each open call of a reply its result, in the model's order: the first
        `max_calls_per_reply` of the reply go to brokerd (or spawn), every later one is
        answered `too_many_calls` and goes nowhere, also when a turn is resumed."""
        cap = self.config.loop.max_calls_per_reply
        beyond = {call.id for call in reply_calls[cap:]}
        for call, shown in open_calls:
            if call.id in beyond:
                session.append(ToolResultRecord(turn, call.id, too_many_calls(cap).content))
            else:
                await self._call(session, turn, call, depth, shown=shown)

    async def _call(
        self, session: SessionLog, turn: int, call: Call, depth: int, *, shown: bool = False
    ) -> None:
        """One tool call, start to result; the result is recorded before the next step.
        `shown`: the owner already saw it called (a call re-sent after a restart)."""
        tool = call.name if byte_length_between(call.name, 1, MAX_TOOL_NAME) else "?"
        if not shown:
            self.emit(session, turn, ToolCalled(tool, cap_result(call.arguments)))
        if call.name == SPAWN.name:
            result = await self._spawn(session, turn, call, depth)
            size = len(result.content.encode())
            self.emit(session, turn, ToolDone(tool, result.ok, size, shown_output(result.content)))
        else:
            if tool == "?":  # no tool has such a name, and the wire cannot carry it
                outcome: FinalOutcome = Denied(DenyReason.UNKNOWN_TOOL)
            else:
                if depth == 0:  # a sub-agent's words are its parent's (its task is the model's)
                    await self.brokerd.owner_words(session.session, session.owner_text)
                outcome = await self.brokerd.call(
                    session.session,
                    call,
                    lambda approval: self.emit(session, turn, ToolPending(call.name, approval)),
                )
            self._tell_owner(session, turn, tool, outcome)
            result = result_of(outcome)
        session.append(ToolResultRecord(turn, call.id, result.content))

    def _tell_owner(self, session: SessionLog, turn: int, tool: str, outcome: FinalOutcome) -> None:
        if isinstance(outcome, Done):
            size = len(outcome.output.encode("utf-8", "replace"))
            shown = shown_output(outcome.output)
            self.emit(session, turn, ToolDone(tool, outcome.ok, size, shown))
        elif isinstance(outcome, Denied):  # the reason only, never the detail (§3.5)
            self.emit(session, turn, ToolDenied(tool, outcome.reason))
        elif isinstance(outcome, Failed):
            self.emit(session, turn, TurnError(short(f"{tool}: {outcome.message}")))

    async def _spawn(self, parent: SessionLog, turn: int, call: Call, depth: int) -> CallResult:
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
