"""`bxctl audit verify | tail` (SPEC §7, §13; `accept` is `bxctl.audit_accept`): the ledger
checked against the owner's witness, and its newest records as a table (every field made
visible, shown as text: a tool's name or arguments cannot drive the owner's terminal).

`verify` reads the file itself (brokerd need not run), fast (`services.brokerd.ledger.verify`: a
million records in seconds, a bar on a terminal), and checks it against the heads the owner's
side has seen (gatewayd's and bxctl's witness files): a ledger shorter than, or different
from, such a head is reported as tampered (exit 1), also when what stands in for a witnessed
record is a torn last line; so is a witness file that cannot be read. `--since-witness`
walks only what follows the head the last good verify kept. `tail` asks brokerd, or reads the
file when brokerd is not running.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, Any

import typer

from bxcore.home import witness
from bxcore.home.layout import Home
from bxcore.owner_text import cut
from bxcore.visible import visible
from bxcore.wire.messages import AuditTail
from bxctl.connect import ask
from bxctl.output import CommandError, fail, is_terminal, print_json, say, table
from services.brokerd.core.chain import ChainReport
from services.brokerd.core.records import Head, parse_line
from services.brokerd.face import (
    HEAD_FILE,
    LedgerUnreadable,
    Mark,
    Progress,
    held,
    lines_backwards,
    read_confirmed,
    verify_file,
)

app = typer.Typer(help="The audit ledger: every decision, in a hash chain.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
WITNESSES = ("gatewayd", "bxctl")
WHAT = 60  # of a call's tool and arguments in `tail`; `--json` and `pending` show them whole


@app.command()
def verify(
    ctx: typer.Context,
    since_witness: Annotated[
        bool,
        typer.Option(
            "--since-witness",
            help="Check only the records after the head the last good verify checked.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Check the whole chain, and against the heads the owner saw: `ok: N records`, or the
    first bad line (exit 1)."""
    home: Home = ctx.obj.home
    try:
        kept = {who: witness.read(home.witness(who)) for who in WITNESSES}
    except witness.WitnessUnreadable as error:
        answer(as_json, {"ok": False, "records": None, "problem": str(error)},
                f"bad: {error}: the ledger cannot be checked against it until the owner "
                "resets it", style="red")  # fmt: skip
        raise typer.Exit(1) from None
    seen = max((s for s in kept.values() if s is not None), key=lambda s: s.seq, default=None)
    head = None if seen is None else Head(seen.seq, seen.hash)
    if not home.ledger.exists():
        if seen is not None and seen.seq > 0:
            fail(f"bad: the ledger is gone, but the owner saw it at seq {seen.seq}: tampered")
        answer(
            as_json, {"ok": True, "records": 0}, f"ok: 0 records (no ledger yet at {home.ledger})"
        )
        return
    since = _since(kept) if since_witness else None
    try:
        with progress_bar(home, since, as_json) as progress:
            verified = verify_file(home.ledger, witness=head, since=since, progress=progress)
        report = verified.report
        if verified.since_problem is not None:
            _note(f"{verified.since_problem}: checked every record")
        if report.ok:
            report = _each_witness_held(home, kept, report)
        if report.ok:
            report = _confirmed_held(home, report)
    except LedgerUnreadable as error:
        fail(str(error))
    data = {
        "ok": report.ok,
        "records": report.records,
        "head": {"seq": report.head.seq, "hash": report.head.hash},
        "witness": None if seen is None else {"seq": seen.seq, "hash": seen.hash},
        "bad_line": report.bad_line,
        "problem": report.why,
        "torn": report.torn,
        "size": verified.size,
        "since": verified.start.head.seq,
    }
    if report.ok:
        verified_head = witness.Seen(report.head.seq, report.head.hash, verified.size)
        witness.keep(home.witness("bxctl"), verified_head)
        new = ""
        if verified.start.head.seq > 0:
            after = verified.start.head.seq
            new = f" ({report.records - after} new since the last verify, at seq {after})"
        checked = "" if seen is None else f", including the head the owner saw (seq {seen.seq})"
        answer(as_json, data, f"{report}{new}{checked}", style="green")
    elif report.torn:  # newer than any head the owner saw, or `verify` reports tampering
        newer = "" if seen is None else f", after the head the owner saw (seq {seen.seq})"
        answer(as_json, data, f"{report} (a torn last line{newer}: brokerd cuts it at its "
                "next start)", style="yellow")  # fmt: skip
    else:
        answer(as_json, data, f"bad: {report}", style="red")
        raise typer.Exit(1)


def _since(kept: dict[str, witness.Seen | None]) -> Mark | None:
    """Where `--since-witness` may start: the head bxctl's last good verify kept, if it says
    where its line ends and every other witness at or before it does too (each is then found
    again in O(1)); else None, said on standard error."""
    own = kept["bxctl"]
    if own is None or own.size is None:
        _note("no earlier verify said where its head ends (witness/bxctl.json): checked every "
              "record")  # fmt: skip
        return None
    for who, other in kept.items():
        if other is not None and other.seq <= own.seq and other.size is None:
            _note(f"the head {who} saw (seq {other.seq}) does not say where it ends: checked "
                  "every record")  # fmt: skip
            return None
    return Mark(Head(own.seq, own.hash), own.size)


def _each_witness_held(
    home: Home, kept: dict[str, witness.Seen | None], report: ChainReport
) -> ChainReport:
    """The chain reached the newest head the owner saw; every other witness that says where
    its record ends must find it there too (a chain regrown since a witness saw it)."""
    for who, other in kept.items():
        if other is None or other.size is None or other.seq > report.head.seq:
            continue
        mark = Mark(Head(other.seq, other.hash), other.size)
        problem = held(home.ledger, mark, f"the head {who} saw")
        if problem is not None:
            return replace(report, why=problem)
    return report


def _confirmed_held(home: Home, report: ChainReport) -> ChainReport:
    """brokerd's own durable head (`audit/head.json`) must be found too: a ledger cut at a
    line looks whole to the chain. Passed over when this user may not read it (deploy/)."""
    path = home.ledger.with_name(HEAD_FILE)
    try:
        confirmed = read_confirmed(path)
    except ValueError as error:
        if path.exists() and not os.access(path, os.R_OK):
            return report
        return replace(report, why=str(error))
    if confirmed is None:
        return report
    problem = held(home.ledger, confirmed, "the head brokerd confirmed")
    return report if problem is None else replace(report, why=problem)


def _note(text: str) -> None:
    typer.echo(f"bxctl: {visible(text)}", err=True)


#: Below this many bytes to check (~80,000 records, a fraction of a second), no bar.
BAR_FROM = 32 * 1024 * 1024


@contextlib.contextmanager
def progress_bar(home: Home, since: Mark | None, as_json: bool) -> Iterator[Progress | None]:
    """A bar of the bytes checked, on a terminal only and for a long check; None otherwise
    (piped or `--json` output stays exactly what it was)."""
    try:
        left = home.ledger.stat().st_size - (since.size if since is not None else 0)
    except OSError:
        left = 0
    if as_json or not is_terminal() or left < BAR_FROM:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    columns = (
        TextColumn("checking the ledger"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[records]:,} records"),
        TimeRemainingColumn(),
    )
    with Bar(*columns, transient=True, console=Console(highlight=False)) as bar:
        task = bar.add_task("verify", total=left, records=0)

        def update(records: int, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, records=records)

        yield update


def answer(as_json: bool, data: dict[str, Any], line: str, style: str | None = None) -> None:
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
        answer = ask(home, "admin", AuditTail("bxctl-tail", n, session))
        lines = list(answer.records)
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
    """The newest `n` records of the file, read backwards: never the whole ledger."""
    found: list[str] = []
    try:
        with open(home.ledger, "rb") as f:
            for line in lines_backwards(f, os.fstat(f.fileno()).st_size):
                record = parse_line(line)
                if isinstance(record, dict) and (session is None or session in _sessions(record)):
                    found.append(line.decode("utf-8"))
                    if len(found) == n:
                        break
    except FileNotFoundError:
        return []
    except OSError as error:
        fail(f"cannot read {home.ledger}: {error.strerror}")
    return list(reversed(found))


def _sessions(record: dict[str, object]) -> tuple[object, ...]:
    return tuple(record[k] for k in ("session", "parent", "child") if k in record)
