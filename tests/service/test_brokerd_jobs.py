"""A job's run through a real brokerd (§19, issue 16): decided against only the grants its job
file names, read by brokerd itself; `explain` and the approval card say so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.messages import Denied, Done, Explain, Explanation, Pending, PendingList, PendingQuery
from tests.support.brokerd import args, call, short_folder
from tests.support.daemons import Daemon, init_home, running


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        (home / "workspace" / "a.txt").write_text("hello")
        (home / "jobs").mkdir()
        with running("brokerd", home) as daemon:
            yield daemon


def write_job(home: Path, job_id: str, grants: list[str]) -> None:
    names = ", ".join(f'"{grant}"' for grant in grants)
    (home / "jobs" / f"{job_id}.toml").write_text(
        f'every = "1h"\nprompt = "p"\ngrants = [{names}]\n'
    )


def read_a(home: Path) -> str:
    return args(path=f"{home}/workspace/a.txt")


def test_a_call_the_owners_grants_allow_is_no_grant_in_a_job_that_does_not_name_the_grant(
    brokerd: Daemon,
) -> None:
    home = brokerd.home
    write_job(home, "notes", ["memory"])
    assert isinstance(call(brokerd, "chat-1", "c1", "read_file", read_a(home)), Done)
    for session in ("job-notes-1", "sub-job-notes-1-1"):
        outcome = call(brokerd, session, "c1", "read_file", read_a(home))
        assert outcome == Denied(DenyReason.NO_GRANT), session


def test_it_is_allowed_when_the_job_names_it_and_a_change_of_the_file_is_seen_at_once(
    brokerd: Daemon,
) -> None:
    home = brokerd.home
    write_job(home, "reader", ["workspace-read"])
    done = call(brokerd, "job-reader-1", "c1", "read_file", read_a(home))
    assert isinstance(done, Done) and done.output == "hello"
    write_job(home, "reader", ["memory"])
    denied = call(brokerd, "job-reader-1", "c2", "read_file", read_a(home))
    assert denied == Denied(DenyReason.NO_GRANT)


@pytest.mark.parametrize(
    "job_file",
    [None, 'every = "1h"\nprompt = "p"\ngrants = ["workspace-read"]\nmax_token = 5\n'],
    ids=["missing", "invalid"],
)
def test_a_missing_or_invalid_job_file_gives_no_grant_at_all(
    brokerd: Daemon, job_file: str | None
) -> None:
    home = brokerd.home
    job_id = "missing" if job_file is None else "broken"
    if job_file is not None:
        (home / "jobs" / f"{job_id}.toml").write_text(job_file)
    outcome = call(brokerd, f"job-{job_id}-1", "c1", "read_file", read_a(home))
    assert outcome == Denied(DenyReason.NO_GRANT)


def test_explain_and_the_approval_card_show_the_jobs_grants(brokerd: Daemon) -> None:
    home = brokerd.home
    write_job(home, "asker", ["workspace-shell", "memory"])
    explained = brokerd.ask(Explain("e1", "job-asker-2", "read_file", read_a(home)), socket="admin")
    assert isinstance(explained, Explanation)
    assert explained.reason is DenyReason.NO_GRANT
    line = "job asker's run 2: sees only the grants memory, workspace-shell"
    assert explained.steps[1] == f"session of {line}"
    assert explained.steps[-1] == "workspace-read is not one of the job's grants: no_grant"
    shell = args(command="true", cwd=f"{home}/workspace")
    outcome = call(brokerd, "job-asker-2", "c1", "shell", shell)
    assert isinstance(outcome, Pending)
    owners = call(brokerd, "chat-2", "c1", "shell", shell)
    listed = brokerd.ask(PendingQuery("q2"), socket="admin")
    assert isinstance(listed, PendingList)
    cards = {info.approval: info for info in listed.approvals}
    assert cards[outcome.approval].job == line
    assert isinstance(owners, Pending) and cards[owners.approval].job is None
