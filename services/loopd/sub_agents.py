"""A sub-agent's run (SPEC §6.3, §6.4, §10.5): a `spawn` call's task becomes the first
owner message of a fresh session `sub-<parent>-<n>`, whose one turn runs to its end; its answer
reaches the parent only after brokerd took the sub-agent's label on (`absorb`), and a failed
spawn is a result the parent's model reads. What a turn has cost counts its sub-agents'
answers, and a sub-agent spends from what is left of its parent's budget (issue 16). The turn
that runs a sub-agent is `Turns`' (`services.loopd.turn`), which hands it `run`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

from bxcore.config.file import Config
from bxcore.ids import parent_of_sub, valid_session
from bxcore.wire import codec as wire
from bxcore.wire.messages import OwnerSaid, TurnEvent
from services.loopd.broker_link import BrokerGone, BrokerLink
from services.loopd.core.turn_events import NoBroker, SentCall, SubAnswered
from services.loopd.history import SessionLog
from services.loopd.history_records import Spawned, encode
from services.loopd.tools import CallResult, cap_result, failed, task_of

#: Run a sub-agent's turn 1 to its end with a token budget (None: none); its last words.
RunTurn = Callable[[SessionLog, int | None], Awaitable[str]]


def depth_of(session: str) -> int:
    """How deep a sub-agent is: `sub-<parent>-<n>` is one deeper than its parent (§6.3)."""
    depth = 0
    while (parent := parent_of_sub(session)) is not None:
        session, depth = parent, depth + 1
    return depth


class SubAgents:
    def __init__(
        self,
        config: Config,
        brokerd: BrokerLink,
        held: Callable[[str], AbstractContextManager[SessionLog]],
        has_history: Callable[[str], bool],
        publish: Callable[[TurnEvent], None],
        run: RunTurn,
    ) -> None:
        self.config = config
        self.brokerd = brokerd
        self._held = held  # a session's history, kept loaded while the context lasts
        self._has_history = has_history  # a session that exists, on disk or in memory
        self._publish = publish
        self._run = run

    def __repr__(self) -> str:
        return f"SubAgents(max_depth={self.config.loop.max_depth})"

    async def spawn(
        self, parent: SessionLog, turn: int, call: SentCall, depth: int, budget: int | None
    ) -> SubAnswered | NoBroker:
        """Run `call`'s sub-agent of `parent`'s `turn` (run `depth` deep, under a token
        `budget` or none); what the turn machine is fed."""
        try:
            result = await self._answer(parent, turn, call, depth, budget)
        except BrokerGone as gone:
            return NoBroker(str(gone))
        return SubAnswered(result.content, result.ok)

    async def _answer(
        self, parent: SessionLog, turn: int, call: SentCall, depth: int, budget: int | None
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
                self._publish(child.event(1, OwnerSaid(task)))
            left = None if budget is None else max(0, budget - self.spent(parent, turn))
            ran = child.ended(1)
            text = child.last_text(1) if ran else await self._run(child, left)
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
