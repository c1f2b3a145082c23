"""What a turn asks brokerd (SPEC §9.3, §18.4, §6.4, §20): each tool call, sent as `tool_request`,
and each long poll of its approval (`await_approval`), on one client a call; the owner's words
of the session's turns sent before it (`owner_words`); the MCP tools brokerd decides now, the
list it gave last kept while it does not answer; a sub-agent's label taken on by its parent
(`absorb`). It decides nothing and writes no history: the turn records what comes back.
A brokerd that does not answer at all is `BrokerGone`, and the turn stops.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping

from bxcore.bounded import Bounded
from bxcore.client import AskFailed, Client
from bxcore.config.file import Config
from bxcore.deny import DenyReason
from bxcore.wire import codec as wire
from bxcore.wire.asking import Patience, patience
from bxcore.wire.messages import (
    MAX_OWNER_WORDS,
    Absorb,
    AwaitApproval,
    Denied,
    Error,
    Failed,
    Outcome,
    OwnerWords,
    ToolRequest,
    ToolsQuery,
)
from services.loopd.core.turn_events import SentCall
from services.loopd.model import Offer
from services.loopd.schemas import mcp_tools

log = logging.getLogger("loopd")

WAIT_MS = 30_000  # one long poll for an approval (§9.3)
TOO_LARGE = "invalid argument shape: the arguments are too large to send to the broker"
TOOLS_QUIET_S = 30.0  # after brokerd did not answer it, how long turns use the last list
WORDS_SESSIONS = 4096  # sessions whose turns' words brokerd is known to hold


class BrokerGone(Exception):
    """brokerd did not answer at all: the turn cannot go on."""


class BrokerLink:
    """A turn's questions to brokerd, each on a fresh client from `broker`."""

    def __init__(
        self,
        config: Config,
        broker: Callable[[], Client],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._broker = broker
        longest = max(config.sandbox.shell_timeout_s, config.sandbox.fetch_timeout_s)
        # As many tries as the longest tool may run, a try 10 s: a retry joins the call in
        # flight (I8), so a slow tool is waited for, not run again.
        self._call_tries = int(longest // 10) + 4
        self._clock = clock
        self._mcp_known: list[Offer] = []  # the MCP tools brokerd offered last
        self._mcp_quiet_until = -float("inf")  # brokerd did not answer: not asked until then
        self._words_kept: Bounded[str, set[int]] = Bounded(WORDS_SESSIONS, recency=True)

    def __repr__(self) -> str:
        return f"BrokerLink({len(self._mcp_known)} MCP tools known)"

    def client(self) -> Client:
        """A fresh client for one call: its request and every long poll of its approval go on
        it; the caller closes it once the call is answered (or abandoned)."""
        return self._broker()

    async def call(self, client: Client, session: str, call: SentCall) -> Outcome:
        """Send one tool call, asked until it is answered: its outcome, or `pending` while
        its approval waits for the owner."""
        request = ToolRequest(_rid(), session, call.id, call.name, call.arguments)
        if len(wire.encode(request)) > wire.MAX_MESSAGE:  # brokerd would never receive it
            return Denied(DenyReason.INVALID_ARGUMENTS, TOO_LARGE)
        return await self._ask(client, request)

    async def wait(self, client: Client, session: str, approval: str) -> Outcome:
        """One long poll of an approval's call: its outcome once settled, else `pending`."""
        return await self._ask(client, AwaitApproval(_rid(), session, approval, WAIT_MS))

    async def _ask(self, client: Client, request: ToolRequest | AwaitApproval) -> Outcome:
        table = patience("broker", request)
        each = Patience(self._call_tries, table.timeout_s, table.why, table.long_poll)
        try:
            answer = await client.ask(request, patience=each)
        except AskFailed as error:
            raise BrokerGone(f"brokerd is not reachable, so the turn stops: {error}") from None
        if isinstance(answer, Error):
            return Failed(f"brokerd refused the request: {answer.message}")
        return answer.outcome

    async def owner_words(self, session: str, said: Mapping[int, str]) -> None:
        """Give brokerd each turn's owner's words (`said`: turn → what the owner typed) it is
        not known to hold yet, oldest first (§20): before a tool call, so that brokerd can
        tell the owner's values from the rest. A turn brokerd refuses or does not answer is
        asked again before the next call; meanwhile the call is decided without those words
        (it asks the owner where they would have mattered)."""
        kept = self._words_kept.get(session)
        if kept is None:
            kept = set()
            self._words_kept.put(session, kept)
        missing = sorted(turn for turn in said if turn not in kept)
        if not missing:
            return
        client = self._broker()
        try:
            for turn in missing:
                text = _fit(said[turn], MAX_OWNER_WORDS)
                try:
                    answer = await client.ask(OwnerWords(_rid(), session, turn, text))
                except AskFailed as error:
                    log.warning(
                        "%s: the owner's words of turn %d were not given: %s", session, turn, error
                    )
                    return
                if isinstance(answer, Error):
                    log.warning(
                        "%s: brokerd did not keep turn %d's words: %s",
                        session,
                        turn,
                        answer.message,
                    )
                else:
                    kept.add(turn)
        finally:
            client.close()

    async def mcp_tools(self) -> list[Offer]:
        """The MCP tools brokerd decides now (§18.4); none when it does not take the question
        (its refusal is logged); the last list when it does not answer (a brokerd restarting,
        or none at all: the turn goes on, and every call is still brokerd's to decide)."""
        if self._clock() < self._mcp_quiet_until:
            return self._mcp_known
        client = self._broker()
        try:
            answer = await client.ask(ToolsQuery(_rid()))
        except AskFailed as error:
            log.warning("offering the MCP tools brokerd listed last: %s", error)
            self._mcp_quiet_until = self._clock() + TOOLS_QUIET_S
            return self._mcp_known
        finally:
            client.close()
        if isinstance(answer, Error):
            log.warning("brokerd offered no MCP tools: %s", answer.message)
            self._mcp_known = []
        else:
            self._mcp_known = [*mcp_tools(answer.tools)]
        return self._mcp_known

    async def absorb(self, parent: str, child: str) -> bool:
        """Whether brokerd took a sub-agent's label on into its parent's (§6.4)."""
        client = self._broker()
        try:
            absorbed = await client.ask(Absorb(_rid(), parent, child))
        except AskFailed as error:
            raise BrokerGone(f"brokerd is not reachable, so the turn stops: {error}") from None
        finally:
            client.close()
        return not isinstance(absorbed, Error)


def _fit(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, on a character's edge."""
    data = text.encode("utf-8", "replace")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _rid() -> str:
    return f"l-{secrets.token_hex(8)}"
