"""A job's run through a real brokerd (§19, issue 16): decided against only the grants its job
file names, read by brokerd itself; `explain` and the approval card say so; its start and end
recorded in the ledger once each, also across a crash, and read back for `bxctl job history`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.wire.messages import (
    AuditRecords,
    Denied,
    Done,
    Error,
    Explain,
    Explanation,
    JobEnd,
    JobEnded,
    JobHistoryQuery,
    JobRecorded,
    JobStarted,
    JobWhy,
    Pending,
    PendingList,
    PendingQuery,
)
from tests.support.brokerd import args, call, ledger_records, short_folder
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


# --- the ledger's records of a run (§7, §19) -------------------------------------------------

SHA = "ab" * 32


def started(job: str, run: int, rid: str = "s1") -> JobStarted:
    return JobStarted(rid, job, run, JobWhy.SCHEDULE, SHA, "2026-05-04T05:30:00.000Z", 2)


def test_a_run_is_recorded_started_and_ended_once_each_and_across_a_crash() -> None:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        with running("brokerd", home) as brokerd:
            first = brokerd.ask(started("mail", 1))
            assert isinstance(first, JobRecorded) and first.first
            again = brokerd.ask(started("mail", 1, "s2"))
            assert again == JobRecorded("s2", "mail", 1, first.seq, False)
            never = brokerd.ask(JobEnded("e0", "mail", 2, JobEnd.DONE, 1, 10))
            assert isinstance(never, Error) and "never recorded started" in never.message
            brokerd.kill()  # a crash: the next brokerd finds the run in its ledger
        with running("brokerd", home) as brokerd:
            assert brokerd.ask(started("mail", 1, "s3")) == JobRecorded(
                "s3", "mail", 1, first.seq, False
            )
            ended = brokerd.ask(JobEnded("e1", "mail", 1, JobEnd.BUDGET, 24, 8123, None, "x"))
            assert isinstance(ended, JobRecorded) and ended.first
            history = brokerd.ask(JobHistoryQuery("h1", "mail"), socket="admin")
        assert isinstance(history, AuditRecords)
        shown = [json.loads(line) for line in history.records]
        assert [(r["kind"], r["run"], r["session"]) for r in shown] == [
            ("job_started", 1, "job-mail-1"),
            ("job_ended", 1, "job-mail-1"),
        ]
        assert shown[0]["why"] == "schedule" and shown[0]["missed"] == 2
        assert shown[1]["how"] == "budget" and shown[1]["steps"] == 24
        kinds = [r["kind"] for r in ledger_records(home)]
        assert kinds.count("job_started") == 1 and kinds.count("job_ended") == 1
