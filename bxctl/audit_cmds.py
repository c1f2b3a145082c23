"""`bxctl audit verify | tail` (SPEC §7, §13): the ledger checked against the owner's witness,
and its newest records as a table (every field made visible, shown as text: a tool's name or
arguments cannot drive the owner's terminal).

`verify` reads the file itself (brokerd need not run) and checks it against the newest head
the owner's side has seen (gatewayd's and bxctl's witness files): a ledger shorter than, or
different from, that head is reported as tampered (exit 1), also when what stands in for a
witnessed record is a torn last line. `tail` asks brokerd, or reads the file when brokerd is
not running.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from bxcore import witness
from bxcore.home import Home
from bxcore.messages import AuditRecords, AuditTail
from bxcore.visible import visible
from bxctl.connect import ask
from bxctl.output import CommandError, fail, print_json, say, table
from bxctl.owner_view import cut
from services.brokerd.ledger import LedgerUnavailable
from services.brokerd.ledger import verify as verify_ledger
from services.brokerd.records import Head, parse_line

app = typer.Typer(help="The audit ledger: every decision, in a hash chain.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
WITNESSES = ("gatewayd", "bxctl")
WHAT = 60  # of a call's tool and arguments in `tail`; `--json` and `pending` show them whole


@app.command()
def verify(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Check the whole chain, and against the heads the owner saw: `ok: N records`, or the
    first bad line (exit 1)."""
    home: Home = ctx.obj.home
    seen = witness.newest([home.witness(who) for who in WITNESSES])
    head = None if seen is None else Head(seen.seq, seen.hash)
    if not home.ledger.exists():
        if seen is not None and seen.seq > 0:
            fail(f"bad: the ledger is gone, but the owner saw it at seq {seen.seq}: tampered")
        _report(
            as_json, {"ok": True, "records": 0}, f"ok: 0 records (no ledger yet at {home.ledger})"
        )
        return
    try:
        report = verify_ledger(home.ledger, witness=head)
    except LedgerUnavailable as error:
        fail(str(error))
    data = {
        "ok": report.ok,
        "records": report.records,
        "head": {"seq": report.head.seq, "hash": report.head.hash},
        "witness": None if seen is None else {"seq": seen.seq, "hash": seen.hash},
        "bad_line": report.bad_line,
        "problem": report.why,
        "torn": report.torn,
    }
    if report.ok:
        witness.keep(home.witness("bxctl"), witness.Seen(report.head.seq, report.head.hash))
        checked = "" if seen is None else f", including the head the owner saw (seq {seen.seq})"
        _report(as_json, data, f"{report}{checked}", style="green")
    elif report.torn:  # newer than any head the owner saw, or `verify` reports tampering
        newer = "" if seen is None else f", after the head the owner saw (seq {seen.seq})"
        _report(as_json, data, f"{report} (a torn last line{newer}: brokerd cuts it at its "
                "next start)", style="yellow")  # fmt: skip
    else:
        _report(as_json, data, f"bad: {report}", style="red")
        raise typer.Exit(1)


def _report(as_json: bool, data: dict[str, Any], line: str, style: str | None = None) -> None:
    if as_json:
        print_json(data)
    else:
        say(line, style=style)


@app.command()
def tail(
    ctx: typer.Context,
    n: Annotated[int, typer.Option("-n", min=1, max=100_000, help="How many records.")] = 20,
    session: Annotated[str | None, typer.Option(help="Only this session's records.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The newest records, oldest first."""
    home: Home = ctx.obj.home
    try:
        answer = ask(home, "admin", AuditTail("bxctl-tail", n, session), timeout_s=5.0)
        lines = list(answer.records) if isinstance(answer, AuditRecords) else []
    except CommandError:  # brokerd is not running: read the file itself
        lines = _tail_of_file(home, n, session)
    records = [json.loads(line) for line in lines]
    if as_json:
        print_json(records)
        return
    if not records:
        say("no records")
        return
    table(
        ["SEQ", "AT", "KIND", "SESSION", "CALL", "WHAT", "OUTCOME"],
        [_row(record) for record in records],
    )


def _row(record: dict[str, Any]) -> list[Any]:
    kind = record.get("kind")
    what = outcome = ""
    if kind == "decision":
        what = cut(visible(f"{record.get('tool')} {record.get('arguments', '')}"), WHAT)
        outcome = " ".join(str(record.get(k)) for k in ("outcome", "reason", "grant")
                           if record.get(k))  # fmt: skip
    elif kind == "executed":
        what, outcome = f"{record.get('output_bytes', 0)} bytes", "ok" if record["ok"] else "failed"
    elif kind == "verdict":
        what = f"approval {record.get('approval')} by {record.get('by')}"
        outcome = f"{'approve' if record.get('approve') else 'refuse'}: {record.get('outcome')}"
    elif kind in ("raised", "absorbed"):
        label = record.get("to", {})
        what = f"to {label.get('class')}{' untrusted' if label.get('untrusted') else ''}"
    elif kind == "recovered":
        what = f"cut {record.get('cut_bytes')} bytes: {record.get('why')}"
    session = record.get("session") or record.get("parent") or ""
    return [record["seq"], record["at"], kind, session, record.get("call", ""), what, outcome]


def _tail_of_file(home: Home, n: int, session: str | None) -> list[str]:
    try:
        data = home.ledger.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        fail(f"cannot read {home.ledger}: {error.strerror}")
    found: list[str] = []
    for line in reversed(data.split(b"\n")):
        record = parse_line(line) if line else None
        if isinstance(record, dict) and (session is None or session in _sessions(record)):
            found.append(line.decode("utf-8"))
            if len(found) == n:
                break
    return list(reversed(found))


def _sessions(record: dict[str, object]) -> tuple[object, ...]:
    return tuple(record[k] for k in ("session", "parent", "child") if k in record)
