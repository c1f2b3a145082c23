"""What `bxctl status` and `session show` say of tokens (issue 16): the day's line against the
cap, and a session's tokens per turn from its `turn_end` events."""

from __future__ import annotations

import pytest

from bxcore.wire.messages import EndReason, OwnerSaid, Tokens, TurnEnd, TurnEvent
from bxctl.tokens_view import per_turn, session_line, tokens_json, tokens_line


@pytest.mark.parametrize(
    "spent, cap, line, style",
    [
        (1234, 0, "tokens today (2026-12-01): 1,234", None),
        (1234, 5000, "tokens today (2026-12-01): 1,234 of 5,000 ([loop] max_tokens_per_day)", None),
        (
            5000,
            5000,
            "tokens today (2026-12-01): 5,000 of 5,000 ([loop] max_tokens_per_day): no turn "
            "runs until midnight",
            "red",
        ),
    ],
)
def test_the_days_line_says_the_cap_and_turns_red_once_it_is_reached(
    spent: int, cap: int, line: str, style: str | None
) -> None:
    tokens = Tokens("t", "2026-12-01", spent, cap)
    assert tokens_line(tokens) == (line, style)
    assert tokens_json(tokens) == {"day": "2026-12-01", "tokens": spent, "max_per_day": cap}
    assert tokens_json(None) is None


def test_a_sessions_tokens_are_its_turn_ends_and_a_turn_without_figures_is_left_out() -> None:
    events = [
        TurnEvent("s", 1, 1, OwnerSaid("a")),
        TurnEvent("s", 1, 2, TurnEnd(EndReason.DONE, 1200)),
        TurnEvent("s", 2, 3, TurnEnd(EndReason.DONE)),  # its server said nothing
        TurnEvent("s", 3, 4, TurnEnd(EndReason.BUDGET, 34)),
    ]
    assert per_turn(events) == {1: 1200, 3: 34}
    assert session_line(events) == "tokens: 1,234 (turn 1: 1,200, turn 3: 34)"
    assert session_line(events[:1]) is None
