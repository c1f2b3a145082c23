"""`bxctl session list | show` and `bxctl explain` (SPEC §13): the sessions, each with its
label, history and tokens (§19), and what brokerd would decide for a call now and why.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from bxcore.home.layout import Home
from bxcore.labels import Label
from bxcore.visible import visible
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Explain,
    HistoryQuery,
    SessionsQuery,
    StateQuery,
    TurnEvent,
)
from bxctl import tokens_view
from bxctl.connect import ask
from bxctl.output import print_json, say, table

app = typer.Typer(help="The agent's sessions: their labels and histories.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def label_text(label: Label) -> str:
    return f"{label.class_}{', untrusted' if label.untrusted else ''}"


def event_text(event: TurnEvent) -> str:
    """One event as one line for the owner (the reason of a denial, never its detail)."""
    data = wire.dump_json(_event_fields(event))
    return f"turn {event.turn} #{event.seq} {type(event.event).TAG}: {data}"


def _event_fields(event: TurnEvent) -> dict[str, Any]:
    from bxcore.wire.schema import to_json_object

    fields = to_json_object(event.event)
    return {k: (v[:200] + "…" if isinstance(v, str) and len(v) > 200 else v)
            for k, v in fields.items()}  # fmt: skip


def _label(home: Home, session: str) -> Label:
    answer = ask(home, "admin", StateQuery("bxctl-state", session))
    return answer.label


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every session loopd knows, with its turns and label."""
    home: Home = ctx.obj.home
    answer = ask(home, "loop", SessionsQuery("bxctl-sessions"))
    rows = [(s, _label(home, s.session)) for s in answer.sessions]
    if as_json:
        print_json(
            [
                {"session": s.session, "turns": s.turns, "busy": s.busy, "updated": s.updated,
                 "tokens": s.tokens, "class": label.class_.value, "untrusted": label.untrusted}
                for s, label in rows
            ]
        )  # fmt: skip
        return
    if not rows:
        say("no sessions yet; start one with `bxctl chat`")
        return
    table(
        ["SESSION", "TURNS", "STATE", "LABEL", "TOKENS", "UPDATED"],
        [[s.session, s.turns, "busy" if s.busy else "idle", label_text(label),
          "-" if s.tokens is None else f"{s.tokens:,}", s.updated]
         for s, label in rows],
    )  # fmt: skip


@app.command()
def show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonOption = False,
) -> None:
    """A session's label, its whole history, and its tokens per turn and in all."""
    home: Home = ctx.obj.home
    label = _label(home, session)
    events: list[TurnEvent] = []
    after = 0
    while True:
        answer = ask(home, "loop", HistoryQuery("bxctl-history", session, after or None))
        events += answer.events
        if not answer.more or not answer.events:
            break
        after = answer.events[-1].seq
    turns = tokens_view.per_turn(events)
    if as_json:
        print_json(
            {
                "session": session,
                "label": {"class": label.class_.value, "untrusted": label.untrusted},
                "tokens": sum(turns.values()) if turns else None,
                "turn_tokens": {str(turn): tokens for turn, tokens in sorted(turns.items())},
                "events": [wire.dump_json(_event_fields(e)) for e in events],
            }
        )
        return
    say(f"{visible(session)}: {label_text(label)}, {len(events)} events")
    for event in events:
        say(visible(event_text(event)))
    line = tokens_view.session_line(events)
    if line is not None:
        say(line)


def explain(
    ctx: typer.Context,
    tool: Annotated[str, typer.Argument(help="The tool, like read_file.")],
    arguments: Annotated[str, typer.Argument(help='The arguments, like \'{"path":"/a"}\'.')],
    session: Annotated[str, typer.Option(help="The session whose label counts.")] = "chat",
    as_json: JsonOption = False,
) -> None:
    """What brokerd would decide for this call now, and why; nothing runs or is recorded."""
    home: Home = ctx.obj.home
    answer = ask(home, "admin", Explain("bxctl-explain", session, tool, arguments))
    if as_json:
        print_json(
            {"verdict": answer.verdict.value, "reason": answer.reason, "winner": answer.winner,
             "label": {"class": answer.label.class_.value, "untrusted": answer.label.untrusted},
             "steps": list(answer.steps)}
        )  # fmt: skip
        return
    outcome = answer.verdict.value + (f" ({answer.reason})" if answer.reason else "")
    style = {"allowed": "green", "ask": "yellow"}.get(answer.verdict.value, "red")
    say(f"{visible(tool)}: {outcome}", style=style)
    for step in answer.steps:
        say(f"  - {visible(step)}")
