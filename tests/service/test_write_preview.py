"""The `write_file` preview over a real brokerd (SPEC §12.2): the pending approval carries a
unified diff of the file as it is against what would be written, on `broker-events` and in the
pending list; a link at the path (or on its way) gives no preview and is never followed; a
brokerd started again gives a rebuilt approval its preview anew.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.wire.messages import ApprovalInfo, ApprovalRequested, Pending, PendingList, PendingQuery
from tests.support.brokerd import Events, call, short_folder, write_grant
from tests.support.daemons import Daemon, init_home, running
from tests.support.owner import wait_until


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        asks = home.parent / "asks"
        asks.mkdir()
        write_grant(home, "asks", tool="write_file", mode="ask", path=str(asks))
        vault = home.parent / "vault"
        vault.mkdir()
        (vault / "key.txt").write_text("the launch code\n")
        with running("brokerd", home) as daemon:
            yield daemon


def ask_write(daemon: Daemon, call_id: str, path: Path, content: str) -> ApprovalInfo:
    """A write_file the `asks` grant asks about; its approval as brokerd lists it."""
    arguments = json.dumps({"path": str(path), "content": content})
    outcome = call(daemon, "preview", call_id, "write_file", arguments)
    assert isinstance(outcome, Pending), outcome
    listed = daemon.ask(PendingQuery("q1"), socket="admin")
    assert isinstance(listed, PendingList)
    (info,) = [a for a in listed.approvals if a.approval == outcome.approval]
    return info


def test_the_pending_approval_of_a_write_carries_what_it_would_change(brokerd: Daemon) -> None:
    target = brokerd.home.parent / "asks" / "plan.md"
    target.write_text("# Plan\n- buy milk\n- call Ann\n")
    name = str(target).lstrip("/")
    with Events(brokerd.home) as events:
        info = ask_write(brokerd, "c1", target, "# Plan\n- buy oat milk\n- call Ann\n")
        told = events.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert info.preview == (
        f"--- a/{name}\n+++ b/{name}\n@@ -1,3 +1,3 @@\n"
        " # Plan\n-- buy milk\n+- buy oat milk\n - call Ann\n"
    )
    assert told.approval == info  # the owner's side is told the same
    assert target.read_text() == "# Plan\n- buy milk\n- call Ann\n"  # nothing written yet


def test_a_new_file_is_previewed_against_nothing(brokerd: Daemon) -> None:
    target = brokerd.home.parent / "asks" / "new.md"
    info = ask_write(brokerd, "c2", target, "hello\n")
    assert (
        info.preview == f"--- /dev/null\n+++ b/{str(target).lstrip('/')}\n@@ -0,0 +1 @@\n+hello\n"
    )


@pytest.mark.parametrize("how", ["file", "folder"])
def test_a_link_at_the_path_gives_no_preview_and_is_not_followed(brokerd: Daemon, how: str) -> None:
    asks, vault = brokerd.home.parent / "asks", brokerd.home.parent / "vault"
    if how == "file":
        target = asks / "key-link.txt"
        target.symlink_to(vault / "key.txt")
    else:
        (asks / "vault-link").symlink_to(vault)
        target = asks / "vault-link" / "key.txt"
    info = ask_write(brokerd, f"c-{how}", target, "overwritten\n")
    assert info.preview is None
    assert "launch code" not in json.dumps(info.arguments)
    assert (vault / "key.txt").read_text() == "the launch code\n"


def test_other_tools_have_no_preview(brokerd: Daemon) -> None:
    write_grant(
        brokerd.home, "asks-shell", tool="shell", mode="ask", path=str(brokerd.home.parent / "asks")
    )
    outcome = call(
        brokerd,
        "preview",
        "c-shell",
        "shell",
        json.dumps({"command": "ls", "cwd": str(brokerd.home.parent / "asks")}),
    )
    assert isinstance(outcome, Pending), outcome
    listed = brokerd.ask(PendingQuery("q1"), socket="admin")
    assert isinstance(listed, PendingList)
    (info,) = [a for a in listed.approvals if a.approval == outcome.approval]
    assert info.preview is None


def test_a_rebuilt_approval_gets_its_preview_again(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    work = home / "workspace"
    write_grant(home, "asks", tool="write_file", mode="ask", path=str(work))
    (work / "a.md").write_text("old\n")
    with running("brokerd", home) as daemon:
        first = ask_write(daemon, "c1", work / "a.md", "new\n")
    assert first.preview is not None
    with running("brokerd", home) as daemon:

        def previewed() -> str | None:  # read in the background once brokerd has started
            listed = daemon.ask(PendingQuery("q1"), socket="admin")
            assert isinstance(listed, PendingList)
            return next(a.preview for a in listed.approvals if a.approval == first.approval)

        assert wait_until(previewed, 10, "the preview read again") == first.preview
