"""`bxctl grant add | check | list` and `bxctl mcp show` against the owner's pins (issue 23),
offline: a `[match]` key the pinned tool does not have is refused by `add` and flagged by
`check` and `list` (a deny saying that it denies its whole tool meanwhile); a tool not yet
pinned is not refused, and said to be unchecked; and what each kind means is said in words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bxcore.home.layout import Home
from bxcore.mcp_tools import ToolDef
from bxctl import mcp_pins
from services.brokerd.core.grants import KINDS_SAID, RESULTS_SAID
from tests.support.cli import bxctl

SEND = "mcp__mailbox__send_email"
SEND_EMAIL = ToolDef(
    "send_email",
    "Send one mail.",
    {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}},
)
MISSPELT = f'tool = "{SEND}"\nmode = "deny"\n\n[match]\nrecipient = "glob:*@evil.example"\n'
WHY = f"match.recipient: {SEND} has no argument 'recipient' (its arguments: body, to)"


@pytest.fixture
def home(short_tmp: Path) -> Path:
    """A home whose config names the mailbox and whose owner pinned its one tool."""
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    with (home / "config.toml").open("a") as config:
        config.write(f'\n[[mcp]]\nname = "mailbox"\ncommand = ["{sys.executable}"]\n')
    paths = Home(home)
    mcp_pins.trust(paths, "mailbox", (SEND_EMAIL,))
    paths.run.mkdir(exist_ok=True)
    listing = {"server": "mailbox", "tools": [SEND_EMAIL.definition()]}
    (paths.run / "mcp-mailbox.json").write_text(json.dumps(listing))
    return home


def test_grant_add_refuses_a_match_key_the_pinned_tool_does_not_have(home: Path) -> None:
    added = bxctl(
        home, "grant", "add", "mail-evil", "--tool", SEND, "--mode", "deny",
        "--match", "recipient=glob:*@evil.example",
    )  # fmt: skip
    assert added.returncode == 1
    assert added.stderr == f"bxctl: not added: {WHY}\n"
    assert not (home / "grants" / "mail-evil.toml").exists()
    right = bxctl(
        home, "grant", "add", "mail-evil", "--tool", SEND, "--mode", "deny",
        "--match", "to=glob:*@evil.example",
    )  # fmt: skip
    assert right.returncode == 0, right.stderr


def test_check_and_list_flag_a_misspelt_deny_and_say_it_denies_the_whole_tool(
    home: Path,
) -> None:
    (home / "grants" / "mail-evil.toml").write_text(MISSPELT)
    denies = f"being a deny, it denies every call of {SEND} until it is mended"
    checked = bxctl(home, "grant", "check")
    assert checked.returncode == 1
    assert f"invalid: mail-evil: {WHY}; {denies}" in checked.stdout
    assert "all valid" not in checked.stdout
    data = json.loads(bxctl(home, "grant", "check", "--json").stdout)
    assert data["invalid"] == [{"id": "mail-evil", "problem": WHY, "denies": [SEND]}]
    listed = bxctl(home, "grant", "list").stdout
    assert "INVALID" in listed and "denies every call of" in " ".join(listed.split())
    as_json = {g["id"]: g for g in json.loads(bxctl(home, "grant", "list", "--json").stdout)}
    assert as_json["mail-evil"]["valid"] is False and as_json["mail-evil"]["denies"] == [SEND]


def test_a_grant_of_a_server_not_pinned_yet_is_valid_and_said_unchecked(home: Path) -> None:
    (home / "grants" / "git-log.toml").write_text(
        'tool = "mcp__git__git_log"\nmode = "allow"\n\n[match]\nrepo = "/r"\n'
    )
    checked = bxctl(home, "grant", "check")
    assert checked.returncode == 0, checked.stdout
    assert (
        "unchecked: git-log: its [match] cannot be checked yet: git has no pins yet; checked "
        "once `bxctl mcp trust git`"
    ) in checked.stdout
    for kind, meaning in KINDS_SAID:
        assert f"kind {kind}: {meaning}" in checked.stdout
    assert RESULTS_SAID in checked.stdout
    data = json.loads(bxctl(home, "grant", "check", "--json").stdout)
    assert data["unchecked"][0]["id"] == "git-log" and data["kinds"]["sink"]


def test_mcp_show_says_what_each_kind_means(home: Path) -> None:
    shown = bxctl(home, "mcp", "show", "mailbox")
    assert shown.returncode == 0, shown.stderr
    assert f"  {RESULTS_SAID}" in shown.stdout
    for kind, meaning in KINDS_SAID:
        assert f"  {kind}: {meaning}" in shown.stdout
