"""`bxctl grant list | add | rm | check` (SPEC §13, §5.1): the owner's grants, read offline.

bxctl reads the grants folder itself with brokerd's pure parser and checks it against the
owner's pins with brokerd's own check (`grant_check`), so what it shows is exactly what brokerd
will decide by; brokerd sees any change at its next decision.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from bxcore.home.layout import Home
from bxcore.mcp_state import configured_pins
from bxctl.init import make_folder
from bxctl.output import fail, print_json, say, table
from bxctl.safety import grant_warnings
from services.brokerd.core import grant_check
from services.brokerd.core.grant_check import CheckedGrants, denies_said
from services.brokerd.core.grants import KINDS_SAID, RESULTS_SAID, Grant, InvalidGrant, takes_write
from services.brokerd.face import (
    GrantFields,
    GrantRefused,
    add_grant,
    parse_match,
    read_folder,
    remove_grant,
)

app = typer.Typer(help="The owner's grants: what the agent may do.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


def checked_grants(home: Home) -> CheckedGrants:
    """The grants folder as brokerd decides by it: parsed, then checked against the pins of
    the servers of config.toml."""
    return grant_check.check(read_folder(home.grants), configured_pins(home))


def problem_text(grant: InvalidGrant) -> str:
    """Why a grant is invalid and, for a deny, what it denies meanwhile."""
    return "; ".join(part for part in (grant.problem, denies_said(grant)) if part)


def grant_json(grant: Grant | InvalidGrant) -> dict[str, Any]:
    if isinstance(grant, InvalidGrant):
        return {
            "id": grant.id,
            "valid": False,
            "problem": grant.problem,
            "denies": list(grant.denies),
            "sha256": grant.sha256,
        }
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
        "write": grant.write if takes_write(grant.tool) else None,
        "kind": grant.kind.value if grant.kind else None,
        "match": {name: list(values) for name, values in grant.match},
    }


def scope_text(grant: Grant) -> str:
    """What a grant covers beyond its tool: its path or host; an MCP grant's kind and match."""
    if not grant.mcp:
        read_only = "" if grant.write else " (read-only)"
        return (grant.path or grant.host or "") + read_only
    assert grant.kind is not None
    parts = [grant.kind.value]
    for name, values in grant.match:
        parts.append(f"{name}=" + "|".join(json.dumps(v, ensure_ascii=False) for v in values))
    return " ".join(parts)


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every grant, the invalid ones flagged with why."""
    grants = checked_grants(_home(ctx))
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
            rows.append([grant.id, "INVALID", "", "", "", "", problem_text(grant)])
            styles[index] = "red"
        else:
            scope = scope_text(grant) or "(any)"
            taint = "untrusted" if grant.untrusted else ""
            rows.append([grant.id, grant.mode, grant.tool, scope, grant.class_, taint, grant.note])
    table(["ID", "MODE", "TOOL", "PATH/HOST/MATCH", "CLASS", "", "NOTE"], rows, styles=styles)


@app.command()
def check(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Check every grant file, and every MCP grant's `[match]` against its tool's pins; exit 1
    when any is invalid, naming why (and, for a deny, that it denies its whole tool until it
    is mended). Also warn of grants over boxmaker's own files and of grants of one folder
    that disagree on its label, and say what each kind of an MCP grant means."""
    grants = checked_grants(_home(ctx))
    warnings = grant_warnings(_home(ctx))
    mcp = [g for g in sorted(grants.valid, key=lambda g: g.id) if g.mcp]
    if as_json:
        print_json(
            {
                "valid": len(grants.valid),
                "invalid": [
                    {"id": g.id, "problem": g.problem, "denies": list(g.denies)}
                    for g in grants.invalid
                ],
                "unchecked": [{"id": gid, "why": why} for gid, why in grants.unchecked],
                "mcp": [grant_json(g) for g in mcp],
                "kinds": {**dict(KINDS_SAID), "any": RESULTS_SAID},
                "warnings": warnings,
            }
        )
    else:
        for grant in grants.invalid:
            say(f"invalid: {grant.id}: {problem_text(grant)}", style="red")
        for grant_id, why in grants.unchecked:
            say(f"unchecked: {grant_id}: its [match] cannot be checked yet: {why}", style="yellow")
        for valid in mcp:
            say(f"mcp: {valid.id}: {valid.mode} {valid.tool} {scope_text(valid)}")
        if mcp:
            for kind, meaning in KINDS_SAID:
                say(f"kind {kind}: {meaning}")
            say(RESULTS_SAID)
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
    tool: Annotated[
        str,
        typer.Option(
            help="read_file, write_file, shell, http_fetch, memory, or an MCP tool: "
            "mcp__SERVER__TOOL, or a pattern mcp__SERVER__* or mcp__SERVER__PREFIX*"
        ),
    ],
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
    read_only: Annotated[
        bool,
        typer.Option("--read-only", help="shell: bind the folder read-only (`write = false`)."),
    ] = False,
    kind: Annotated[
        str | None,
        typer.Option(help="MCP tools: source (reads), sink (writes or sends) or both (default)."),
    ] = None,
    match: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=VALUE",
            help="MCP tools: the call matches only when argument NAME is VALUE (exact text, "
            "a number, or glob:PATTERN). Repeat it: every NAME must hold; one NAME twice "
            "allows either value.",
        ),
    ] = None,
) -> None:
    """Write a new grant file, or refuse with why."""
    home = _home(ctx)
    try:
        write = False if read_only else None
        fields = GrantFields(
            tool, mode, path, host, class_, untrusted, note, kind, parse_match(match or []), write
        )
        make_folder(home.root)
        make_folder(home.grants)
        pins = configured_pins(home)
        grant = add_grant(home.grants, grant_id, fields, "`bxctl grant add`", pins)
    except GrantRefused as error:
        fail(str(error))
    say(f"added {grant_id}: {grant.mode} {grant.tool} {scope_text(grant)}".rstrip())
    for line in grant_warnings(home):  # what `grant check` would say of it, said now
        if line.startswith(f"grant {grant_id} ") or f"{grant_id}: " in line:
            say(f"warning: {line}", style="yellow")


@app.command("rm")
@app.command("remove", help="Remove a grant (the same as `bxctl grant rm`).")
def rm(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Argument(metavar="ID")],
) -> None:
    """Remove a grant; brokerd stops using it at its next decision."""
    home = _home(ctx)
    try:
        remove_grant(home.grants, grant_id)
    except GrantRefused as error:
        fail(f"{error}; see `bxctl grant list`" if "no grant" in str(error) else str(error))
    say(f"removed {grant_id}")
