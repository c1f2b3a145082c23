"""`bxctl session list|show`, `explain`, `audit tail|verify`: the owner's questions, answered
by the real daemons over their real sockets."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.home import witness
from bxcore.wire.messages import History, HistoryQuery, OwnerMessage, TurnEnd
from tests.fakes.model_server import FakeModel
from tests.support.cli import bxctl
from tests.support.daemons import init_home, running


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A box that has run one turn: a read, a denied call, and an answer."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp")) / "h"
    with FakeModel() as model:
        init_home(home, f'[model]\nbase_url = "{model.base_url}"\n')
        (home / "workspace" / "a.md").write_text("hello")
        a_md = json.dumps({"path": f"{home}/workspace/a.md"})
        model.reply(tool_calls=[("read_file", a_md)], usage=(100, 10))
        model.reply(tool_calls=[("read_file", json.dumps({"path": "/etc/hostname"}))])
        model.reply(text="Read it.", usage=(300, 30))  # 440 in all: one answer said nothing
        with running("brokerd", home), running("memoryd", home), running("loopd", home) as loopd:
            loopd.ask(OwnerMessage("o1", "chat-1", "read a.md"))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                history = loopd.ask(HistoryQuery("h", "chat-1"))
                assert isinstance(history, History)
                if history.events and isinstance(history.events[-1].event, TurnEnd):
                    break
                time.sleep(0.05)
            yield home
    import shutil

    shutil.rmtree(home.parent, ignore_errors=True)


def test_session_list_shows_the_session_with_its_label(box: Path) -> None:
    result = bxctl(box, "session", "list", "--json")
    assert result.returncode == 0, result.stderr
    [session] = json.loads(result.stdout)
    assert session["session"] == "chat-1" and session["turns"] == 1
    assert session["class"] == "private" and session["untrusted"] is False
    assert session["tokens"] == 440
    shown = bxctl(box, "session", "list").stdout
    assert "TOKENS" in shown and "440" in shown


def test_session_show_prints_the_history_and_a_denials_reason_only(box: Path) -> None:
    result = bxctl(box, "session", "show", "chat-1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("chat-1: private, 7 events")
    assert 'tool_denied: {"tool":"read_file","reason":"no_grant"}' in result.stdout
    assert 'turn_end: {"reason":"done","tokens":440}' in result.stdout
    assert result.stdout.rstrip().endswith("tokens: 440 (turn 1: 440)")
    shown = json.loads(bxctl(box, "session", "show", "chat-1", "--json").stdout)
    assert (shown["tokens"], shown["turn_tokens"]) == (440, {"1": 440})


def test_explain_says_why_a_call_would_be_denied_and_records_nothing(box: Path) -> None:
    before = (box / "audit" / "ledger.jsonl").read_bytes()
    result = bxctl(box, "explain", "--session", "chat-1", "read_file", '{"path":"/etc/hostname"}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "read_file: denied (no_grant)"
    assert "no grant of read_file matches" in result.stdout
    allowed = bxctl(box, "explain", "--session", "chat-1", "read_file",
                    json.dumps({"path": f"{box}/workspace/a.md"}))  # fmt: skip
    assert allowed.stdout.splitlines()[0] == "read_file: allowed"
    assert (box / "audit" / "ledger.jsonl").read_bytes() == before


def test_audit_tail_shows_the_newest_records_of_a_session(box: Path) -> None:
    result = bxctl(box, "audit", "tail", "-n", "3", "--session", "chat-1", "--json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["kind"] for r in records] == ["decision", "executed", "decision"]
    assert records[-1]["reason"] == "no_grant"
    table = bxctl(box, "audit", "tail", "-n", "5")
    assert table.returncode == 0 and "SEQ" in table.stdout and "no_grant" in table.stdout


def test_audit_verify_reports_a_ledger_cut_below_the_witnessed_head(box: Path) -> None:
    ok = bxctl(box, "audit", "verify")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
    kept = witness.read(box / "witness" / "bxctl.json")
    assert kept is not None and kept.seq > 3
    ledger = box / "audit" / "ledger.jsonl"
    whole = ledger.read_bytes()
    try:
        ledger.write_bytes(b"".join(whole.splitlines(keepends=True)[:3]))
        cut = bxctl(box, "audit", "verify")
        assert cut.returncode == 1
        assert "cut or rewritten" in cut.stdout and f"seq {kept.seq}" in cut.stdout
    finally:
        ledger.write_bytes(whole)
