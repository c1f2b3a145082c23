"""A conversation with the whole box, started the way the owner starts it (`bxctl up`), through
`bxctl chat` as a real process: reads, denials, and approvals answered on a terminal and from
another process (SPEC §3.5, §9, §12, §13). One box serves this module, each test in its own
session; its home has one broken grant file from the start (§5.1, I7).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.home.layout import SERVICES
from tests.fakes.model_server import Answer
from tests.support.brokerd import args, ledger_records
from tests.support.e2e import UpBox, box_up, results_read
from tests.support.owner import Reader

BROKEN_GRANT = 'tool = "read_file"\nmode = allow\npath = "{notes}"\n'  # `allow` unquoted


def notes_folder(home: Path) -> Path:
    """The folder the broken grant names: beside the home (no tool reaches into the home)."""
    return home.parent / "notes"


def write_broken_grant(home: Path) -> None:
    notes = notes_folder(home)
    notes.mkdir()
    (notes / "plans.md").write_text("secret plans")
    (home / "grants" / "notes.toml").write_text(BROKEN_GRANT.format(notes=notes))


@pytest.fixture(scope="module")
def box() -> Iterator[UpBox]:
    with box_up(before_up=write_broken_grant) as box:
        yield box


def prompt(approval: str) -> str:
    """The question under a card (a pattern): only the card's own code approves."""
    code = approval[:4]
    return rf"approve {approval}\? type {code} \(once\), {code} s \(session\) or n \(deny\): "


def workspace_shell(box: UpBox, command: str) -> Answer:
    return box.model.calls(("shell", args(command=command, cwd=str(box.home / "workspace"))))


def test_a_whole_conversation_reads_is_denied_and_asks_the_owner_on_a_terminal_and_off_it(
    box: UpBox,
) -> None:
    workspace = box.home / "workspace"
    (workspace / "todo.md").write_text("buy milk")
    todo, hostname = args(path=str(workspace / "todo.md")), args(path="/etc/hostname")
    bad_note = args(action="note", file="notes.md", text="x")  # M5b: note takes no `file`
    box.model.script(
        "look around",
        box.model.calls(("read_file", todo), ("read_file", hostname), ("memory", bad_note)),
        Answer(text="I read your list; the rest was refused."),
    )
    box.model.script("make a file", workspace_shell(box, "echo made > made.txt"), Answer("Made."))
    box.model.script("remove it", workspace_shell(box, "rm made.txt"), Answer(text="Refused."))

    # Turn 1: an allowed read, a read no grant allows, and a call with invalid arguments.
    first = box.bxctl("chat", "--session", "conv", "look around")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f'agent│ → read_file {{"path": "{workspace}/todo.md"}}',
        "agent│ ✓ read_file: done, 8 bytes (--show-output to see it)",
        'agent│ → read_file {"path": "/etc/hostname"}',
        "agent│ ✗ read_file denied: no grant allows this call",
        'agent│ → memory {"action": "note", "file": "notes.md", "text": "x"}',
        "agent│ ✗ memory denied: the arguments are not valid for this tool",  # never the detail
        "agent│ I read your list; the rest was refused.",
    ]
    assert results_read(box.model.requests_for("look around")[-1]) == [
        "buy milk",
        "Denied: no grant allows this call.",
        "Denied: the arguments are not valid for this tool: "
        "invalid argument shape: unknown field `file`, expected `text`.",
    ]

    # Turn 2: a call the workspace-shell grant asks about, approved inline on a terminal.
    with box.chat_on_a_terminal("--session", "conv", "make a file") as term:
        approval = term.expect(r"approval ([a-z2-9]{8}): shell in session conv").group(1)
        term.expect(r'"command": "echo made > made.txt"')
        term.expect(prompt(approval))
        term.type(f"{approval[:4]}\n")
        term.expect(rf"approved {approval}: the call runs")
        term.expect(r"agent│ ✓ shell: done, 15 bytes \(--show-output to see it\)\nagent│ Made\.")
        assert term.wait() == 0
    assert (workspace / "made.txt").read_text() == "made\n"
    assert results_read(box.model.requests_for("make a file")[-1])[-1] == "[exit status 0]"

    # Turn 3: chat without a terminal waits; `bxctl deny` from another process refuses.
    with box.bxctl_process("chat", "--session", "conv", "remove it") as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        refused = out.expect(r"approval ([a-z2-9]{8}): shell in session conv").group(1)
        out.expect(r"waiting for the owner's verdict: `bxctl approve " + refused)
        assert chat.poll() is None, "end of input is not an answer"
        denied = box.bxctl("deny", refused)
        assert (denied.returncode, denied.stdout) == (0, f"denied {refused}: the call is refused\n")
        assert out.drain() == 0
        assert (
            "agent│ ✗ shell denied: the owner refused this call\nagent│ Refused.\n"
            in out.everything
        )
    assert (workspace / "made.txt").exists()
    last = box.model.requests_for("remove it")[-1]
    assert results_read(last)[-1] == "Denied: the owner refused this call."
    said = [m["content"] for m in last if m["role"] == "user"]
    assert said == ["look around", "make a file", "remove it"], "one conversation, whole"

    records = [r for r in ledger_records(box.home) if r.get("session") == "conv"]
    decided = [
        (r["tool"], r["outcome"], r.get("reason")) for r in records if r["kind"] == "decision"
    ]
    assert decided == [
        ("read_file", "allowed", None),
        ("read_file", "denied", "no_grant"),
        ("memory", "denied", "invalid_arguments"),
        ("shell", "pending", None),
        ("shell", "pending", None),
    ]
    verdicts = [r for r in ledger_records(box.home) if r.get("approval") in (approval, refused)]
    verdicts = [r for r in verdicts if r["kind"] == "verdict"]
    assert [(r["approval"], r["approve"]) for r in verdicts] == [(approval, True), (refused, False)]
    assert verdicts[0]["by"].startswith("bxctl chat (") and verdicts[0]["by"].endswith("gatewayd")
    assert verdicts[1]["by"].startswith("bxctl (")


def test_a_second_up_on_the_same_home_says_the_box_is_running(box: UpBox) -> None:
    before = box.status()
    again = box.bxctl("up")
    assert again.returncode == 0, again.stderr
    assert (
        again.stdout.splitlines()[0] == f"already running (supervisor pid {before['supervisor']})"
    )
    after = box.status()
    assert after["supervisor"] == before["supervisor"]
    assert [s["pid"] for s in after["services"]] == [s["pid"] for s in before["services"]]


def test_a_broken_grant_file_is_a_warning_naming_it_and_the_box_runs_without_it(
    box: UpBox,
) -> None:
    assert box.started is not None
    warnings = [line for line in box.started.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "bxctl: warning: grant notes is invalid and never matches: "
        "not TOML: Invalid value (at line 2, column 8)"
    ]
    assert [s["state"] for s in box.status()["services"]] == ["running"] * len(SERVICES)
    plans = args(path=str(notes_folder(box.home) / "plans.md"))
    box.model.script("read my plans", box.model.calls(("read_file", plans)), Answer(text="No."))
    result = box.bxctl("chat", "--session", "broken-grant", "read my plans")
    assert result.returncode == 0, result.stderr
    assert "agent│ ✗ read_file denied: no grant allows this call" in result.stdout
    (decision,) = [
        r
        for r in ledger_records(box.home)
        if r["kind"] == "decision" and r.get("session") == "broken-grant"
    ]
    assert (decision["outcome"], decision["reason"]) == ("denied", "no_grant")
    assert json.loads(decision["arguments"]) == json.loads(plans)


FAKE_CARD = (
    "Before I tidy up, the box needs your approval:\n"
    "approval abcd2345: shell in session tidy\n"
    "  why:     the grant asks\n"
    "  grant:   workspace-shell\n"
    "  arguments:\n"
    '    {"command": "ls"}\n'
    "approve? [y/n/s(ession)] "
)


def test_a_prompt_the_model_draws_is_marked_as_its_own_and_no_early_answer_approves(
    box: UpBox,
) -> None:
    """Issue 9 item 5: the model draws a card and the old prompt as its text; the owner answers
    it (`s`) before the real card comes. That answer is thrown away, the old answers do not
    approve the real card, only its own code does, and once: the next call asks again."""
    workspace = box.home / "workspace"
    (workspace / "tidy.md").write_text("tidy me")
    read = box.model.calls(("read_file", args(path=str(workspace / "tidy.md"))))
    box.model.script(
        "tidy up",
        Answer(FAKE_CARD, read.tool_calls),
        Answer(tool_calls=workspace_shell(box, "echo PWNED > pwned.txt").tool_calls, delay_s=3.0),
        workspace_shell(box, "echo again > again.txt"),  # would run under a session scope
        Answer(text="Tidied."),
    )  # fmt: skip
    with box.chat_on_a_terminal("--session", "tidy", "tidy up") as term:
        term.expect(r"agent│ Before I tidy up, the box needs your approval:\n")
        term.expect(r"agent│ approval abcd2345: shell in session tidy\n")
        term.expect(r"agent│ approve\? \[y/n/s\(ession\)\]")  # the model's: in the gutter
        term.type("s\n")  # the owner answers the fake prompt while the model still thinks

        real = term.expect(r"\napproval ([a-z2-9]{8}): shell in session tidy\n").group(1)
        term.expect(r'"command": "echo PWNED > pwned.txt"')
        term.expect(prompt(real))
        term.type("y\n")
        refused = term.expect(rf"not an answer for {real}: type {real[:4]} to approve it once")
        assert refused.string[: refused.start()] == "y\n", "the early `s` was never read"
        term.expect(prompt(real))
        term.type("s\n")
        term.expect(rf"not an answer for {real}: ")
        term.expect(prompt(real))
        assert not (workspace / "pwned.txt").exists()
        verdicts = [r for r in ledger_records(box.home) if r["kind"] == "verdict"]
        assert [r for r in verdicts if r["approval"] == real] == [], "nothing answered it yet"

        term.type(f"{real[:4]}\n")
        term.expect(rf"approved {real}: the call runs")
        term.expect(r"agent│ ✓ shell")
        again = term.expect(r"\napproval ([a-z2-9]{8}): shell in session tidy\n").group(1)
        assert again != real, "approved once: the next call asks again"
        term.expect(prompt(again))
        term.type("n\n")
        term.expect(rf"denied {again}: the call is refused")
        term.expect(r"agent│ Tidied\.")
        assert term.wait() == 0
    assert (workspace / "pwned.txt").read_text() == "PWNED\n"  # after the owner's own code
    assert not (workspace / "again.txt").exists()
    verdicts = [r for r in ledger_records(box.home) if r["kind"] == "verdict"]
    verdicts = [r for r in verdicts if r["approval"] in (real, again)]
    assert [(r["approval"], r["approve"], r["scope"]) for r in verdicts] == [
        (real, True, "once"),
        (again, False, "once"),
    ]
