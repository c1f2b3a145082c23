"""How bxctl talks to the owner: tables on a terminal, plain columns when piped, JSON for
scripts, and errors as one line on standard error (SPEC §13).

Whatever it prints is text, never markup: every string passes through `bxcore.visible` (JSON
too, its catches written as JSON escapes), and rich gets `Text` objects only, so `[conceal]`,
`[/x]` or an escape in a tool's argument, a ledger record or a grant file is shown as the
characters it is.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from bxcore.visible import reasons, visible

if TYPE_CHECKING:
    from rich.console import Console

FALLBACK_COLUMNS = 80  # a terminal that does not say its width (a fresh pty says 0)


class CommandError(Exception):
    """A failure the owner can act on; its text is the whole message, in one line."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


def fail(message: str, code: int = 1) -> NoReturn:
    raise CommandError(message, code)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def terminal_width() -> int | None:
    """The columns of the terminal the owner reads (standard output, else the standard input
    or error it types on), from the terminal itself: None when none is a terminal.

    `$COLUMNS` is not read: a width larger than the real one would let the terminal wrap a
    line where bxctl did not, and start a row with text the model chose."""
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.get_terminal_size(fd).columns or FALLBACK_COLUMNS
        except (AttributeError, ValueError, OSError):
            continue
    return None


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, markup=False, emoji=False)


def say(text: str, *, style: str | None = None) -> None:
    """One line for the owner, made visible (a newline in `text` too: say each line on its
    own); styled only on a terminal."""
    shown = visible(text)
    if style is not None and is_terminal():
        from rich.text import Text

        _console().print(Text(shown, style=style))
    else:
        typer.echo(shown)


def print_json(value: Any) -> None:
    """`value` as JSON for scripts, every character `bxcore.visible` escapes written as JSON's
    own `\\uXXXX`: a script reads the same value, a terminal draws nothing hidden."""
    text = json.dumps(value, ensure_ascii=False, indent=2)
    why = reasons(text, newlines=True)
    typer.echo("".join(c if r is None else _json_escape(c) for c, r in zip(text, why, strict=True)))


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, styles: dict[int, str] | None = None
) -> None:
    """Rows under their column names: a rich table on a terminal, aligned text otherwise.
    Every cell is shown whole and made visible: a long one wraps, none is cut.

    `styles` maps a row's index to a rich style for that row (on a terminal only)."""
    cells = [["" if c is None else visible(str(c)) for c in row] for row in rows]
    if is_terminal():
        from rich.table import Table
        from rich.text import Text

        out = Table(header_style="bold", box=None, pad_edge=False)
        for column in columns:
            out.add_column(Text(column), overflow="fold")
        for index, row in enumerate(cells):
            out.add_row(*(Text(c) for c in row), style=(styles or {}).get(index))
        _console().print(out)
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [columns, *cells]
    for line in lines:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def invocation(argv0: str | None = None, on_path: str | None = None, cwd: str | None = None) -> str:
    """How the owner runs this bxctl from their shell, for the commands bxctl suggests:
    `bxctl` when that name on $PATH is this very program (or it does not run as a program
    named bxctl: `python -m bxctl`, a test), else its path, relative to the working folder
    when inside it (`.venv/bin/bxctl`, as the README starts it)."""
    program = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(program) != "bxctl":
        return "bxctl"
    found = shutil.which("bxctl") if on_path is None else on_path
    here = os.path.abspath(program)  # not resolved: a venv's bxctl may be a link
    if found and os.path.abspath(found) == here:
        return "bxctl"
    relative = os.path.relpath(here, os.getcwd() if cwd is None else cwd)
    if relative.split(os.sep)[0] == os.pardir:
        return here
    return relative if os.sep in relative else os.path.join(os.curdir, relative)
