"""What the owner reads of a turn and of an approval (SPEC §9.1, §10.4, §13), as text.

Pure: no I/O. Everything that came from the model (text, tool names, arguments) passes
through `visible`, so a hostile model cannot move the cursor, clear a line or reorder text on
the owner's terminal. Every line of a turn is shown in the agent's gutter (`AGENT`), cut to
the terminal's width so the terminal never wraps it: a row that does not start with the
marker is the box's own (a card, a prompt, a verdict), and the model cannot draw one. A
denial is shown by its sentence (`no grant allows this call`), a tool's output folded unless
asked for; a `write_file`'s preview and where each target came from (§20) on its card.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from bxcore.deny import denial_clause
from bxcore.owner_text import card_body  # the lines every owner surface shows
from bxcore.visible import visible
from bxcore.wire.messages import ApprovalInfo, ApprovalState, Error, ErrorCode, Settled

AGENT = "agent│ "  # the gutter of every line of a turn; no line of the box starts with it
CARD_CONTINUES = "      "  # where a card's line goes on when it is wider than the terminal
TAB = 4


# --- fitting lines to a terminal ------------------------------------------------------------


def cells(char: str) -> int:
    """The columns `char` may take on a terminal, counted high (an ambiguous or wide one as
    two, a combining one as one): a piece cut by this count is never wider than reckoned."""
    return 2 if unicodedata.east_asian_width(char) in ("W", "F", "A") else 1


def columns(text: str) -> int:
    return sum(cells(char) for char in text)


def pieces(line: str, width: int, *, words: bool = False) -> list[str]:
    """`line` cut into pieces of at most `width` columns (at least one character each), every
    character kept. With `words`, a piece that would end inside a word ends at the row's last
    space instead, when it has one, and the one space a row breaks at is left out (as any
    word wrapper does)."""
    found: list[str] = []
    start = used = 0
    index = 0
    while index < len(line):
        size = cells(line[index])
        if used + size > width and index > start:
            if words and line[index] == " ":
                found.append(line[start:index])
                start = index = index + 1
                used = 0
                continue
            space = line.rfind(" ", start + 1, index) if words else -1
            if space > start:
                found.append(line[start:space])
                start, used = space + 1, columns(line[space + 1 : index])
            else:
                found.append(line[start:index])
                start, used = index, 0
        used += size
        index += 1
    found.append(line[start:])
    return found


def fitted(
    line: str, width: int | None, first: str, rest: str, *, words: bool = False
) -> list[str]:
    """`line` after `first`, going on after `rest` on as many rows as it takes, each row at
    most `width` columns (`None`: one row, however long), broken between words if `words`.
    A row with nothing after its lead-in ends where the lead-in's text does."""
    line = line.expandtabs(TAB)
    if width is None:
        parts = [line]
    else:
        parts = pieces(line, max(1, width - max(columns(first), columns(rest))), words=words)
    return [_row(first, parts[0]), *(_row(rest, part) for part in parts[1:])]


def _row(lead: str, text: str) -> str:
    return lead + text if text else lead.rstrip()


def agent_lines(lines: Iterable[str], width: int | None = None) -> list[str]:
    """Each line in the agent's gutter, every row of it (an empty one, a wrapped one too),
    wrapped between words where it can be."""
    return [row for line in lines for row in fitted(line, width, AGENT, AGENT, words=True)]


def card_lines(lines: Iterable[str], width: int | None = None) -> list[str]:
    """A card's lines fitted to `width`: a line too long goes on indented, never at the left
    margin, where only the box starts a row."""
    return [row for line in lines for row in fitted(line, width, "", CARD_CONTINUES)]


def approval_card(info: ApprovalInfo, now_ms: int, width: int | None = None) -> list[str]:
    """One pending approval with everything the owner decides on: every argument, whole,
    fitted to `width` (wrapping, never cutting)."""
    return card_lines(card_body(info, now_ms), width)


def verdict_line(approval: str, answer: Any) -> tuple[str, bool]:
    """What became of a verdict, in one line, and whether it went as the owner asked."""
    if isinstance(answer, Settled):
        if answer.state is ApprovalState.REFUSED:
            return f"denied {approval}: the call is refused", True
        if answer.reason is None:
            return f"approved {approval}: the call runs", True
        why = denial_clause(answer.reason)
        return f"approved {approval}, but the call is denied now: {why}", False
    if isinstance(answer, Error):
        if answer.code is ErrorCode.ALREADY_SETTLED:
            return f"already settled: {visible(answer.message)}", False
        if answer.code is ErrorCode.UNKNOWN_APPROVAL:
            return f"no such approval: {visible(approval)}", False
        return f"{visible(answer.message)} ({answer.code})", False
    return f"unexpected answer: {type(answer).__name__}", False
