"""`bxctl chat`, `bxctl pending`, `bxctl approve ID` and `bxctl deny ID` (SPEC §9, §13): the
owner's conversation and verdicts, with the owner's CURVE key.

`chat` goes through gatewayd's `gateway` socket; `pending`, `approve` and `deny` go straight
to brokerd's `admin` socket, so they work while gatewayd is down. Every verdict names who
gave it (`bxctl (<user>)`) in the ledger.
"""

from __future__ import annotations

import getpass
import io
import json
import os
import re
import sys
from typing import Annotated, Any

import typer

from bxcore.clock import now_ms
from bxcore.ids import valid_session
from bxcore.visible import visible
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    ApprovalRequested,
    EndReason,
    Error,
    PendingQuery,
    Scope,
    VerdictRequest,
)
from bxctl.chat import Chat
from bxctl.keyboard import Keyboard
from bxctl.output import fail, print_json, say, terminal_width
from bxctl.owner_link import OwnerLink, request_id
from bxctl.owner_view import approval_card, verdict_line

DEFAULT_SESSION = "chat"
APPROVAL_ID = re.compile(r"[a-z2-9]{8}")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
ApprovalArgument = Annotated[str, typer.Argument(metavar="ID", help="The approval's id.")]


def register(app: typer.Typer) -> None:
    app.command()(chat)
    app.command()(pending)
    app.command()(approve)
    app.command()(deny)


def chat(
    ctx: typer.Context,
    message: Annotated[
        str | None,
        typer.Argument(
            metavar="MESSAGE", help="What to tell the agent; without it, an interactive console."
        ),
    ] = None,
    session: Annotated[
        str, typer.Option("--session", metavar="S", help="The session to talk in.")
    ] = DEFAULT_SESSION,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each event as a JSON line; never ask inline.")
    ] = False,
    show_output: Annotated[
        bool,
        typer.Option("--show-output", help="Show each tool's output, not only its size."),
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="When the turn waits for an approval, print it and exit (0); the turn goes "
            "on, and `bxctl approve` or the console answers it.",
        ),
    ] = False,
) -> None:
    """Talk to the agent and watch the turn; approvals are asked inline on a terminal.

    Without a terminal, an approval is printed with how long it waits for a verdict from
    elsewhere (`bxctl approve`, the console; [broker] approval_ttl_s, 10 minutes unless
    set); --no-wait exits there instead. On a terminal, Ctrl-C stops the running turn (its
    pending approvals are denied) and a second Ctrl-C leaves; without one (or with --json),
    Ctrl-C only stops watching.
    Without MESSAGE, a console: each line is a message, /output shows the last tool's
    output, /help the rest, Ctrl-D (or Ctrl-C at the prompt) leaves."""
    if not valid_session(session):
        fail(f"not a valid session id: {session!r} (A-Z a-z 0-9 . _ -, up to 128)", 2)
    if message is not None and not message.strip():
        fail("the message is empty; say something, or leave it out for a console", 2)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    terminal = sys.stdin is not None and sys.stdin.isatty()
    stops = terminal and not as_json  # Ctrl-C stops the turn: the owner is at the keyboard
    with OwnerLink(ctx.obj.home, "gateway") as link:
        console = Chat(
            link,
            session,
            by=f"bxctl chat ({_user()})",
            keyboard=Keyboard(sys.stdin.fileno()) if terminal else None,
            as_json=as_json,
            show_output=show_output,
            no_wait=no_wait,
        )
        try:
            if message is None:
                console.console()
                return
            turn = console.send(message)
            reason = console.turn(turn) if stops else console.follow(turn)
        except KeyboardInterrupt:
            typer.echo(f"\nbxctl: {_interrupted(message is None, stops)}", err=True)
            raise typer.Exit(130) from None
    if reason is EndReason.ERROR:
        raise typer.Exit(1)
    if reason is EndReason.CANCELLED:
        raise typer.Exit(130)


def _interrupted(console: bool, stops: bool) -> str:
    """What a Ctrl-C that ends `bxctl chat` says."""
    if console:
        return "left the chat"
    if stops:  # the first Ctrl-C asked for the turn to stop
        return "stopped watching"
    return "stopped watching; the turn goes on (`bxctl pending` shows what waits)"


def pending(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The approvals waiting for the owner, oldest first, each with every argument in full."""
    with OwnerLink(ctx.obj.home, "admin") as link:
        answer = link.ask(PendingQuery(request_id("bxctl-pending")))
    if isinstance(answer, Error):
        fail(f"brokerd: {visible(answer.message)} ({answer.code})")
    if as_json:
        print_json([_approval_json(info) for info in answer.approvals])
        return
    if not answer.approvals:
        say("no approvals pending")
        return
    now, width = now_ms(), terminal_width()
    for index, info in enumerate(answer.approvals):
        if index:
            say("")
        for line in approval_card(info, now, width):
            say(line)


def approve(
    ctx: typer.Context,
    approval: ApprovalArgument,
    session_scope: Annotated[
        bool,
        typer.Option(
            "--session-scope",
            help="Also approve later calls of this session that the same grant asks about.",
        ),
    ] = False,
) -> None:
    """Approve a pending call: it runs exactly as shown by `bxctl pending`."""
    _verdict(ctx, approval, True, Scope.SESSION if session_scope else Scope.ONCE)


def deny(ctx: typer.Context, approval: ApprovalArgument) -> None:
    """Refuse a pending call: the model reads that the owner refused it."""
    _verdict(ctx, approval, False, Scope.ONCE)


def _verdict(ctx: typer.Context, approval: str, approve: bool, scope: Scope) -> None:
    if APPROVAL_ID.fullmatch(approval) is None:
        fail(f"not an approval id: {approval!r} (8 characters of a-z and 2-9)", 2)
    verdict = VerdictRequest(
        request_id("bxctl-verdict"), approval, approve, scope, f"bxctl ({_user()})"
    )
    with OwnerLink(ctx.obj.home, "admin") as link:
        answer = link.ask(verdict)
    line, ok = verdict_line(approval, answer)
    if not ok:
        fail(line)
    say(line)


def _approval_json(info: Any) -> Any:
    return json.loads(wire.encode(ApprovalRequested(info)))["approval"]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
