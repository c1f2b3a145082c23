"""`bxctl audit accept` (issue 10): the owner takes the ledger as it is, after it was cut,
rolled back or rewritten, or after a witness of the owner's was lost or damaged.

Until then brokerd answers every call `audit_unavailable` and `audit verify` fails: a ledger
that ends before a head that was confirmed or seen could let a call recorded only in the lost
records run again. Accepting is that decision, made on purpose: brokerd reads the ledger
again whole and writes a `recovered` record saying what was lost; the chain is checked as it
now is; and the owner's witnesses are reset to its head, so that they follow it again.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bxcore.home import witness
from bxcore.home.layout import Home
from bxcore.wire.messages import AuditAccept, Error, LedgerStatus
from bxctl.audit_cmds import WITNESSES, JsonOption, answer, progress_bar
from bxctl.ledger_link import ask_ledger
from bxctl.output import fail, is_terminal, say
from bxctl.owner_link import OwnerLink, request_id
from services.brokerd.face import LedgerUnreadable, verify_file

#: brokerd reads the whole ledger again to accept it (a million records: tens of seconds).
NOTHING_TO_ACCEPT = "the ledger is ok: nothing to accept"


def accept(
    ctx: typer.Context,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask: the owner has decided already.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Take the ledger as it is, though it lost records that were confirmed or seen: brokerd
    writes again, and the owner's witnesses follow its head."""
    home: Home = ctx.obj.home
    if not as_json:
        _explain(home, ask_ledger(home))
    if not yes:
        if not is_terminal():
            fail("accepting changes what the box trusts: run `bxctl audit accept --yes`")
        if not typer.confirm("Accept the ledger as it is?", default=False):
            fail("nothing was changed")
    said = _brokerd_accepts(home)
    try:
        with progress_bar(home, None, as_json) as progress:
            verified = verify_file(home.ledger, progress=progress)
    except LedgerUnreadable as error:
        fail(str(error))
    chain = verified.report
    if not chain.ok and not chain.torn:
        fail(f"bad: {chain}: the ledger is damaged inside, and nothing can be built on it")
    head = witness.Seen(chain.head.seq, chain.head.hash, verified.size)
    for who in WITNESSES:
        witness.reset(home.witness(who), head)
    data = {"ok": True, "head": {"seq": head.seq, "hash": head.hash}, "lost": said}
    text = f"accepted: {chain.records} records; the owner's witnesses follow seq {head.seq}"
    answer(as_json, data, text, style="green")
    if said is not None and not as_json:
        say(said)


def _explain(home: Home, ledger: LedgerStatus | str) -> None:
    if isinstance(ledger, LedgerStatus):
        problem = ledger.problem
        say(f"brokerd says the ledger is {ledger.state}{f': {problem}' if problem else ''}")
    for who in WITNESSES:
        try:
            seen = witness.read(home.witness(who))
        except witness.WitnessUnreadable as error:
            say(f"{error}", style="red")
            continue
        say(f"the head {who} saw: {'none' if seen is None else seen}")
    say(
        "Accepting takes the ledger as it is: records confirmed or seen beyond what it holds "
        "are lost, and a call recorded only in them may run again if it is sent again."
    )


def _brokerd_accepts(home: Home) -> str | None:
    """brokerd reads the ledger again and writes again: what it says was lost, or None when
    it had nothing to accept (only a witness was off)."""
    with OwnerLink(home, "admin") as link:
        answer = link.ask(AuditAccept(request_id("bxctl-accept")))
    if isinstance(answer, Error):
        if answer.message == NOTHING_TO_ACCEPT:
            return None
        fail(f"brokerd: {answer.message}")
    return answer.problem
