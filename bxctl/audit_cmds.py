"""`bxctl audit verify` (SPEC §7): check the ledger's hash chain, offline, without writing."""

from __future__ import annotations

from typing import Annotated

import typer

from bxcore.home import Home
from bxctl.output import fail, print_json, say
from services.brokerd.ledger import LedgerUnavailable
from services.brokerd.ledger import verify as verify_ledger

app = typer.Typer(help="The audit ledger: every decision, in a hash chain.", no_args_is_help=True)


@app.command()
def verify(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Check the whole chain: `ok: N records`, or the first bad line (exit 1)."""
    home: Home = ctx.obj.home
    if not home.ledger.exists():
        if as_json:
            print_json({"ok": True, "records": 0, "problem": None})
        else:
            say(f"ok: 0 records (no ledger yet at {home.ledger})")
        return
    try:
        report = verify_ledger(home.ledger)
    except LedgerUnavailable as error:
        fail(str(error))
    if as_json:
        print_json(
            {
                "ok": report.ok,
                "records": report.records,
                "head": {"seq": report.head.seq, "hash": report.head.hash},
                "bad_line": report.bad_line,
                "problem": report.why,
                "torn": report.torn,
            }
        )
    elif report.ok:
        say(str(report), style="green")
    elif report.torn:
        say(f"{report} (a torn last line: brokerd cuts it at its next start)", style="yellow")
    else:
        say(f"bad: {report}", style="red")
    if not report.ok and not report.torn:
        raise typer.Exit(1)
