"""Jobs through the whole box (`bxctl up`, the fake model scripted by each job's prompt; SPEC
§19, issue 16), on schedules of a few seconds: a job runs on time with only its grants; its
budgets (steps, tokens, runtime) end it `budget` and `runtime`; a missed run with `catch_up =
"once"` runs once after `bxctl up`, with `skip` not at all; an approval from a job waits for
the owner, no second run starts meanwhile, a SIGKILL of loopd neither loses nor doubles the
run, and the owner's refusal ends it `denied`; the next run comes on schedule. No sleeps: every
wait polls a condition."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bxcore.clock import parse_rfc3339
from bxcore.wire.messages import PendingList, PendingQuery
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args, ledger_records
from tests.support.daemons import sync_request
from tests.support.e2e import UpBox, box_up

HOUR_MS = 3_600_000


def job_file(home: Path, job_id: str, text: str) -> None:
    (home / "jobs").mkdir(exist_ok=True, mode=0o700)
    (home / "jobs" / f"{job_id}.toml").write_text(text)


def job_records(home: Path, job_id: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in ledger_records(home) if r["kind"] == kind and r["job"] == job_id]


def ended(box: UpBox, job_id: str, run: int, timeout: float = 30.0) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        runs = [r for r in job_records(box.home, job_id, "job_ended") if r["run"] == run]
        return runs[0] if runs else None

    record: dict[str, Any] = wait_until(found, timeout, f"job {job_id}'s run {run} ended")
    return record


def since_ms(home: Path, job_id: str) -> int:
    try:
        return int(
            json.loads((home / "sessions" / ".jobs.json").read_text())["jobs"][job_id]["since_ms"]
        )
    except (FileNotFoundError, KeyError, ValueError):
        return 0


def before_up(home: Path) -> None:
    workspace = home / "workspace"
    (workspace / "a.txt").write_text("hello")
    job_file(home, "reader", 'every = "2s"\nprompt = "job reader"\ngrants = ["memory"]\n')
    job_file(home, "looper", 'every = "2s"\nprompt = "job looper"\nmax_steps = 2\n')
    job_file(
        home, "timer",
        'every = "2s"\nprompt = "job timer"\ngrants = ["workspace-shell"]\nmax_runtime_s = 2\n',
    )  # fmt: skip
    job_file(home, "manual", 'every = "366d"\nprompt = "job manual"\n')
    job_file(home, "spender", 'every = "2s"\nprompt = "job spender"\nmax_tokens = 1500\n')
    job_file(home, "delegator", 'every = "2s"\nprompt = "job delegator"\nmax_tokens = 1500\n')
    for catch_up in ("once", "skip"):
        job_file(
            home, f"catch-{catch_up}",
            f'every = "1h"\nprompt = "job catch {catch_up}"\ncatch_up = "{catch_up}"\n',
        )  # fmt: skip
    # the box was down for three hours: each catch-up job's slots since were missed
    down_since = int(time.time() * 1000) - 3 * HOUR_MS - 60_000
    states = {
        f"catch-{c}": {"since_ms": down_since, "runs": 0, "open": None} for c in ("once", "skip")
    }
    (home / "sessions").mkdir(exist_ok=True, mode=0o700)
    (home / "sessions" / ".jobs.json").write_text(json.dumps({"version": 1, "jobs": states}))


@pytest.fixture(scope="module")
def box() -> Iterator[UpBox]:
    with box_up(before_up=before_up) as up:
        read = args(path=f"{up.home}/workspace/a.txt")
        up.model.script("job reader", up.model.calls(("read_file", read)), Answer("read it"))
        memory = args(action="recall", query="x")
        up.model.script("job looper", *[up.model.calls(("memory", memory))] * 5)
        shell = args(command="true", cwd=f"{up.home}/workspace")
        up.model.script("job timer", up.model.calls(("shell", shell)), Answer("ran"))
        for catch_up in ("once", "skip"):
            up.model.script(f"job catch {catch_up}", Answer("caught up"))
        up.model.script("job manual", Answer("by hand", delay_s=2.0))
        costly = Answer(tool_calls=up.model.calls(("memory", memory)).tool_calls, usage=(900, 100))
        up.model.script("job spender", *[costly] * 5)
        spawn = up.model.calls(("spawn", args(task="a sub-agent that spends"))).tool_calls
        up.model.script(
            "job delegator",
            Answer(tool_calls=spawn, usage=(100, 0)),
            Answer(tool_calls=costly.tool_calls, usage=(100, 0)),
        )
        up.model.script("a sub-agent that spends", *[costly] * 5)
        yield up


def test_a_job_runs_on_time_with_only_its_grants(box: UpBox) -> None:
    record = ended(box, "reader", 1)
    assert record["how"] == "done" and record["steps"] == 2
    (started,) = [r for r in job_records(box.home, "reader", "job_started") if r["run"] == 1]
    assert started["why"] == "schedule" and "slot" in started
    late_ms = parse_rfc3339(started["at"]) - parse_rfc3339(started["slot"])
    assert 0 <= late_ms <= 3000  # on time: within a tick or two of its slot
    decisions = [
        r for r in ledger_records(box.home)
        if r["kind"] == "decision" and r["session"] == "job-reader-1"
    ]  # fmt: skip
    # the owner's starter grant workspace-read allows it; the job names only memory
    assert [(d["tool"], d["outcome"], d.get("reason")) for d in decisions] == [
        ("read_file", "denied", "no_grant")
    ]


def test_max_steps_ends_a_run_budget(box: UpBox) -> None:
    record = ended(box, "looper", 1)
    assert (record["how"], record["steps"]) == ("budget", 2)


def test_max_tokens_ends_a_run_budget_after_the_answer_that_went_past_it(box: UpBox) -> None:
    record = ended(box, "spender", 1)
    assert (record["how"], record["steps"], record["tokens"]) == ("budget", 2, 2000)
    assert "max_tokens" in record["detail"]
    decided = [
        r for r in ledger_records(box.home)
        if r["kind"] == "decision" and r["session"] == "job-spender-1"
    ]  # fmt: skip
    assert len(decided) == 1  # the second answer's call, past the budget, never reached brokerd


def test_a_runs_sub_agents_spend_from_its_max_tokens(box: UpBox) -> None:
    record = ended(box, "delegator", 1)
    # the run's 100, then its sub-agent's 1000 and 2000 (past the 1400 left: it stops),
    # then the run's next 100 takes it past 1500 with the sub-agent's: budget
    assert (record["how"], record["tokens"]) == ("budget", 2200)
    child = [
        r for r in ledger_records(box.home)
        if r["kind"] == "decision" and r["session"].startswith("sub-job-delegator-1-")
    ]  # fmt: skip
    assert len(child) == 1  # the sub-agent's second answer, past what was left, ran nothing


def test_max_runtime_ends_a_run_waiting_for_the_owner_runtime(box: UpBox) -> None:
    record = ended(box, "timer", 1)
    assert record["how"] == "runtime" and record["detail"] == "max_runtime_s 2 passed"
    assert 2000 <= record["runtime_ms"] < 10_000


def test_a_missed_run_with_catch_up_once_runs_once_and_with_skip_not_at_all(box: UpBox) -> None:
    record = ended(box, "catch-once", 1)
    assert record["how"] == "done"
    (started,) = job_records(box.home, "catch-once", "job_started")
    assert started["why"] == "catch_up" and started["missed"] == 3 and "slot" not in started
    # the skip job's missed slots were handled (its state moved past them) without a run
    wait_until(lambda: since_ms(box.home, "catch-skip") > since_ms(box.home, "catch-once") - 5000,
               10, "the skip job handled")  # fmt: skip
    assert job_records(box.home, "catch-skip", "job_started") == []


def test_job_history_shows_the_runs(box: UpBox) -> None:
    ended(box, "looper", 1)
    done = box.bxctl("job", "history", "looper", "--json")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    assert runs[0]["run"] == 1 and runs[0]["how"] == "budget" and runs[0]["steps"] == 2


def test_the_owner_runs_a_job_now_but_never_two_runs_at_once(box: UpBox) -> None:
    first = box.bxctl("job", "run", "manual")
    assert first.returncode == 0, first.stderr
    assert "session job-manual-1" in first.stdout
    again = box.bxctl("job", "run", "manual")
    assert again.returncode == 1 and "job manual's run 1 is still going" in again.stderr
    record = ended(box, "manual", 1)
    assert record["how"] == "done"
    (started,) = job_records(box.home, "manual", "job_started")
    assert started["why"] == "owner"
    refused = box.bxctl("chat", "--session", "job-manual-9", "hello")
    assert refused.returncode != 0 and "kept for jobs' runs" in refused.stderr


# --- an approval from a job: waits, no overlap, a crash of loopd, denied -------------------------


def pending_of(box: UpBox, session: str) -> str | None:
    answer = sync_request(box.home, "admin", PendingQuery("q"))
    assert isinstance(answer, PendingList)
    found = [info for info in answer.approvals if info.session == session]
    if found:
        run = session.rsplit("-", 1)[1]
        assert found[0].job == f"job asker's run {run}: sees only the grants workspace-shell"
    return found[0].approval if found else None


def asker_before_up(home: Path) -> None:
    job_file(home, "asker", 'every = "2s"\nprompt = "job asker"\ngrants = ["workspace-shell"]\n')


def test_an_approval_from_a_job_waits_survives_a_crash_and_the_run_ends_denied() -> None:
    with box_up(before_up=asker_before_up) as box:
        shell = args(command="true", cwd=f"{box.home}/workspace")
        box.model.script("job asker", box.model.calls(("shell", shell)), Answer("ran"))
        approval = wait_until(lambda: pending_of(box, "job-asker-1"), 30, "the job's approval")
        # slots pass while it waits: no second run starts (only time passing can show it)
        two_slots_later = time.monotonic() + 4.5
        wait_until(lambda: time.monotonic() >= two_slots_later, 10, "two slots to pass")
        assert len(job_records(box.home, "asker", "job_started")) == 1
        # loopd killed while the run waits: it carries the same run on, under the same approval
        pid = box.services()["loopd"]["pid"]
        os.kill(pid, signal.SIGKILL)
        box.restarted("loopd", pid)
        assert pending_of(box, "job-asker-1") == approval
        done = box.bxctl("deny", approval)
        assert done.returncode == 0, done.stderr
        record = ended(box, "asker", 1)
        assert record["how"] == "denied"
        # the next run comes on schedule; run 1 was never started twice
        wait_until(lambda: pending_of(box, "job-asker-2"), 20, "the next run, asking again")
        runs = [r["run"] for r in job_records(box.home, "asker", "job_started")]
        assert runs[:2] == [1, 2] and len(runs) == len(set(runs))
        ends = [r["run"] for r in job_records(box.home, "asker", "job_ended")]
        assert len(ends) == len(set(ends))
