"""A job's run is decided against only the grants its job names (§19, issue 16): the table of
what a job's session may do next to what the owner's own session may."""

from __future__ import annotations

import json

import pytest

from bxcore.deny import DenyReason
from bxcore.ids import job_run_of, job_run_session
from bxcore.jobs.job import Job, parse_job
from bxcore.labels import DataClass, Label
from services.brokerd.core import job_scope
from services.brokerd.core.grants import Grant, Mode
from services.brokerd.core.job_scope import JobScope, scope_of
from services.brokerd.core.policy import Allowed, Ask, Denied

PRIVATE = Label(DataClass.PRIVATE, False)
SECRET = Label(DataClass.SECRET, False)


def g(
    gid: str, tool: str, mode: str = "allow", *, path: str | None = None, cls: str = "private"
) -> Grant:
    return Grant(gid, tool, Mode(mode), path, None, DataClass(cls), False, "", "0" * 64)


HOME = g("home", "read_file", path="/home/kyle")
MAIL = g("mail", "read_file", "ask", path="/home/kyle/mail")
SSH = g("ssh", "read_file", "deny", path="/home/kyle/.ssh")
NOTES_W = g("notes-w", "write_file", path="/home/kyle/notes", cls="public")
MEMORY = g("memory", "memory")
OWNERS = [HOME, MAIL, SSH, NOTES_W, MEMORY]


def read(path: str) -> str:
    return json.dumps({"path": path})


SSH_ID = read("/home/kyle/.ssh/id")
WRITE_NOTE = json.dumps({"path": "/home/kyle/notes/x", "content": "t"})
BAD = json.dumps({"file": "x"})
RECALL = json.dumps({"action": "recall", "query": "x"})
BOTH = frozenset({"home", "memory"})


def outcome(decision: object) -> str:
    if isinstance(decision, Denied):
        return decision.reason.value
    assert isinstance(decision, Allowed | Ask), decision
    return f"{'allowed' if isinstance(decision, Allowed) else 'ask'} {decision.winner.id}"


@pytest.mark.parametrize(
    ("named", "tool", "arguments", "label", "owner_gets", "job_gets"),
    [
        # the owner's grant allows it; the job does not name it
        (["memory"], "read_file", read("/home/kyle/a.md"), PRIVATE, "allowed home", "no_grant"),
        (["home"], "read_file", read("/home/kyle/a.md"), PRIVATE, "allowed home", "allowed home"),
        # a narrower ask still asks in a job that names it, and is no_grant in one that does not
        (["mail"], "read_file", read("/home/kyle/mail/1"), PRIVATE, "ask mail", "ask mail"),
        (["home"], "read_file", read("/home/kyle/mail/1"), PRIVATE, "ask mail", "no_grant"),
        # a deny the job does not name: still no run, said as no_grant
        (["home"], "read_file", SSH_ID, PRIVATE, "denied_by_grant", "no_grant"),
        (["ssh"], "read_file", SSH_ID, PRIVATE, "denied_by_grant", "denied_by_grant"),
        # flow: the named grant's check holds; an unnamed one's is no_grant
        (["notes-w"], "write_file", WRITE_NOTE, SECRET,
         "flow_violation", "flow_violation"),
        ([], "write_file", WRITE_NOTE, SECRET,
         "flow_violation", "no_grant"),
        # what no grant decides stands
        ([], "nope", "{}", PRIVATE, "unknown_tool", "unknown_tool"),
        ([], "read_file", BAD, PRIVATE, "invalid_arguments", "invalid_arguments"),
        ([], "read_file", read("/etc/passwd"), PRIVATE, "no_grant", "no_grant"),
        # a job with no grants may call nothing
        ([], "memory", RECALL, PRIVATE, "allowed memory", "no_grant"),
    ],
)  # fmt: skip
def test_a_jobs_session_gets_the_owners_decision_only_through_the_jobs_grants(
    named: list[str], tool: str, arguments: str, label: Label, owner_gets: str, job_gets: str
) -> None:
    scope = JobScope("j", 1, frozenset(named))
    assert outcome(job_scope.decide(label, tool, arguments, OWNERS, None)) == owner_gets
    assert outcome(job_scope.decide(label, tool, arguments, OWNERS, scope)) == job_gets


def test_an_approval_never_widens_a_jobs_grants() -> None:
    scope = JobScope("j", 1, frozenset({"home"}))
    redecided = job_scope.redecide(PRIVATE, "read_file", read("/home/kyle/mail/1"), OWNERS, scope)
    assert isinstance(redecided, Denied) and redecided.reason is DenyReason.NO_GRANT
    named = JobScope("j", 1, frozenset({"mail"}))
    again = job_scope.redecide(PRIVATE, "read_file", read("/home/kyle/mail/1"), OWNERS, named)
    assert isinstance(again, Allowed) and again.winner.id == "mail"


def test_explain_says_whose_run_it_is_and_why_it_is_no_grant() -> None:
    trace: list[str] = []
    scope = JobScope("morning", 3, frozenset({"memory"}))
    job_scope.decide(PRIVATE, "read_file", read("/home/kyle/a"), OWNERS, scope, trace)
    assert trace[0] == "session of job morning's run 3: sees only the grants memory"
    assert trace[-1] == "home is not one of the job's grants: no_grant"


def job(text: str, job_id: str = "morning") -> Job:
    parsed = parse_job(job_id, text.encode())
    assert isinstance(parsed, Job), parsed
    return parsed


INVALID = parse_job("morning", b"every = 1")
MORNING = job('every = "1h"\nprompt = "p"\ngrants = ["home", "memory"]\n')


@pytest.mark.parametrize(
    ("session", "found", "known", "expected"),
    [
        ("chat-1", MORNING, {"home", "memory"}, None),
        ("job-morning", MORNING, {"home", "memory"}, None),  # no run number: no job's run
        ("job-morning-3", MORNING, {"home", "memory"}, JobScope("morning", 3, BOTH)),
        ("sub-job-morning-3-1", MORNING, {"home", "memory"}, JobScope("morning", 3, BOTH)),
        ("sub-sub-job-morning-3-1-2", MORNING, {"home", "memory"}, JobScope("morning", 3, BOTH)),
        ("job-morning-3", None, {"home"}, JobScope("morning", 3, problem=(
            "there is no job file morning.toml"))),
        ("job-morning-3", MORNING, {"home"}, JobScope("morning", 3, problem=(
            "the job is invalid: grants: no valid grant 'memory' (see `bxctl grant list`)"))),
        ("job-morning-3", INVALID, {"home"}, JobScope("morning", 3, problem=(
            'the job is invalid: every: expected a string like "30m", got 1'))),
    ],
)  # fmt: skip
def test_the_scope_of_a_session(
    session: str, found: object, known: set[str], expected: JobScope | None
) -> None:
    assert scope_of(session, found, known) == expected  # type: ignore[arg-type]


def test_a_missing_or_invalid_job_gives_no_grant_at_all() -> None:
    scope = scope_of("job-morning-1", None, {"home"})
    assert scope is not None
    decision = job_scope.decide(PRIVATE, "read_file", read("/home/kyle/a"), OWNERS, scope)
    assert isinstance(decision, Denied) and decision.reason is DenyReason.NO_GRANT


@pytest.mark.parametrize(
    ("session", "run"),
    [
        ("job-a-1", ("a", 1)),
        ("job-mail-daily-12", ("mail-daily", 12)),
        ("sub-job-a-1-4", ("a", 1)),
        ("job-a-01", None),
        ("job-a-", None),
        ("job--1", None),
        ("job-A-1", None),
        ("jobs-a-1", None),
        ("sub-chat-1-1", None),
        ("chat", None),
    ],
)
def test_which_sessions_are_a_jobs_runs(session: str, run: tuple[str, int] | None) -> None:
    assert job_run_of(session) == run
    if run is not None and not session.startswith("sub-"):
        assert job_run_session(*run) == session
