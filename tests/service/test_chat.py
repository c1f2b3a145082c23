"""`bxctl chat`, `bxctl pending`, `bxctl approve` and `bxctl deny` as real processes against a
real box: brokerd, memoryd, loopd, gatewayd and a fake model (SPEC §9, §12, §13).

Without a terminal, chat prints an approval whole and waits for a verdict from elsewhere; on a
terminal (a pty here) it asks inline. End of input and empty lines are never an answer.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from bxcore.wire.messages import EndReason, TurnEnd
from tests.fakes.model_server import Answer, Failure
from tests.support.brokerd import args, write_grant
from tests.support.owner import Box, Reader, Terminal, run_bxctl, running_box, wait_until

NOT_RUNNING = "is boxmaker running? try `bxctl up`"


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    with running_box() as box:
        yield box


def shell(box: Box, command: str) -> Answer:
    return box.model.calls(("shell", args(command=command, cwd=str(box.home / "workspace"))))


def pending_ids(box: Box, session: str) -> list[str]:
    listed = json.loads(box.bxctl("pending", "--json").stdout)
    return [a["approval"] for a in listed if a["session"] == session]


def test_chat_with_a_message_prints_the_turn(box: Box) -> None:
    notes = box.home / "workspace" / "a.md"
    notes.write_text("hello from a file")
    box.model.script(
        "read a.md",
        Answer("Let me look.", box.model.calls(("read_file", args(path=str(notes)))).tool_calls),
        box.model.calls(("memory", args(action="note", file="n.md", text="x"))),
        Answer(text="It says hello.\x1b[2J"),
    )
    result = box.bxctl("chat", "--session", "c-print", "read a.md")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "agent│ Let me look.",
        f'agent│ → read_file {{"path": "{notes}"}}',
        "agent│ ✓ read_file: done, 17 bytes (--show-output to see it)",
        'agent│ → memory {"action": "note", "file": "n.md", "text": "x"}',
        "agent│ ✗ memory denied: the arguments are not valid for this tool",
        "agent│ It says hello.\\x1b[2J",  # the model cannot drive the owner's terminal
    ]


def test_chat_exits_1_when_the_turn_ends_with_an_error(box: Box) -> None:
    box.model.script("fail please", Failure(400, "the model refuses on purpose"))
    result = box.bxctl("chat", "--session", "c-error", "fail please")
    assert result.returncode == 1
    assert "error: " in result.stdout and "the turn ended with an error" in result.stdout


def test_without_a_terminal_chat_prints_the_approval_and_waits_for_bxctl_approve(
    box: Box,
) -> None:
    box.model.script("run echo", shell(box, "echo 'one two'"), Answer(text="ran it"))
    with box.bxctl_process("chat", "--session", "c-wait", "run echo") as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        approval = out.expect(r"approval ([a-z2-9]{8}): shell in session c-wait").group(1)
        card = out.expect(r"waiting for the owner's verdict: .*\n")
        expires = r"; it expires in (9m 5\ds|10m 00s) \(`bxctl chat --no-wait` does not wait\)\n"
        assert re.search(expires, card.group(0)), card.group(0)
        assert '"command": "echo \'one two\'"' in card.string
        assert f'"cwd": "{box.home / "workspace"}"' in card.string
        assert "the grant asks" in card.string and "workspace-shell" in card.string
        assert chat.poll() is None, "it waits (its standard input is at its end)"

        listing = box.bxctl("pending").stdout
        assert f"approval {approval}: shell in session c-wait\n" in listing, listing
        assert '      "command": "echo \'one two\'",\n' in listing, listing
        listed = json.loads(box.bxctl("pending", "--json").stdout)
        mine = next(a for a in listed if a["approval"] == approval)
        assert json.loads(mine["arguments"])["command"] == "echo 'one two'"

        approved = box.bxctl("approve", approval)
        assert approved.returncode == 0
        assert approved.stdout == f"approved {approval}: the call runs\n"
        assert out.drain() == 0
        assert "✓ shell" in out.output and "ran it" in out.output
        waits = f"agent│ … shell waits for the owner's approval {approval}\n"
        assert out.everything.count(waits) == 1, "said once, before its card"
        assert out.everything.index(waits) < out.everything.index(f"approval {approval}: shell")
        again = box.bxctl("approve", approval)
        assert again.returncode == 1 and "already settled" in again.stderr


def test_chat_no_wait_prints_the_approval_and_exits_while_the_turn_waits(box: Box) -> None:
    box.model.script("run ls", shell(box, "ls"), Answer(text="listed it"))
    result = box.bxctl("chat", "--no-wait", "--session", "c-nowait", "run ls")
    assert result.returncode == 0, result.stderr
    [approval] = pending_ids(box, "c-nowait")
    lines = result.stdout.splitlines()
    assert lines[0].startswith('agent│ → shell {"command": "ls"')
    assert lines[1] == f"agent│ … shell waits for the owner's approval {approval}"
    assert lines[2] == f"approval {approval}: shell in session c-nowait"
    assert lines[-1].startswith(
        f"not waiting (--no-wait); the turn waits for `bxctl approve {approval}` or "
        f"`bxctl deny {approval}` (or the console), until it expires in "
    )
    assert box.bxctl("approve", approval).returncode == 0
    wait_until(lambda: len(box.model.requests_for("run ls")) == 2, 20, "the turn to go on")


def test_bxctl_deny_makes_the_model_read_the_refusal(box: Box) -> None:
    box.model.script("delete things", shell(box, "rm -rf ."), Answer(text="I was refused."))
    with box.bxctl_process("chat", "--session", "c-deny", "delete things") as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        approval = out.expect(r"approval ([a-z2-9]{8}): shell").group(1)
        denied = box.bxctl("deny", approval)
        assert denied.returncode == 0
        assert denied.stdout == f"denied {approval}: the call is refused\n"
        assert out.drain() == 0
        assert "✗ shell denied: the owner refused this call" in out.output
    last = box.model.requests_for("delete things")[-1]
    assert last[-1]["content"] == "Denied: the owner refused this call."
    unknown = box.bxctl("deny", "zzzz2222")
    assert (unknown.returncode, unknown.stderr) == (1, "bxctl: no such approval: zzzz2222\n")


def prompt(approval: str) -> str:
    """The question under a card (a pattern): only the card's own code approves."""
    code = approval[:4]
    return rf"approve {approval}\? type {code} \(once\), {code} s \(session\) or n \(deny\): "


def chat_on_a_terminal(box: Box, *argv: str) -> Terminal:
    return Terminal([sys.executable, "-m", "bxctl", "--home", str(box.home), "chat", *argv])


def test_end_of_input_and_empty_lines_are_never_an_answer(box: Box) -> None:
    box.model.script("make a file", shell(box, "touch made"), Answer(text="made it"))
    with chat_on_a_terminal(box, "--session", "c-eof", "make a file") as term:
        approval = term.expect(r"approval ([a-z2-9]{8}): shell").group(1)
        term.expect(prompt(approval))
        term.type("\n")  # an empty line: asked again
        term.expect(prompt(approval))
        term.type("maybe\n")
        term.expect(rf"not an answer for {approval}: type {approval[:4]} to approve it once")
        term.expect(prompt(approval))
        term.type("\x04")  # Ctrl-D: end of input
        term.expect(rf"left for later; waiting for the owner's verdict: `bxctl approve {approval}`")
        assert pending_ids(box, "c-eof") == [approval], "end of input neither approved nor denied"
        assert not (box.home / "workspace" / "made").exists()
        assert box.bxctl("approve", approval).returncode == 0
        term.expect(r"✓ shell")
        term.expect(r"made it")
        assert term.wait() == 0
    assert (box.home / "workspace" / "made").exists()


def test_an_approval_settled_elsewhere_while_chat_asks_is_said_so(box: Box) -> None:
    box.model.script("list files", shell(box, "ls"), Answer(text="listed"))
    with chat_on_a_terminal(box, "--session", "c-else", "list files") as term:
        approval = term.expect(r"approval ([a-z2-9]{8}): shell").group(1)
        term.expect(prompt(approval))
        assert box.bxctl("approve", approval, "--session-scope").returncode == 0
        term.expect(rf"{approval} was settled elsewhere")
        term.expect(r"✓ shell")
        assert term.wait() == 0
    verdicts = [r for r in ledger(box) if r["kind"] == "verdict" and r["approval"] == approval]
    assert [(r["scope"], r["by"].startswith("bxctl (")) for r in verdicts] == [("session", True)]


def ledger(box: Box) -> list[dict[str, Any]]:
    lines = (box.home / "audit" / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_an_interactive_chat_on_a_terminal_approves_inline(box: Box) -> None:
    box.model.script("count files", shell(box, "ls | wc -l"), Answer(text="counted"))
    box.model.script("thanks", Answer(text="you are welcome"))
    with chat_on_a_terminal(box, "--session", "c-tty") as term:
        term.expect(r"session c-tty; /help for help, Ctrl-C stops a turn, Ctrl-D leaves")
        term.expect(r"you> ")
        term.type("count files\n")
        approval = term.expect(r"approval ([a-z2-9]{8}): shell in session c-tty").group(1)
        term.expect(r'"command": "ls \| wc -l"')
        term.expect(prompt(approval))
        term.type(f"{approval[:4]}\n")
        term.expect(rf"approved {approval}: the call runs")
        term.expect(r"agent│ ✓ shell")
        term.expect(r"agent│ counted")
        shown = term.screen.everything
        waits = f"agent│ … shell waits for the owner's approval {approval}"
        assert shown.count(waits) == 1 and shown.index(waits) < shown.index(f"approved {approval}")
        term.expect(r"you> ")
        term.type("thanks\n")
        term.expect(r"agent│ you are welcome")
        term.expect(r"you> ")
        term.type("\x04")
        assert term.wait() == 0
    verdicts = [r for r in ledger(box) if r["kind"] == "verdict" and r["approval"] == approval]
    by = [r["by"] for r in verdicts]
    assert len(by) == 1 and by[0].startswith("bxctl chat (") and by[0].endswith(") via gatewayd")


def test_each_command_says_what_to_do_when_the_box_is_not_running(box: Box) -> None:
    home = box.home.parent / "stopped"
    assert run_bxctl(home, "init").returncode == 0
    for command in (["chat", "hello"], ["chat"], ["pending"], ["approve", "abcd2345"]):
        result = run_bxctl(home, *command, timeout=30)
        assert result.returncode == 1, command
        assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert NOT_RUNNING in result.stderr, result.stderr
    assert wait_until(lambda: not list((home / "run").glob("*.sock")), 1, "no sockets")


# --- outputs, Stop, and what a write would change (issue 12) ---------------------------------


def test_chat_folds_a_tools_output_and_shows_it_with_show_output(box: Box) -> None:
    notes = box.home / "workspace" / "shown.md"
    notes.write_text("line one\nline \x1b[31mtwo\n")
    read = box.model.calls(("read_file", args(path=str(notes)))).tool_calls
    for words in ("fold it", "show it"):
        box.model.script(words, Answer(tool_calls=read), Answer(text="read"))
    folded = box.bxctl("chat", "--session", "c-fold", "fold it")
    assert "agent│ ✓ read_file: done, 23 bytes (--show-output to see it)\n" in folded.stdout
    assert "line one" not in folded.stdout
    shown = box.bxctl("chat", "--session", "c-show", "--show-output", "show it")
    assert shown.returncode == 0, shown.stderr
    assert (
        "agent│ ✓ read_file: done, 23 bytes:\n"
        "agent│     line one\n"
        "agent│     line \\x1b[31mtwo\n"
        "agent│ read\n"
    ) in shown.stdout


def test_the_console_shows_the_last_output_on_a_command(box: Box) -> None:
    notes = box.home / "workspace" / "last.md"
    notes.write_text("the last words\n")
    box.model.script(
        "read the last",
        box.model.calls(("read_file", args(path=str(notes)))),
        Answer(text="done reading"),
    )
    with chat_on_a_terminal(box, "--session", "c-output") as term:
        term.expect(r"/help for help, Ctrl-C stops a turn, Ctrl-D leaves")
        term.type("/output\n")
        term.expect(r"no tool has given an output in this chat yet")
        term.type("read the last\n")
        term.expect(r"✓ read_file: done, 15 bytes \(/output shows it\)")
        term.expect(r"you> ")
        term.type("/output\n")
        term.expect(r"agent│ ✓ read_file: done, 15 bytes:\s+agent│     the last words")
        term.type("/help\n")
        term.expect(r"/output  the last tool's output")
        term.type("\x04")
        assert term.wait() == 0
    assert not box.model.requests_for("/output"), "a command is not a message"


def test_ctrl_c_in_the_console_stops_the_turn_and_a_second_one_at_the_prompt_leaves(
    box: Box,
) -> None:
    box.model.script("ponder forever", Answer(text="too late", delay_s=60))
    box.model.script("still there?", Answer(text="yes"))
    with chat_on_a_terminal(box, "--session", "c-stop") as term:
        term.expect(r"you> ")
        term.type("ponder forever\n")
        wait_until(lambda: box.model.requests_for("ponder forever"), 10, "the model asked")
        term.process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        term.expect(r"stopping the turn… \(Ctrl-C again leaves\)")
        term.expect(r"turn 1 stopped; its pending approvals are denied")
        term.expect(r"agent│ \(the turn was stopped by the owner\)")
        term.expect(r"you> ")
        term.type("still there?\n")
        term.expect(r"agent│ yes")
        term.expect(r"you> ")
        term.process.send_signal(signal.SIGINT)
        assert term.wait() == 0
    assert "too late" not in term.screen.everything


def test_ctrl_c_on_a_terminal_stops_a_one_shot_chats_turn_and_without_one_only_leaves(
    box: Box,
) -> None:
    box.model.script("mull it over", Answer(text="too late", delay_s=60))
    with chat_on_a_terminal(box, "--session", "c-stop-1", "mull it over") as term:
        wait_until(lambda: box.model.requests_for("mull it over"), 10, "the model asked")
        term.process.send_signal(signal.SIGINT)
        term.expect(r"turn 1 stopped; its pending approvals are denied")
        term.expect(r"agent│ \(the turn was stopped by the owner\)")
        assert term.wait() == 130
    box.model.script("mull it over again", Answer(text="in time", delay_s=2))
    with box.bxctl_process("chat", "--session", "c-stop-2", "mull it over again") as chat:
        wait_until(lambda: box.model.requests_for("mull it over again"), 10, "the model asked")
        chat.send_signal(signal.SIGINT)
        _, err = chat.communicate(timeout=20)
        assert chat.returncode == 130
        assert "stopped watching; the turn goes on" in err
    events = box.turn("c-stop-2", 1)
    assert [e.event for e in events][-1] == TurnEnd(EndReason.DONE)


def test_ctrl_c_while_an_approval_is_asked_stops_the_turn_and_denies_it(box: Box) -> None:
    box.model.script("wipe it", shell(box, "rm -rf ./*"), Answer(text="wiped"))
    with chat_on_a_terminal(box, "--session", "c-stop-ask") as term:
        term.expect(r"you> ")
        term.type("wipe it\n")
        approval = term.expect(r"approval ([a-z2-9]{8}): shell").group(1)
        term.expect(prompt(approval))
        term.process.send_signal(signal.SIGINT)
        term.expect(r"turn 1 stopped; its pending approvals are denied")
        term.expect(r"\(the turn was stopped by the owner\)")
        term.expect(r"you> ")
        term.type("\x04")
        assert term.wait() == 0
    (verdict,) = [r for r in ledger(box) if r["kind"] == "verdict" and r["approval"] == approval]
    assert (verdict["approve"], verdict["by"]) == (False, "owner (turn cancelled)")
    assert "wiped" not in term.screen.everything


def test_pending_and_the_card_show_what_a_write_would_change(box: Box) -> None:
    folder = box.home / "workspace" / "asks"
    folder.mkdir()
    write_grant(box.home, "asks-write", tool="write_file", mode="ask", path=str(folder))
    (folder / "todo.md").write_text("- milk\n- bread\n")
    write = args(path=str(folder / "todo.md"), content="- milk\n- eggs\n")
    box.model.script("edit todo", box.model.calls(("write_file", write)), Answer(text="edited"))
    with box.bxctl_process("chat", "--session", "c-preview", "edit todo") as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        approval = out.expect(r"approval ([a-z2-9]{8}): write_file").group(1)
        card = out.expect(r"waiting for the owner's verdict")
        name = str(folder / "todo.md").lstrip("/")
        would = (
            f"  would change:\n    --- a/{name}\n    +++ b/{name}\n    @@ -1,2 +1,2 @@\n"
            "     - milk\n    -- bread\n    +- eggs\n"
        )
        assert would in card.string
        listing = box.bxctl("pending").stdout
        assert would in listing, listing
        (mine,) = [a for a in json.loads(box.bxctl("pending", "--json").stdout)
                   if a["approval"] == approval]  # fmt: skip
        assert mine["preview"].startswith(f"--- a/{name}\n")
        assert box.bxctl("deny", approval).returncode == 0
        assert out.drain() == 0
