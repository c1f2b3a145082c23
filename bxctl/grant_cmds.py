"""`bxctl grant list | add | rm | check` (SPEC §13, §5.1): the owner's grants, read offline.

bxctl reads the grants folder itself with brokerd's pure parser, so what it shows is exactly
what brokerd will decide by; brokerd sees any change at its next decision.
"""

from __future__ import annotations

import os
import stat
from typing import Annotated, Any

import typer

from bxcore.config import toml_value
from bxcore.home import Home
from bxctl.init import make_folder, write_new
from bxctl.output import fail, print_json, say, table
from bxctl.safety import grant_warnings
from services.brokerd.core.grants import Grant, InvalidGrant, parse_grant, valid_id
from services.brokerd.grants_folder import read_folder

app = typer.Typer(help="The owner's grants: what the agent may do.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


def grant_file_mode(folder_mode: int) -> int:
    """A new grant file is the owner's alone (0600), unless the grants folder lets its group
    read (deploy/: `grants/` is 2750 with brokerd's group): then that group reads it (0640).
    Never readable by every user, whatever the umask."""
    return 0o640 if folder_mode & stat.S_IRGRP else 0o600


def grant_json(grant: Grant | InvalidGrant) -> dict[str, Any]:
    if isinstance(grant, InvalidGrant):
        return {"id": grant.id, "valid": False, "problem": grant.problem, "sha256": grant.sha256}
    return {
        "id": grant.id,
        "valid": True,
        "tool": grant.tool,
        "mode": grant.mode.value,
        "path": grant.path,
        "host": grant.host,
        "class": grant.class_.value,
        "untrusted": grant.untrusted,
        "note": grant.note,
        "sha256": grant.sha256,
    }


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every grant, the invalid ones flagged with why."""
    grants = read_folder(_home(ctx).grants)
    everything: list[Grant | InvalidGrant] = sorted(
        [*grants.valid, *grants.invalid], key=lambda g: g.id
    )
    if as_json:
        print_json([grant_json(g) for g in everything])
        return
    if not everything:
        say(f"no grants in {_home(ctx).grants}; add one with `bxctl grant add`")
        return
    rows: list[list[Any]] = []
    styles: dict[int, str] = {}
    for index, grant in enumerate(everything):
        if isinstance(grant, InvalidGrant):
            rows.append([grant.id, "INVALID", "", "", "", "", grant.problem])
            styles[index] = "red"
        else:
            scope = grant.path or grant.host or "(any)"
            taint = "untrusted" if grant.untrusted else ""
            rows.append([grant.id, grant.mode, grant.tool, scope, grant.class_, taint, grant.note])
    table(["ID", "MODE", "TOOL", "PATH/HOST", "CLASS", "", "NOTE"], rows, styles=styles)


@app.command()
def check(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Check every grant file; exit 1 when any is invalid, naming why. Also warn of grants
    over boxmaker's own files and of grants of one folder that disagree on its label."""
    grants = read_folder(_home(ctx).grants)
    warnings = grant_warnings(_home(ctx))
    if as_json:
        print_json(
            {
                "valid": len(grants.valid),
                "invalid": [{"id": g.id, "problem": g.problem} for g in grants.invalid],
                "warnings": warnings,
            }
        )
    else:
        for grant in grants.invalid:
            say(f"invalid: {grant.id}: {grant.problem}", style="red")
        for line in warnings:
            say(f"warning: {line}", style="yellow")
        if not grants.invalid:
            say(f"ok: {len(grants.valid)} grants, all valid", style="green")
    if grants.invalid:
        raise typer.Exit(1)


@app.command()
def add(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Argument(metavar="ID", help="a-z 0-9 -, like notes-read")],
    tool: Annotated[str, typer.Option(help="read_file, write_file, shell, http_fetch, memory")],
    mode: Annotated[str, typer.Option(help="allow, ask or deny")] = "allow",
    path: Annotated[
        str | None, typer.Option(help="The folder or file (file tools, shell).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="The host or *.base (http_fetch).")] = None,
    class_: Annotated[
        str, typer.Option("--class", help="public, private or secret: the place's class.")
    ] = "private",
    untrusted: Annotated[
        bool | None,
        typer.Option("--untrusted/--trusted", help="Is what is read here untrusted?"),
    ] = None,
    note: Annotated[str, typer.Option(help="A note for yourself.")] = "",
) -> None:
    """Write a new grant file, or refuse with why."""
    home = _home(ctx)
    if not valid_id(grant_id):
        fail(f"{grant_id!r} is not a grant id: use a-z, 0-9 and -, at most 64, not starting with -")
    lines = [f"tool = {toml_value(tool)}", f"mode = {toml_value(mode)}"]
    if path is not None:
        lines.append(f"path = {toml_value(path)}")
    if host is not None:
        lines.append(f"host = {toml_value(host)}")
    lines.append(f"class = {toml_value(class_)}")
    if untrusted is not None:
        lines.append(f"untrusted = {toml_value(untrusted)}")
    if note:
        lines.append(f"note = {toml_value(note)}")
    text = "# Written by `bxctl grant add`.\n" + "\n".join(lines) + "\n"
    parsed = parse_grant(grant_id, text.encode())
    if isinstance(parsed, InvalidGrant):
        fail(f"not added: {parsed.problem}")
    target = home.grant(grant_id)
    make_folder(home.root)
    make_folder(home.grants)
    temporary = target.with_name(f".{grant_id}.toml.new")
    temporary.unlink(missing_ok=True)  # left by an add that was cut short
    write_new(temporary, text, grant_file_mode(os.stat(home.grants).st_mode))
    try:
        os.link(temporary, target)  # fails if the id is taken: never overwrite
    except FileExistsError:
        fail(f"a grant {grant_id!r} exists already ({target}); remove it first")
    finally:
        temporary.unlink()
    say(f"added {grant_id}: {parsed.mode} {parsed.tool} {parsed.path or parsed.host or ''}")


@app.command()
def rm(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Argument(metavar="ID")],
) -> None:
    """Remove a grant; brokerd stops using it at its next decision."""
    home = _home(ctx)
    if not valid_id(grant_id):
        fail(f"{grant_id!r} is not a grant id")
    try:
        home.grant(grant_id).unlink()
    except FileNotFoundError:
        fail(f"no grant {grant_id!r} in {home.grants}; see `bxctl grant list`")
    say(f"removed {grant_id}")
