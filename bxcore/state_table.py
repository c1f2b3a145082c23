"""A state machine's table drawn as Markdown, for the docs (brokerd's call machine, loopd's turn):
one row a phase, one column an event; a cell names its rule (`·`: the event cannot happen
then). Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TypeVar

P = TypeVar("P", bound=enum.Enum)
K = TypeVar("K", bound=enum.Enum)
R = TypeVar("R", bound=enum.Enum)


def markdown(table: Mapping[tuple[P, K], R], phases: Iterable[P], kinds: Iterable[K]) -> str:
    kinds = list(kinds)
    lines = [
        "| phase | " + " | ".join(kind.value for kind in kinds) + " |",
        "|---" * (len(kinds) + 1) + "|",
    ]
    for phase in phases:
        cells = [table[(phase, kind)].value if (phase, kind) in table else "·" for kind in kinds]
        lines.append(f"| {phase.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
