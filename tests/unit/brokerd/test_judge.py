"""The facts a decision is made of (`Judge`): what it looks at for which call. A built-in tool
is decided without the MCP tools (their pins are not looked at), an MCP tool against them; a
job's run is confined to its job's grants, and any other session is not."""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.deny import DenyReason
from bxcore.mcp_tools import NO_TOOLS, Catalog
from services.brokerd.core import policy
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
