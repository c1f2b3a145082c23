"""The console's Jobs routes over plain HTTP (SPEC §12.3, §19; issue 16), against a real
`bxctl up` box with the fake model and a few job files written before it started: every job
with its next runs and last results, an invalid one flagged with why; Enable and Disable
rewriting only the file's `enabled`; Run now starting a run loopd carries, refused while that
run waits for the owner's approval, which marks the job as waiting; and the guard's refusals.
Every response passes `Console.checked` (the §12.1 headers, no token, no 500)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bxcore.clock import parse_rfc3339
from tests.e2e.test_console_http import Console, attempts, console_of, error_of
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args
from tests.support.e2e import box_up

TICK = '# the owner\'s\nevery = "366d"  # once a year\nenabled = true\nprompt = "job tick"\n'
FILES = {
    "tick": TICK,
    "weekday": 'schedule = "30 7 * * 1-5"\nprompt = "job weekday"\nenabled = false\n',
    "asker": 'every = "366d"\nprompt = "job asker"\ngrants = ["workspace-shell"]\n',
    "broken": 'every = "1h"\nprompt = "job broken"\ngrants = ["nonesuch"]\n',
}


def write_jobs(home: Path) -> None:
    (home / "jobs").mkdir(mode=0o700, exist_ok=True)
    for job_id, text in FILES.items():
        (home / "jobs" / f"{job_id}.toml").write_text(text)


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with box_up(before_up=write_jobs) as box:
        box.model.script("job tick", Answer("ticked"))
        shell = args(command="true", cwd=f"{box.home}/workspace")
        box.model.script("job asker", box.model.calls(("shell", shell)), Answer("ran"))
        yield console_of(box)


@pytest.fixture
def owner(console: Console) -> Iterator[httpx.Client]:
    with console.client() as client:
        yield client


def jobs_of(owner: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = owner.get("/api/jobs")
    assert answer.status_code == 200, answer.text
    return {job["id"]: job for job in answer.json()["jobs"]}


def test_every_job_is_listed_with_its_next_runs_and_an_invalid_one_with_why(
    owner: httpx.Client,
) -> None:
    jobs = jobs_of(owner)
    assert sorted(jobs) == ["asker", "broken", "tick", "weekday"]
    tick = jobs["tick"]
    assert (tick["valid"], tick["every"], tick["schedule"], tick["enabled"]) == (
        True, "366d", None, True,
    )  # fmt: skip
    assert len(tick["next_runs"]) == 3 and tick["next_runs"] == sorted(tick["next_runs"])
    assert parse_rfc3339(tick["next_runs"][0]) > time.time() * 1000
    assert (jobs["weekday"]["schedule"], jobs["weekday"]["next_runs"]) == ("30 7 * * 1-5", [])
    broken = jobs["broken"]
    assert broken["valid"] is False and "nonesuch" in broken["problem"]
    assert broken["runs"] == [] and broken["running"] is None and broken["waiting"] == []


def test_disable_then_enable_rewrites_only_enabled_in_the_file(
    console: Console, owner: httpx.Client
) -> None:
    path = console.home / "jobs" / "tick.toml"
    off = owner.post("/api/jobs/tick/enabled", json={"enabled": False})
    assert off.status_code == 200, off.text
    assert off.json()["job"]["enabled"] is False and off.json()["job"]["next_runs"] == []
    assert path.read_text() == TICK.replace("enabled = true", "enabled = false")
    assert jobs_of(owner)["tick"]["enabled"] is False
    on = owner.post("/api/jobs/tick/enabled", json={"enabled": True})
    assert on.status_code == 200 and on.json()["job"]["enabled"] is True
    assert path.read_text() == TICK
    # a file with no `enabled` gets one; an invalid job may be turned off too
    broken = owner.post("/api/jobs/broken/enabled", json={"enabled": False})
    assert broken.status_code == 200 and broken.json()["job"]["valid"] is False
    text = (console.home / "jobs" / "broken.toml").read_text()
    assert text == "enabled = false\n" + FILES["broken"]


def test_enabled_refuses_a_bad_body_and_a_job_that_is_not_there(owner: httpx.Client) -> None:
    for sent in ({}, {"enabled": "no"}, {"enabled": 0}, {"enabled": True, "other": 1}):
        error_of(owner.post("/api/jobs/tick/enabled", json=sent), 400)
    for job in ("nonesuch", "Bad-Id", "..%2Fgrants%2Fmemory"):
        answer = owner.post(f"/api/jobs/{job}/enabled", json={"enabled": True})
        assert answer.status_code == 404, (job, answer.text)
    error_of(owner.post("/api/jobs/nonesuch/run", json={}), 404)
    assert "nonesuch" in error_of(owner.post("/api/jobs/broken/run", json={}), 400)


def test_run_now_starts_a_run_whose_result_the_list_shows(
    console: Console, owner: httpx.Client
) -> None:
    answer = owner.post("/api/jobs/tick/run", json={})
    assert answer.status_code == 202, answer.text
    session = answer.json()["session"]
    assert answer.json() == {"job": "tick", "session": session} and session.startswith("job-tick-")

    def ended() -> dict[str, Any] | None:
        runs = [r for r in jobs_of(owner)["tick"]["runs"] if r["session"] == session]
        return runs[0] if runs and runs[0]["how"] else None

    run = wait_until(ended, 30, "the run's end in the list")
    assert (run["why"], run["how"], run["steps"]) == ("owner", "done", 1)
    assert run["runtime_ms"] >= 0 and run["started"] <= run["ended"]
    sessions = [s["session"] for s in owner.get("/api/sessions").json()["sessions"]]
    assert session in sessions


def test_a_run_waiting_for_an_approval_marks_its_job_and_refuses_run_now_409(
    console: Console, owner: httpx.Client
) -> None:
    started = owner.post("/api/jobs/asker/run", json={})
    assert started.status_code == 202, started.text
    session = started.json()["session"]
    waiting = wait_until(
        lambda: jobs_of(owner)["asker"]["waiting"] or None, 30, "the job's approval"
    )
    (approval,) = waiting
    pending = owner.get("/api/pending").json()["approvals"]
    (info,) = [a for a in pending if a["session"] == session]
    assert info["approval"] == approval and info["job"].startswith("job asker's run")
    assert jobs_of(owner)["asker"]["running"] == session
    again = owner.post("/api/jobs/asker/run", json={})
    assert "is still going" in error_of(again, 409)
    denied = owner.post(f"/api/approvals/{approval}", json={"approve": False})
    assert denied.status_code == 200, denied.text

    def ended() -> str | None:
        job = jobs_of(owner)["asker"]
        return job["runs"][0]["how"] if job["running"] is None and job["runs"] else None

    assert wait_until(ended, 30, "the run ended") == "denied"
    assert jobs_of(owner)["asker"]["waiting"] == []


@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/jobs/tick/enabled", {"enabled": False}), ("/api/jobs/tick/run", {})],
)
def test_a_job_change_from_another_origin_or_as_a_form_is_403_and_the_cookie_alone_401(
    console: Console, owner: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    before = (console.home / "jobs" / "tick.toml").read_bytes()
    runs = jobs_of(owner)["tick"]["runs"]
    for how, named, arguments in attempts(console.port, body):
        assert named in error_of(owner.post(path, **arguments), 403), how
    with console.client(logged_in=False) as stranger:
        assert "bxctl console" in error_of(stranger.post(path, json=body), 401)
        error_of(stranger.get("/api/jobs"), 401)
    assert (console.home / "jobs" / "tick.toml").read_bytes() == before
    assert jobs_of(owner)["tick"]["runs"] == runs
