"""The facts a decision is made of (`Judge`): what it looks at for which call. A built-in tool
is decided without the MCP tools (their pins are not looked at), an MCP tool against them; a
job's run is confined to its job's grants, and any other session is not; the grants are
checked against the pins only when either changed (issue 23)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN
from bxcore.mcp_tools import NO_TOOLS, Catalog, Pins, ToolDef, build_catalog
from services.brokerd.core import grant_check, policy
from services.brokerd.core.grants import GrantSet
from services.brokerd.grants_folder import GrantsFolder
from services.brokerd.judge import Judge
from services.brokerd.state import StateStore

NOTES = 'tool = "read_file"\nmode = "allow"\npath = "/notes"\n'


class CountingCatalog:
    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> Catalog:
        self.asked += 1
        return NO_TOOLS


def judge(tmp_path: Path, catalog: CountingCatalog) -> Judge:
    (tmp_path / "grants").mkdir()
    (tmp_path / "grants" / "notes.toml").write_text(NOTES)
    return Judge(StateStore(tmp_path / "state"), GrantsFolder(tmp_path / "grants"), mcp=catalog)


def test_a_built_in_tool_is_decided_without_looking_at_the_mcp_tools(tmp_path: Path) -> None:
    catalog = CountingCatalog()
    _, decision = judge(tmp_path, catalog).decide("chat", "read_file", '{"path":"/notes/a"}')
    assert isinstance(decision, policy.Allowed)
    assert catalog.asked == 0


def test_an_mcp_tool_is_decided_against_the_mcp_tools_now(tmp_path: Path) -> None:
    catalog = CountingCatalog()
    _, decision = judge(tmp_path, catalog).decide("chat", "mcp__mail__send", "{}")
    assert decision == policy.Denied(DenyReason.UNKNOWN_TOOL)
    assert catalog.asked == 1


def test_a_jobs_run_without_its_job_file_gets_no_grant_and_another_session_no_scope(
    tmp_path: Path,
) -> None:
    judged = judge(tmp_path, CountingCatalog())
    arguments = json.dumps({"path": "/notes/a"})
    _, decision = judged.decide("job-daily-1", "read_file", arguments)
    assert isinstance(decision, policy.Denied) and decision.reason is DenyReason.NO_GRANT
    assert judged.scope("job-daily-1") is not None
    assert judged.scope("chat") is None


SEND_EMAIL = ToolDef(
    "send_email",
    "Send a mail.",
    {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}},
)
PINNED, _ = build_catalog({"mail": Pins("mail", "", {"send_email": SEND_EMAIL})}, {})
MISSPELT = (
    'tool = "mcp__mail__send_email"\nmode = "deny"\n[match]\nrecipient = "glob:*@evil.example"\n'
)


def test_the_grants_are_checked_against_the_pins_once_until_either_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The schema walk is made when the grants or the catalog change, never per decision; and
    a grant it finds invalid is logged once, saying what it denies."""
    made = []
    real = grant_check.check

    def counted(grants: GrantSet, pins: Mapping[str, Pins]) -> grant_check.CheckedGrants:
        made.append(1)
        return real(grants, pins)

    monkeypatch.setattr(grant_check, "check", counted)
    judged = judge(tmp_path, CountingCatalog())
    judged.mcp = lambda: PINNED
    (tmp_path / "grants" / "mail-evil.toml").write_text(MISSPELT)
    arguments = json.dumps({"to": "a@evil.example", "body": "x"})
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            _, decision = judged.decide("chat", "mcp__mail__send_email", arguments)
            assert isinstance(decision, policy.Denied)
            assert decision.reason is DenyReason.DENIED_BY_GRANT
            assert decision.grant is not None and decision.grant.id == "mail-evil"
    assert len(made) == 1
    said = [r.getMessage() for r in caplog.records if "mail-evil" in r.getMessage()]
    assert said == [
        "grant mail-evil is invalid (match.recipient: mcp__mail__send_email has no argument "
        "'recipient' (its arguments: body, to)) and, being a deny, denies every call of "
        "mcp__mail__send_email until it is mended"
    ]
    judged.decide("chat", "read_file", '{"path":"/notes/a"}')  # the check without pins
    judged.decide("chat", "read_file", '{"path":"/notes/a"}')
    assert len(made) == 2
    (tmp_path / "grants" / "mail-evil.toml").unlink()
    _, decision = judged.decide("chat", "mcp__mail__send_email", arguments)
    assert decision == policy.Denied(DenyReason.NO_GRANT, args=decision.args)
    assert len(made) == 3


def test_the_grant_list_and_explain_flag_an_invalid_deny(tmp_path: Path) -> None:
    judged = judge(tmp_path, CountingCatalog())
    judged.mcp = lambda: PINNED
    (tmp_path / "grants" / "mail-evil.toml").write_text(MISSPELT)
    listed = judged.checked(judged.mcp())
    assert [(g.id, g.denies) for g in listed.invalid] == [("mail-evil", ("mcp__mail__send_email",))]
    trace: list[str] = []
    judged.explain("chat", CLEAN, "read_file", '{"path":"/notes/a"}', trace)
    assert trace[0] == (
        "invalid deny grants, each denying every call of what it names until it is mended: "
        "mail-evil (mcp__mail__send_email)"
    )
