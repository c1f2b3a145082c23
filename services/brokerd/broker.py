"""The broker socket (SPEC §3.3): every tool call decided, written down, then run confined.

For each `tool_request`: a repeat gets its recorded answer (I8); otherwise the session's label
is read, `policy.decide` decides, the decision is made durable (I1), and an allowed call is
run by the courier; the session is raised by the result's label and that is recorded before
the answer goes out (I3). Approvals are held by `services.brokerd.desk`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Protocol

from bxcore import wire
from bxcore.deny import DenyReason
from bxcore.labels import CLEAN, Label
from bxcore.messages import (
    Absorb,
    AwaitApproval,
    Denied,
    Done,
    Error,
    ErrorCode,
    Failed,
    Outcome,
    State,
    StateQuery,
    ToolRequest,
    ToolResponse,
    short,
)
from services.brokerd.calls import Calls, Key, replay
from services.brokerd.commit import Committer
from services.brokerd.core import policy, records
from services.brokerd.core.grants import Grant
from services.brokerd.core.view import NO_PLACES, OwnPlaces
from services.brokerd.courier import Courier
from services.brokerd.grants_folder import GrantsFolder
from services.brokerd.ledger import Ledger, LedgerUnavailable
from services.brokerd.state import StateError, StateStore

log = logging.getLogger(__name__)

ADMIN_ONLY = frozenset(
    {
        "verdict",
        "pending_query",
        "grants_reload",
        "audit_tail",
        "audit_verify",
        "audit_accept",
        "explain",
    }
)
AUDIT_UNAVAILABLE = Denied(DenyReason.AUDIT_UNAVAILABLE)
#: Room left in a 4 MiB frame for everything in a response but the output.
MAX_OUTPUT_JSON = wire.MAX_MESSAGE - 64 * 1024


def fit_output(output: str) -> str:
    """`output`, cut so that its JSON form fits in one frame (escaping can grow it 6 times)."""
    if len(output.encode("utf-8", "replace")) * 6 <= MAX_OUTPUT_JSON:
        return output
    note = "\n[… cut to fit in one message]"
    cut = output
    while len(json.dumps(cut, ensure_ascii=False).encode("utf-8", "replace")) > MAX_OUTPUT_JSON:
        cut = cut[: len(cut) // 2]
    return cut + note


def decision_entry(
    request: ToolRequest,
    arguments: str,
    label: Label,
    outcome: records.DecisionOutcome,
    grant: Grant | None,
    **more: str | None,
) -> records.Entry:
    """The `decision` record of `request` (`more`: its reason, approval, why)."""
    return records.decision(
        session=request.session,
        call=request.call,
        tool=request.tool,
        arguments=arguments,
        label=label,
        outcome=outcome,
        grant=grant.id if grant else None,
        grant_sha256=grant.sha256 if grant else None,
        **more,
    )


class AskDesk(Protocol):
    """What the broker needs of the approval desk (`services.brokerd.desk.Desk`)."""

    async def ask(
        self, request: ToolRequest, label: Label, ask: policy.Ask, arguments: str
    ) -> Outcome: ...

    async def await_approval(self, message: AwaitApproval) -> Any: ...


class Broker:
    def __init__(
        self,
        *,
        ledger: Ledger,
        committer: Committer,
        state: StateStore,
        grants: GrantsFolder,
        courier: Courier,
        calls: Calls,
        own: OwnPlaces = NO_PLACES,
    ) -> None:
        self.ledger = ledger
        self.committer = committer
        self.state = state
        self.grants = grants
        self.courier = courier
        self.calls = calls
        self.own = own  # boxmaker's own places: never a tool's, whatever the grants say
        self.desk: AskDesk | None = None  # the approval desk, set when it is made

    def __repr__(self) -> str:
        return f"Broker({self.calls!r}, {self.committer!r})"

    async def handle(self, message: Any) -> Any:
        """One request on the broker socket."""
        if isinstance(message, ToolRequest):
            return ToolResponse(message.id, await self.tool_request(message))
        if isinstance(message, AwaitApproval):
            assert self.desk is not None
            return await self.desk.await_approval(message)
        if isinstance(message, Absorb):
            return await self.absorb(message)
        if isinstance(message, StateQuery):
            return self.state_query(message)
        request_id = getattr(message, "id", None)
        if request_id is None:  # an event, say: no id to answer to, so dropped (§3.1)
            return None
        if type(message).TYPE in ADMIN_ONLY:
            return Error(request_id, ErrorCode.WRONG_SOCKET, "this belongs on the admin socket")
        return Error(request_id, ErrorCode.BAD_MESSAGE, f"brokerd does not take {message.TYPE}")

    def state_query(self, message: StateQuery, *, peek: bool = False) -> Any:
        """The session's label; `peek` (the owner asking) never creates a sub-agent's file."""
        look = self.state.peek if peek else self.state.read
        try:
            return State(message.id, message.session, look(message.session))
        except StateError as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))

    async def absorb(self, message: Absorb) -> Any:
        """The parent takes on the child's label (§6.4), recorded."""
        try:
            child = self.state.read(message.child)
            before = self.state.read(message.session)
            after = self.state.raise_(message.session, before, child)
        except StateError as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        try:
            await self.committer.append(
                [records.absorbed(parent=message.session, child=message.child, to=after)]
            )
        except LedgerUnavailable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, f"audit unavailable: {error}")
        return State(message.id, message.session, after)

    # --- tool calls ------------------------------------------------------------------------

    async def tool_request(self, request: ToolRequest) -> Outcome:
        key = (request.session, request.call)
        making = self.calls.making(key)
        if making is not None:
            return await making.wait()
        kept = self.calls.kept(key)
        if kept is not None:
            return kept
        try:
            recorded = self.ledger.lookup(*key)
        except LedgerUnavailable:  # the ledger cannot say whether it was decided: refuse
            return AUDIT_UNAVAILABLE
        if recorded is not None:
            return replay(recorded)
        if not self.committer.available:
            return AUDIT_UNAVAILABLE
        self.calls.start(key)
        outcome: Outcome = Failed("brokerd stopped before this call was answered")
        try:
            outcome = await self._decide(request, key)
        finally:
            self.calls.finish(key, outcome)
        return outcome

    async def _decide(self, request: ToolRequest, key: Key) -> Outcome:
        try:
            label = self.state.read(request.session)
        except StateError as error:
            log.error("%s", error)
            return Failed(f"the session's label cannot be read: {error}")
        decision = policy.decide(
            label, request.tool, request.arguments, self.grants.current().valid, own=self.own
        )
        canonical = decision.args.canonical_json() if decision.args is not None else None
        arguments = records.ledger_arguments(request.arguments, canonical)
        if isinstance(decision, policy.Denied):
            entry = decision_entry(
                request, arguments, label, "denied", decision.grant, reason=decision.reason.value
            )
            if not await self.durable(entry):
                return AUDIT_UNAVAILABLE
            return Denied(decision.reason, decision.detail)
        if isinstance(decision, policy.Ask):
            assert self.desk is not None
            return await self.desk.ask(request, label, decision, arguments)
        entry = decision_entry(request, arguments, label, "allowed", decision.winner)
        if not await self.durable(entry):
            return AUDIT_UNAVAILABLE
        return await self.run(key, decision)

    async def durable(self, entry: records.Entry) -> bool:
        try:
            await self.committer.append([entry])
        except LedgerUnavailable:
            return False
        return True

    async def run(self, key: Key, allowed: policy.Allowed) -> Outcome:
        """Run a call whose allowing record is durable; raise, record, then answer.

        Once a sandbox has started, the session is raised by the winner's label whatever the
        outcome (issue 9): a tool that failed may still have read what the grant shows."""
        session, call = key
        result = await self.courier.run(session, call, allowed)
        failed = result.error is not None
        if failed and not result.started:
            entry = records.executed(
                session=session, call=call, ok=False, exit_code=result.exit, ms=result.ms
            )
            await self.durable(entry)
            return Failed(short(result.error or ""))  # it may quote a long path
        label = allowed.label or result.label or CLEAN
        output = "" if failed else fit_output(result.output)
        data = output.encode("utf-8", "replace")
        try:
            before = self.state.read(session)
            after = self.state.raise_(session, before, label)
        except StateError as error:
            log.error("%s", error)
            return Failed(f"the session's label cannot be raised, so the output is held: {error}")
        entries = [
            records.executed(
                session=session,
                call=call,
                ok=result.ok and not failed,
                exit_code=result.exit,
                output_sha256=None if failed else hashlib.sha256(data).hexdigest(),
                output_bytes=None if failed else len(data),
                label=label,
                ms=result.ms,
            )
        ]
        if after != before:
            entries.append(records.raised(session=session, from_=before, to=after))
        try:
            await self.committer.append(entries)
        except LedgerUnavailable:
            return Failed("the call ran, but the audit log cannot record it, so its output is held")
        if failed:
            return Failed(short(result.error or ""))
        return Done(result.ok, output, label)
