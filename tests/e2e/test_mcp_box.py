"""MCP tools through the whole box (SPEC §18): `bxctl up`, the fake model server, `bxctl chat`,
the fake mailbox and rug-pull servers, the owner trusting them with `bxctl mcp trust --yes`.

The model is offered the pinned tools; a source is allowed and labels the session; a sink in
an untrusted session waits for the owner and runs exactly as approved; a secret session cannot
reach a public sink; a `[match]` holds and fails; invalid arguments reach the model with the
validator's detail; a rug pull is refused until the owner trusts again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bxcore.deny import DenyReason
from bxcore.mcp_tools import CHANGED
from services.loopd.tools import denial_message
from tests.fakes.mcp_servers import INJECTED
from tests.fakes.model_server import Answer
from tests.support.brokerd import args, ledger_records
from tests.support.e2e import UpBox, box_up, decisions, label_of, results_read
from tests.support.mcp import fake, grant, wait_listed
from tests.support.owner import Reader

READ = "mcp__mailbox__read_inbox"
SEND = "mcp__mailbox__send_email"
RUG = "mcp__rug__list_notes"


def mail_folder(home: Path) -> Path:
    return home.parent / "mail"


def with_servers(home: Path) -> None:
    """The mailbox and the rug-pull server, and the owner's grants of their tools."""
    with (home / "config.toml").open("a") as config:
        config.write("\n" + fake("mailbox", "mailbox", mail_folder(home)))
        config.write(fake("rug", "rugpull", home.parent / "rug"))
    grant(home, "mail-read", READ, kind="source", class_="private")
    grant(home, "mail-vault", READ, kind="source", class_="secret", match={"folder": "vault"})
    grant(
        home, "mail-send", SEND, kind="sink", class_="private", match={"to": "glob:*@example.com"}
    )
    grant(
        home, "mail-news", SEND, kind="sink", class_="public", match={"to": "news@public.example"}
    )
    grant(home, "rug", "mcp__rug__*", kind="source", untrusted=False)


def trust(box: UpBox, name: str) -> None:
    wait_listed(box.home, name)
    done = box.bxctl("mcp", "trust", name, "--yes")
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def box() -> Iterator[UpBox]:
    with box_up(before_up=with_servers) as box:
        trust(box, "mailbox")
        trust(box, "rug")
        yield box


def run_turn(
    box: UpBox, session: str, message: str, *answers: Answer, verdicts: tuple[str, ...] = ()
) -> list[str]:
    """The owner says `message`; the model answers with `answers`; each approval asked is
    settled in turn by `bxctl approve` or `bxctl deny` (`verdicts`); what the model read."""
    box.model.script(message, *answers)
    with box.bxctl_process("chat", "--session", session, message) as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        for verdict in verdicts:
            approval = out.expect(r"approval ([a-z2-9]{8}): ").group(1)
            settled = box.bxctl(verdict, approval)
            assert settled.returncode == 0, settled.stderr
        assert out.drain() == 0, out.everything
    return results_read(box.model.requests_for(message)[-1])


def offered(box: UpBox, message: str) -> dict[str, dict[str, Any]]:
    """The tools the model was offered in the last request of `message`'s turn, by name."""
    requests = [r for r in box.model.fake.requests if message in json.dumps(r["messages"])]
    tools = requests[-1].get("tools", [])
    return {tool["function"]["name"]: tool["function"] for tool in tools}


def sent(box: UpBox) -> list[dict[str, Any]]:
    path = mail_folder(box.home) / "sent.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [{k: v for k, v in json.loads(line).items() if k != "pid"} for line in lines]


def pinned(box: UpBox, server: str, tool: str) -> dict[str, Any]:
    pins = json.loads((box.home / "mcp" / f"{server}.pins.json").read_text())
    definition: dict[str, Any] = pins["tools"][tool]["definition"]
    return definition


def test_the_model_is_offered_the_pinned_tools_beside_the_built_ins(box: UpBox) -> None:
    run_turn(box, "offer-1", "what can you do?", Answer(text="much"))
    tools = offered(box, "what can you do?")
    assert {"read_file", "shell", READ, SEND, RUG} <= set(tools)
    definition = pinned(box, "mailbox", "read_inbox")
    assert tools[READ]["description"] == definition["description"]
    assert tools[READ]["parameters"] == definition["inputSchema"]


def test_a_source_is_allowed_and_its_result_labels_the_session(box: UpBox) -> None:
    read = run_turn(
        box,
        "src-1",
        "read my inbox",
        box.model.calls((READ, args(folder="in"))),
        Answer(text="two mails"),
    )
    assert INJECTED in read[0]
    assert decisions(box, "src-1") == [(READ, "allowed", None)]
    label = label_of(box, "src-1")
    assert (label["class"], label["untrusted"]) == ("private", True)


def test_a_sink_in_an_untrusted_session_waits_for_the_owner_and_runs_as_approved(
    box: UpBox,
) -> None:
    before = len(sent(box))
    mail = args(to="boss@example.com", body="Numbers: 42")
    read = run_turn(
        box,
        "sink-1",
        "read my inbox, then answer the boss",
        box.model.calls((READ, args(folder="in"))),
        box.model.calls((SEND, mail)),
        Answer(text="answered"),
        verdicts=("approve",),
    )
    assert read[1] == "sent to boss@example.com"
    assert sent(box)[before:] == [{"to": "boss@example.com", "body": "Numbers: 42"}]
    assert decisions(box, "sink-1") == [(READ, "allowed", None), (SEND, "pending", None)]
    asked = next(
        r
        for r in ledger_records(box.home)
        if r.get("session") == "sink-1" and r.get("tool") == SEND
    )
    assert asked["arguments"] == '{"body":"Numbers: 42","to":"boss@example.com"}'


def test_a_sink_the_owner_refuses_never_runs(box: UpBox) -> None:
    before = len(sent(box))
    read = run_turn(
        box,
        "sink-2",
        "read my inbox, then tell the boss",
        box.model.calls((READ, args(folder="in"))),
        box.model.calls((SEND, args(to="boss@example.com", body="everything"))),
        Answer(text="refused"),
        verdicts=("deny",),
    )
    assert read[1] == denial_message(DenyReason.OWNER_DENIED, None)
    assert sent(box)[before:] == []


def test_a_secret_session_cannot_reach_a_public_sink(box: UpBox) -> None:
    before = len(sent(box))
    read = run_turn(
        box,
        "flow-1",
        "read the vault and post it to the newsletter",
        box.model.calls((READ, args(folder="vault"))),
        box.model.calls((SEND, args(to="news@public.example", body="the vault"))),
        Answer(text="no"),
    )
    assert read[1] == denial_message(DenyReason.FLOW_VIOLATION, None)
    assert label_of(box, "flow-1")["class"] == "secret"
    assert decisions(box, "flow-1") == [
        (READ, "allowed", None),
        (SEND, "denied", "flow_violation"),
    ]
    assert sent(box)[before:] == []


def test_a_match_constraint_holds_for_its_values_and_fails_for_others(box: UpBox) -> None:
    before = len(sent(box))
    read = run_turn(
        box,
        "match-1",
        "mail the boss and the stranger",
        box.model.calls(
            (SEND, args(to="boss@example.com", body="hello")),
            (SEND, args(to="attacker@evil.example", body="hello")),
        ),
        Answer(text="one sent"),
    )
    assert read == ["sent to boss@example.com", denial_message(DenyReason.NO_GRANT, None)]
    assert sent(box)[before:] == [{"to": "boss@example.com", "body": "hello"}]
    assert decisions(box, "match-1") == [(SEND, "allowed", None), (SEND, "denied", "no_grant")]


def test_invalid_arguments_reach_the_model_with_the_validators_detail(box: UpBox) -> None:
    before = len(sent(box))
    read = run_turn(
        box,
        "invalid-1",
        "mail the boss without a body",
        box.model.calls((SEND, args(to="boss@example.com"))),
        Answer(text="sorry"),
    )
    detail = "invalid argument shape: 'body' is a required property"
    assert read == [denial_message(DenyReason.INVALID_ARGUMENTS, detail)]
    assert decisions(box, "invalid-1") == [(SEND, "denied", "invalid_arguments")]
    assert sent(box)[before:] == []


def test_a_rug_pull_is_refused_until_the_owner_trusts_again(box: UpBox) -> None:
    first = run_turn(box, "rug-1", "list my notes", box.model.calls((RUG, "{}")), Answer(text="hm"))
    assert RUG in offered(box, "list my notes")  # as pinned: the server changed on its start
    assert first == [f"Error: {CHANGED}"]
    again = run_turn(
        box, "rug-1", "list them again", box.model.calls((RUG, "{}")), Answer(text="hm")
    )
    assert RUG not in offered(box, "list them again")  # changed: no longer offered
    assert again[1:] == [denial_message(DenyReason.UNKNOWN_TOOL, CHANGED)]  # one conversation
    trust(box, "rug")  # the owner looked at the new description and trusts it
    trusted = run_turn(
        box, "rug-1", "and now?", box.model.calls((RUG, "{}")), Answer(text="two notes")
    )
    assert RUG in offered(box, "and now?")
    assert "evil.example" in offered(box, "and now?")[RUG]["description"]
    assert trusted[2:] == ["a.md\nb.md"]
    assert decisions(box, "rug-1") == [
        (RUG, "allowed", None),
        (RUG, "denied", "unknown_tool"),
        (RUG, "allowed", None),
    ]
