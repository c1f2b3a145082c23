"""What `bxctl status` and `bxctl session show` say of tokens (SPEC §19, issue 16): the box's
tokens today against `[loop] max_tokens_per_day`, asked of loopd, and a session's per turn and
in all, read from its `turn_end` events. Asking loopd never fails `status`: a loopd that does
not run or answer leaves the figures out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bxcore.home.layout import Home
from bxcore.wire.messages import (
    Error,
    ServiceInfo,
    ServiceState,
    Tokens,
    TokensQuery,
    TurnEnd,
    TurnEvent,
)
from bxctl.output import CommandError
from bxctl.owner_link import OwnerLink, request_id


def today(home: Home, services: Sequence[ServiceInfo]) -> Tokens | None:
    """loopd's figures for today; None when loopd does not run or does not answer them."""
    if not any(s.name == "loopd" and s.state is ServiceState.RUNNING for s in services):
        return None
    try:
        with OwnerLink(home, "loop") as link:
            answer = link.ask(TokensQuery(request_id("bxctl")))
    except CommandError:
        return None
    return None if isinstance(answer, Error) else answer


def tokens_json(tokens: Tokens | None) -> dict[str, Any] | None:
    if tokens is None:
        return None
    return {"day": tokens.day, "tokens": tokens.tokens, "max_per_day": tokens.max_per_day}


def tokens_line(tokens: Tokens) -> tuple[str, str | None]:
    """The line `status` prints, and its style: red once the cap is reached."""
    if not tokens.max_per_day:
        return f"tokens today ({tokens.day}): {tokens.tokens:,}", None
    share = f"{tokens.tokens:,} of {tokens.max_per_day:,} ([loop] max_tokens_per_day)"
    if tokens.tokens >= tokens.max_per_day:
        return f"tokens today ({tokens.day}): {share}: no turn runs until midnight", "red"
    return f"tokens today ({tokens.day}): {share}", None


def per_turn(events: Sequence[TurnEvent]) -> dict[int, int]:
    """Each ended turn's tokens, from its `turn_end` (turns whose model said none left out)."""
    return {
        e.turn: e.event.tokens
        for e in events
        if isinstance(e.event, TurnEnd) and e.event.tokens is not None
    }


def session_line(events: Sequence[TurnEvent]) -> str | None:
    """`tokens: 1,234 (turn 1: 1,000, turn 2: 234)`, or None when no turn said any."""
    turns = per_turn(events)
    if not turns:
        return None
    each = ", ".join(f"turn {turn}: {tokens:,}" for turn, tokens in sorted(turns.items()))
    return f"tokens: {sum(turns.values()):,} ({each})"
