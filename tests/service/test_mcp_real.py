"""Real third-party MCP servers from PyPI (SPEC §18.7) through a real brokerd, in its sandbox:
`mcp-server-git` on a repository made in the test's folder (status, log, diff as sources;
add and commit as sinks, the commit checked in the repository itself) and `mcp-server-time`."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

from bxcore.labels import DataClass, Label
from bxcore.wire.messages import Done, Pending
from tests.support.brokerd import args, call
from tests.support.daemons import init_home, running, tool_owned
from tests.support.mcp import VENV_BIN, entry, grant, reachable, trust


def git(repo: Path, *argv: str) -> str:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), *argv],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def make_repo(repo: Path) -> Path:
    """A repository with one commit and one file changed since, usable by the tool user."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Owner")
    git(repo, "config", "user.email", "owner@example.com")
    (repo / "notes.md").write_text("first line\n")
    git(repo, "add", "notes.md")
    git(repo, "commit", "-q", "-m", "the first note")
    (repo / "notes.md").write_text("first line\nsecond line\n")
    reachable(repo)
    tool_owned(repo)  # a root brokerd's server runs as the tool user: its repository
    return repo


def git_server(repo: Path) -> str:
    command = [str(VENV_BIN / "mcp-server-git"), "--repository", str(repo)]
    return entry("git", command, paths=[str(repo)])


def test_git_status_log_and_diff_are_sources_run_in_the_sandbox(short_tmp: Path) -> None:
    repo = make_repo(short_tmp / "repo")
    home = init_home(short_tmp / "h", git_server(repo))
    for tool in ("git_status", "git_log", "git_diff_unstaged"):
        grant(home, tool.replace("_", "-"), f"mcp__git__{tool}", kind="source", class_="private")
    where = args(repo_path=str(repo))
    with running("brokerd", home) as brokerd:
        trust(home, "git")
        status = call(brokerd, "s1", "c1", "mcp__git__git_status", where)
        assert isinstance(status, Done) and status.ok, status
        assert "notes.md" in status.output and "modified" in status.output
        assert status.label == Label(DataClass.PRIVATE, True)  # third-party: untrusted
        log = call(brokerd, "s1", "c2", "mcp__git__git_log", where)
        assert isinstance(log, Done) and log.ok and "the first note" in log.output, log
        diff = call(brokerd, "s1", "c3", "mcp__git__git_diff_unstaged", where)
        assert isinstance(diff, Done) and diff.ok and "+second line" in diff.output, diff
    assert git(repo, "status", "--porcelain") == " M notes.md\n"  # sources changed nothing


def test_git_add_and_commit_are_sinks_asked_when_untrusted_and_really_commit(
    short_tmp: Path,
) -> None:
    repo = make_repo(short_tmp / "repo")
    home = init_home(short_tmp / "h", git_server(repo))
    grant(home, "git-read", "mcp__git__git_status", kind="source")
    grant(home, "git-write", "mcp__git__git_*", kind="sink", untrusted=False)
    # what git_add answers is the owner's word that it is trusted: a sink's result raises the
    # session by its grant's label like any other (issue 23), and the commit after it runs
    grant(home, "git-add", "mcp__git__git_add", kind="sink", untrusted=False)
    grant(home, "git-commit", "mcp__git__git_commit", kind="sink")
    where = {"repo_path": str(repo)}
    with running("brokerd", home) as brokerd:
        trust(home, "git")
        # An untrusted session (it read the repository's status) is asked before a sink.
        call(brokerd, "s1", "c1", "mcp__git__git_status", args(**where))
        asked = call(brokerd, "s1", "c2", "mcp__git__git_commit", args(**where, message="x"))
        assert isinstance(asked, Pending), asked
        # A clean session's sinks run: add, then commit, in the real repository.
        added = call(brokerd, "s2", "c1", "mcp__git__git_add", args(**where, files=["notes.md"]))
        assert isinstance(added, Done) and added.ok, added
        message = "the second note, by the agent"
        done = call(brokerd, "s2", "c2", "mcp__git__git_commit", args(**where, message=message))
        assert isinstance(done, Done) and done.ok, done
        assert done.label == Label(DataClass.PRIVATE, True)  # a sink's result raises too
    assert git(repo, "log", "-1", "--format=%s").strip() == message
    assert git(repo, "show", "HEAD:notes.md") == "first line\nsecond line\n"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"  # the asked one never ran
    if os.geteuid() == 0:  # the server ran as the tool user, not as root without capabilities
        assert (repo / ".git" / "index").stat().st_uid == pwd.getpwnam("nobody").pw_uid
    lines = (home / "audit" / "ledger.jsonl").read_text().splitlines()
    asked_records = [r for r in map(json.loads, lines) if r.get("call") == "c2"]
    outcomes = [(r["kind"], r.get("session"), r.get("outcome")) for r in asked_records]
    assert ("decision", "s1", "pending") in outcomes
    assert ("executed", "s1", None) not in outcomes


def test_the_time_server_is_a_source(short_tmp: Path) -> None:
    command = [str(VENV_BIN / "mcp-server-time"), "--local-timezone", "Etc/UTC"]
    home = init_home(short_tmp / "h", entry("time", command))
    grant(home, "time", "mcp__time__get_current_time", kind="source", untrusted=False)
    with running("brokerd", home) as brokerd:
        trust(home, "time")
        now = call(brokerd, "s1", "c1", "mcp__time__get_current_time", args(timezone="Etc/UTC"))
        assert isinstance(now, Done) and now.ok, now
        answer = json.loads(now.output)
        assert answer["timezone"] == "Etc/UTC" and answer["datetime"].endswith("+00:00")
        unpinned = call(brokerd, "s1", "c2", "mcp__time__convert_time", "{}")
        assert not isinstance(unpinned, Done)  # no grant for it: nothing runs
