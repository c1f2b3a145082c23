"""`bxctl grant add | list | check` for MCP tools (SPEC §18.5): `--kind` and `--match` written
as a `[match]` table that the core's `parse_grant` reads back exactly, or refused with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.brokerd.core.grants import Grant, McpKind, parse_grant
from services.brokerd.grant_files import (
    GrantFields,
    GrantRefused,
    check_grant,
    match_value,
    parse_match,
)
from tests.support.cli import bxctl


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    return home


@pytest.mark.parametrize(
    ("typed", "value"),
    [
        ("main", "main"),
        ("5", 5),
        ("-2", -2),
        ("1.5", 1.5),
        ("007", "007"),  # not a JSON number: the text
        ("1e3", "1e3"),
        ("glob:/home/*", "glob:/home/*"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_a_match_value_is_a_number_only_when_it_reads_as_a_json_number(
    typed: str, value: object
) -> None:
    assert match_value(typed) == value
    assert type(match_value(typed)) is type(value)


def test_match_options_need_a_name_and_an_equals_sign() -> None:
    assert parse_match(["q=a=b", "n=1"]) == (("q", "a=b"), ("n", 1))
    for bad in ("x", "=1"):
        with pytest.raises(GrantRefused, match="expected NAME=VALUE"):
            parse_match([bad])


def test_what_is_written_is_read_back_by_the_core_with_kind_and_match() -> None:
    fields = GrantFields(
        "mcp__git__git_log",
        "ask",
        class_="public",
        kind="source",
        match=(("repo_path", "glob:/r/*"), ("max_count", 5), ("repo_path", '/x\n"y')),
    )
    grant, text = check_grant("git-log", fields, "a test", {})
    assert "[match]" in text
    again = parse_grant("git-log", text.encode())
    assert again == grant
    assert grant.kind is McpKind.SOURCE and grant.untrusted  # untrusted by default (§18.5)
    assert dict(grant.match) == {"max_count": (5,), "repo_path": ("glob:/r/*", '/x\n"y')}
    assert grant.holds({"repo_path": "/r/a", "max_count": 5})
    assert not grant.holds({"repo_path": "/r/a", "max_count": 6})


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (GrantFields("read_file", path="/tmp", kind="sink"), "only a grant of an MCP tool"),
        (GrantFields("memory", match=(("a", 1),)), "only a grant of an MCP tool takes match"),
        (GrantFields("mcp__git__git_log", kind="write"), 'kind: expected "source"'),
        (GrantFields("mcp__git__git_log", path="/tmp"), "an MCP grant takes no path"),
        (GrantFields("mcp__git__git_log", match=(("a", "glob:"),)), "empty glob"),
        (GrantFields("mcp__Bad Name__x"), "tool:"),
    ],
)
def test_a_wrong_mcp_grant_is_refused_with_the_cores_reason(fields: GrantFields, why: str) -> None:
    with pytest.raises(GrantRefused, match="not added") as refused:
        check_grant("g", fields, "a test", {})
    assert why in str(refused.value)


def test_grant_add_writes_an_mcp_grant_and_list_and_check_show_kind_and_match(home: Path) -> None:
    added = bxctl(
        home, "grant", "add", "mail-send", "--tool", "mcp__mailbox__send_email",
        "--mode", "ask", "--kind", "sink", "--class", "public",
        "--match", "to=glob:*@example.org", "--match", "to=kyle@home.test",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "sink" in added.stdout
    grant = parse_grant("mail-send", (home / "grants" / "mail-send.toml").read_bytes())
    assert isinstance(grant, Grant) and grant.kind is McpKind.SINK
    assert grant.match == (("to", ("glob:*@example.org", "kyle@home.test")),)
    listed = {g["id"]: g for g in json.loads(bxctl(home, "grant", "list", "--json").stdout)}
    assert listed["mail-send"]["kind"] == "sink"
    assert listed["mail-send"]["match"] == {"to": ["glob:*@example.org", "kyle@home.test"]}
    assert listed["memory"]["kind"] is None and listed["memory"]["match"] == {}
    text = bxctl(home, "grant", "list").stdout
    assert 'sink to="glob:*@example.org"|"kyle@home.test"' in text
    check = bxctl(home, "grant", "check")
    assert check.returncode == 0
    assert "mcp: mail-send: ask mcp__mailbox__send_email sink to=" in check.stdout
    assert json.loads(bxctl(home, "grant", "check", "--json").stdout)["mcp"][0]["id"] == "mail-send"


def test_grant_add_refuses_a_wrong_kind_or_match_and_writes_nothing(home: Path) -> None:
    for extra in (["--kind", "reads"], ["--match", "branch"], ["--kind", "sink", "--path", "/a"]):
        result = bxctl(home, "grant", "add", "g", "--tool", "mcp__git__*", *extra)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert not (home / "grants" / "g.toml").exists()
    built_in = bxctl(home, "grant", "add", "g", "--tool", "memory", "--kind", "source")
    assert built_in.returncode == 1 and "only a grant of an MCP tool" in built_in.stderr
