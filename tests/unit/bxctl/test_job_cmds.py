"""`bxctl job list | show | add | rm` (SPEC §13, §19), offline, in the test's process; `run` and
`history` without a box say so in one line, and pair a run's records; one `python -m bxctl` run
as the owner types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bxcore.jobs.job import Cron, Job, parse_job
from bxcore.jobs.view import runs_of
from tests.support.cli import bxctl

BERLIN = {**os.environ, "TZ": "Europe/Berlin"}


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0  # the starter grants: memory, workspace-*
    return home


def test_no_jobs_says_how_to_add_one(home: Path) -> None:
    done = bxctl(home, "job", "list")
    assert done.returncode == 0
    assert "no jobs" in done.stdout and "bxctl job add" in done.stdout
    assert json.loads(bxctl(home, "job", "list", "--json").stdout) == []


def test_add_writes_a_job_the_parser_reads_back(home: Path) -> None:
    done = bxctl(
        home,
        "job",
        "add",
        "new-year",
        "--schedule",
        "0 0 1 1 *",
        "--prompt",
        "Wish me a happy new year.",
        "--grant",
        "memory",
        "--max-tokens",
        "2000",
        "--catch-up",
        "skip",
        env=BERLIN,
    )
    assert done.returncode == 0, done.stderr
    assert "added new-year: cron 0 0 1 1 *; next run" in done.stdout
    assert "-01-01 00:00:00 CET" in done.stdout  # the owner's zone
    path = home / "jobs" / "new-year.toml"
    assert path.stat().st_mode & 0o777 == 0o600
    job = parse_job("new-year", path.read_bytes())
    assert isinstance(job, Job)
    assert job.timing == Cron("0 0 1 1 *")
    assert (job.grants, job.max_tokens, job.catch_up) == (("memory",), 2000, "skip")


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--every", "1w"], "not added: every: '1w' is not a whole number"),
        (["--every", "1h", "--schedule", "* * * * *"], "not both"),
        ([], "missing schedule or every"),
        (["--every", "1h", "--grant", "mail-read"], "no valid grant 'mail-read'"),
        (["--every", "1h", "--max-steps", "0"], "max_steps: expected 1 to 1000"),
    ],
)
def test_add_refuses_an_invalid_job_in_one_line(home: Path, args: list[str], why: str) -> None:
    done = bxctl(home, "job", "add", "tick", "--prompt", "p", *args)
    assert done.returncode == 1
    assert done.stderr.startswith("bxctl: ") and why in done.stderr
    assert done.stderr.count("\n") == 1
    assert not (home / "jobs" / "tick.toml").exists()


def test_add_never_replaces_a_job(home: Path) -> None:
    assert bxctl(home, "job", "add", "tick", "--every", "1h", "--prompt", "a").returncode == 0
    done = bxctl(home, "job", "add", "tick", "--every", "2h", "--prompt", "b")
    assert done.returncode == 1 and "exists already" in done.stderr
    assert 'every = "1h"' in (home / "jobs" / "tick.toml").read_text()


def test_add_without_a_needed_option_is_a_usage_error(home: Path) -> None:
    assert bxctl(home, "job", "add", "tick", "--every", "1h").returncode == 2


def test_list_shows_next_runs_and_flags_invalid_and_disabled_jobs(home: Path) -> None:
    jobs = home / "jobs"
    assert (
        bxctl(home, "job", "add", "new-year", "--schedule", "0 0 1 1 *", "--prompt", "p").returncode
        == 0
    )
    assert (
        bxctl(home, "job", "add", "off", "--every", "1h", "--prompt", "p", "--disabled").returncode
        == 0
    )
    (jobs / "broken.toml").write_text('every = "1h"\nprompt = "p"\nmodel = "big"\n')
    (jobs / "orphan.toml").write_text('every = "1h"\nprompt = "p"\ngrants = ["mail-read"]\n')
    done = bxctl(home, "job", "list", env=BERLIN)
    assert done.returncode == 0
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "INVALID" in lines["broken"] and "unknown key 'model'" in lines["broken"]
    assert "no valid grant 'mail-read'" in lines["orphan"]
    assert "disabled" in lines["off"]
    assert "-01-01 00:00:00 CET" in lines["new-year"] and "(none)" in lines["new-year"]
    listed = {
        row["id"]: row
        for row in json.loads(bxctl(home, "job", "list", "--json", env=BERLIN).stdout)
    }
    assert listed["broken"]["valid"] is False
    assert listed["off"]["next_runs"] == [] and listed["off"]["enabled"] is False
    (next_run,) = listed["new-year"]["next_runs"]
    assert next_run.endswith("-12-31T23:00:00.000Z")  # midnight in Berlin, in UTC


def test_show_prints_a_job_whole_and_exits_1_for_an_invalid_one(home: Path) -> None:
    prompt = "Look at my notes.\nSay what changed."
    assert bxctl(home, "job", "add", "notes", "--every", "30m", "--prompt", prompt).returncode == 0
    done = bxctl(home, "job", "show", "notes")
    assert done.returncode == 0
    assert "job notes: every 30m, enabled" in done.stdout
    assert "grants: (none: the job may call no tool)" in done.stdout
    assert done.stdout.count("next run: ") == 5
    assert "  Look at my notes.\n  Say what changed." in done.stdout
    shown = json.loads(bxctl(home, "job", "show", "notes", "--json").stdout)
    assert shown["every"] == "30m" and len(shown["next_runs"]) == 5
    (home / "jobs" / "bad.toml").write_text("every = 1\n")
    bad = bxctl(home, "job", "show", "bad")
    assert bad.returncode == 1 and "invalid: bad: every: expected a string" in bad.stdout
    missing = bxctl(home, "job", "show", "nope")
    assert missing.returncode == 1 and "no job 'nope'" in missing.stderr


def test_rm_removes_a_job_and_refuses_one_that_is_not_there(home: Path) -> None:
    assert bxctl(home, "job", "add", "tick", "--every", "1h", "--prompt", "p").returncode == 0
    assert bxctl(home, "job", "rm", "tick").stdout == "removed tick\n"
    assert not (home / "jobs" / "tick.toml").exists()
    again = bxctl(home, "job", "rm", "tick")
    assert (
        again.returncode == 1
        and "no job 'tick'" in again.stderr
        and "bxctl job list" in again.stderr
    )


@pytest.mark.parametrize("command", ["run", "history"])
def test_run_and_history_without_a_box_fail_in_one_line(home: Path, command: str) -> None:
    done = bxctl(home, "job", command, "tick")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_history_pairs_each_runs_records_and_shows_a_run_still_going() -> None:
    at = "2026-05-04T05:30:01.000Z"
    started = {"kind": "job_started", "at": at, "run": 1, "session": "job-t-1",
               "why": "schedule", "slot": "2026-05-04T05:30:00.000Z", "missed": 0}  # fmt: skip
    ended = {"kind": "job_ended", "at": at, "run": 1, "session": "job-t-1", "how": "budget",
             "steps": 3, "runtime_ms": 1200, "detail": "max_steps 3 reached"}  # fmt: skip
    going = {**started, "run": 2, "session": "job-t-2", "why": "owner", "slot": None}
    runs = runs_of([started, ended, going])
    assert [(r["run"], r["why"], r["how"], r["steps"]) for r in runs] == [
        (1, "schedule", "budget", 3),
        (2, "owner", None, None),
    ]


def test_a_job_added_as_the_owner_types_it_is_listed(home: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bxctl", "--home", str(home), "job", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=BERLIN,
        )

    added = run(
        "add",
        "morning-mail",
        "--schedule",
        "30 7 * * 1-5",
        "--prompt",
        "Summarise my mail.",
        "--grant",
        "memory",
    )
    assert added.returncode == 0, added.stderr
    listed = run("list")
    assert listed.returncode == 0
    assert "morning-mail" in listed.stdout and "07:30:00 CE" in listed.stdout


def test_disable_and_enable_change_only_the_enabled_line(home: Path) -> None:
    assert bxctl(home, "job", "add", "tick", "--prompt", "p", "--every", "1h").returncode == 0
    path = home / "jobs" / "tick.toml"
    before = path.read_text()
    done = bxctl(home, "job", "disable", "tick")
    assert (done.returncode, done.stdout.strip()) == (0, "disabled tick")
    assert parse_job("tick", path.read_bytes()).enabled is False  # type: ignore[union-attr]
    done = bxctl(home, "job", "enable", "tick")
    assert (done.returncode, done.stdout.strip()) == (0, "enabled tick")
    after = path.read_text()
    assert [line for line in after.splitlines() if "enabled" not in line] == [
        line for line in before.splitlines() if "enabled" not in line
    ]
    missing = bxctl(home, "job", "disable", "nope")
    assert missing.returncode == 1 and "no job 'nope'" in missing.stderr
