"""memoryd's shell (SPEC §11): binds the memory socket and runs brokerd's memory calls.

Only brokerd sends here, after it decided and recorded the call. A note takes the session's
label from brokerd (`state_query`), never from the request, and a forget reaches only what that
label may see: if brokerd does not say, nothing is stored or deleted. The rules live in `store`
and `arguments`; this translates messages and errors.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable

import zmq.asyncio

from bxcore.client import AskFailed, Client
from bxcore.clock import now_ms
from bxcore.daemon import Context, StartError
from bxcore.labels import CLEAN, Label
from bxcore.router import Router
from bxcore.routes import Refusal, Route, Routes
from bxcore.tools import ToolName
from bxcore.wire.asking import Patience
from bxcore.wire.messages import (
    Done,
    Error,
    ErrorCode,
    Failed,
    NoteInfo,
    Notes,
    NotesQuery,
    Outcome,
    StateQuery,
    ToolRequest,
    ToolResponse,
    short,
)
from bxcore.wire.sockets import MemoryAnswer, MemoryRequest
from services.memoryd import arguments
from services.memoryd.arguments import ArgumentsError, Forget, Recall
from services.memoryd.recall import Answer
from services.memoryd.store import CallReused, Store, StoreError

log = logging.getLogger("memoryd")

LABEL = Patience(2, 1.5, "a try fails before brokerd's 5 s wait for memoryd does")
MAX_MESSAGE = 1000  # characters of a `Failed` message
BROWSE_LIMIT = 200  # notes in one answer to the owner's notes_query
REFUSAL = Refusal(
    "memoryd takes only memory tool_request and notes_query"
)  # any other message, or tool

LabelAsker = Callable[[str], Awaitable[Label]]


class LabelUnknown(Exception):
    """brokerd did not say what the session's label is; the text says why."""


def ask_broker(ctx: zmq.asyncio.Context, endpoint: str) -> LabelAsker:
    """A `LabelAsker` that sends `state_query` to brokerd, a fresh socket per question."""

    async def ask(session: str) -> Label:
        query = StateQuery(f"m-{secrets.token_hex(8)}", session)
        try:
            async with Client(ctx, endpoint, socket="broker") as client:
                answer = await client.ask(query, patience=LABEL)
        except AskFailed as error:
            raise LabelUnknown(str(error)) from None
        if isinstance(answer, Error):
            raise LabelUnknown(f"brokerd answered {answer.code.value}: {answer.message}")
        if answer.session != session:
            raise LabelUnknown(f"brokerd answered for session {answer.session}, not {session}")
        return answer.label

    return ask


class Memory:
    """Answers memory `tool_request`s from a store; asks `label_of` for a note's label.
    `routes` is the memory socket's table."""

    def __init__(self, store: Store, label_of: LabelAsker, now: Callable[[], int] = now_ms) -> None:
        self.store = store
        self._label_of = label_of
        self._now = now
        self._served = 0
        self.routes: Routes[MemoryAnswer] = Routes(
            MemoryRequest,
            REFUSAL,
            Route(ToolRequest, self.tool_request),
            Route(NotesQuery, self.notes_query),
        )

    def __repr__(self) -> str:
        return f"Memory({self.store!r}, served {self._served})"

    async def tool_request(self, message: ToolRequest) -> ToolResponse | Error:
        """A memory call; a call of any other tool is refused as any other message is."""
        if message.tool != ToolName.MEMORY:
            return Error(message.id, REFUSAL.code, REFUSAL.text)
        outcome = await self.run(message)
        self._served += 1
        return ToolResponse(message.id, outcome)

    async def notes_query(self, message: NotesQuery) -> Notes | Error:
        """The owner's look at the notes, asked through brokerd's admin socket (§12.2)."""
        try:
            found, total = self.store.browse(message.query, BROWSE_LIMIT)
        except StoreError as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(f"memory: {error}"))
        infos = tuple(
            NoteInfo(n.id, n.session, n.label, len(n.text.encode()), n.created, short(n.text))
            for n in found
        )
        return Notes(message.id, infos, total)

    async def run(self, request: ToolRequest) -> Outcome:
        try:
            action = arguments.parse(request.arguments)
        except ArgumentsError as error:
            return _failed(f"memory: the arguments do not parse: {error}")
        try:
            answer = await self._act(request, action)
        except LabelUnknown as error:
            return _failed(f"cannot learn the session's label from brokerd: {error}")
        except StoreError as error:
            return _failed(f"memory: {error}")
        log.info(
            "%s %s/%s: %s", type(action).__name__.lower(), request.session, request.call,
            "ok" if answer.ok else "not ok",
        )  # fmt: skip
        return Done(answer.ok, answer.output, answer.label)

    async def _act(self, request: ToolRequest, action: arguments.Action) -> Answer:
        session, call, args = request.session, request.call, request.arguments
        if isinstance(action, Recall):
            return self.store.recall(action.query)  # reads only: run again on a retry
        before = self.store.remembered(session, call)
        if before is not None:
            if before.arguments != args:
                raise CallReused.of(session, call)
            return before.answer  # a retry: the same answer, nothing done again
        if isinstance(action, Forget):  # only what the session's label may see (issue 14)
            label = await self._label_of(session)
            return self.store.forget(session, call, args, action.id, label, self._now())
        if not action.text.strip():
            return Answer(False, "nothing noted: the text is empty", CLEAN)
        label = await self._label_of(session)
        return self.store.note(session, call, args, action.text, label, self._now())


def _failed(message: str) -> Failed:
    one_line = " ".join(message.split())
    if len(one_line) > MAX_MESSAGE:
        one_line = one_line[: MAX_MESSAGE - 1] + "…"
    return Failed(one_line)


async def serve(ctx: Context) -> None:
    """Open the store, bind the memory socket, serve until cancelled, close the store."""
    try:
        store = Store.open(ctx.home.memory_db)
    except StoreError as error:
        raise StartError(str(error)) from None
    try:
        memory = Memory(store, ask_broker(ctx.zmq, ctx.endpoint("broker")))
        endpoint = ctx.endpoint("memory")
        router = Router(ctx.zmq, endpoint, memory.routes, service="memoryd")  # or SetupError
        log.info("serving %s with %s", endpoint, store.path)
        await router.serve()
    finally:
        store.close()
