"""The `bxctl` command line (SPEC §13): the global options and the command groups.

Each command is a thin shell over a library call; what it prints goes through
`bxctl.output`. Errors are one line on standard error and exit 1 (2 for usage), with a
traceback only under `--debug`.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Annotated

import typer

from bxcore.home.layout import Home
from bxcore.visible import visible
from bxctl import (
    audit_accept,
    audit_cmds,
    backup_cmds,
    box_cmds,
    console_cmd,
    grant_cmds,
    job_cmds,
    mcp_cmds,
    model_cmds,
    owner_cmds,
    session_cmds,
)
from bxctl.init import init_home
from bxctl.output import CommandError, say

# The interpreter's exit collects every object once more, to free memory the process is about
# to return: 35-45 ms of each command, `bxctl up` included (bench startup). Frozen first, they
# are left alone. At exit only: a test that calls `main` in its own process is not touched.
atexit.register(gc.freeze)

app = typer.Typer(
    name="bxctl",
    help="Run and inspect boxmaker: the owner's side of the box.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(grant_cmds.app, name="grant")
app.add_typer(job_cmds.app, name="job")
app.add_typer(mcp_cmds.app, name="mcp")
app.add_typer(model_cmds.app, name="model")
app.add_typer(audit_cmds.app, name="audit")
audit_cmds.app.command()(audit_accept.accept)
box_cmds.register(app)
app.add_typer(session_cmds.app, name="session")
owner_cmds.register(app)  # chat, pending, approve, deny
app.command()(session_cmds.explain)
app.command()(console_cmd.console)
backup_cmds.register(app)  # backup, restore


@dataclass(frozen=True)
class Options:
    home: Home
    debug: bool


@app.callback()
def main_options(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option("--home", metavar="DIR", help="The home folder (else $BX_HOME)."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    ctx.obj = Options(Home.resolve(home, os.environ), debug)


@app.command()
def init(
    ctx: typer.Context,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Ask nothing: the defaults, as without a terminal."),
    ] = False,
) -> None:
    """Create the home folder: keys, a commented config.toml and the starter grants. On a
    terminal, for a new home, it asks first: the model server (the local ones that answer
    found for you), the model, the key's variable (checked on the spot, as `bxctl model check`
    does), the workspace and the first grants; then offers to start the box."""
    home: Home = ctx.obj.home
    if not yes and not home.config.exists() and sys.stdin.isatty() and sys.stdout.isatty():
        from bxctl.init_wizard import guide

        raise typer.Exit(guide(home))
    made = init_home(home)
    for line in made:
        say(f"created {line}")
    say(f"ready: {home.root}" if made else f"already initialised: {home.root}", style="green")


def main(argv: list[str] | None = None) -> None:
    """The console script: run the app on `argv` (the words after the program's name; None:
    `sys.argv`'s), and turn our errors into one line. Ends in `SystemExit`, as click does."""
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        app(args=argv)
    except CommandError as error:
        _error(str(error), debug)
        sys.exit(error.code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # a bug or an unforeseen OS error: still one line
        from bxcore.errors import one_line

        _error(one_line(error), debug)
        sys.exit(1)


def _error(message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    typer.echo(f"bxctl: {visible(message)}", err=True)
