"""How bxctl talks to the owner: tables on a terminal, plain columns when piped, JSON for
scripts, and errors as one line on standard error (SPEC §13).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer


class CommandError(Exception):
    """A failure the owner can act on; its text is the whole message, in one line."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


def fail(message: str, code: int = 1) -> NoReturn:
    raise CommandError(message, code)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def say(text: str, *, style: str | None = None) -> None:
    """One line (or a few) for the owner; styled only on a terminal."""
    if style is not None and is_terminal():
        from rich.console import Console

        Console(highlight=False).print(text, style=style, markup=False)
    else:
        typer.echo(text)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, styles: dict[int, str] | None = None
) -> None:
    """Rows under their column names: a rich table on a terminal, aligned text otherwise.

    `styles` maps a row's index to a rich style for that row (on a terminal only)."""
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if is_terminal():
        from rich.console import Console
        from rich.table import Table

        out = Table(*columns, header_style="bold", box=None, pad_edge=False)
        for index, row in enumerate(cells):
            out.add_row(*row, style=(styles or {}).get(index))
        Console(highlight=False).print(out)
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [columns, *cells]
    for line in lines:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
