"""A job as the owner reads it (SPEC §19): its file with its next runs, and its runs paired
from the ledger's `job_started` and `job_ended`. The one code behind `bxctl job list | show |
history` and the console's Jobs view, so both say the same."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from bxcore.clock import rfc3339
from bxcore.jobs.job import Cron, InvalidJob, Job
from bxcore.jobs.schedule import next_runs


def upcoming(job: Job, zone: tzinfo, now: datetime, count: int) -> list[datetime]:
    """The job's next `count` runs after `now`, in `zone`; none when it is disabled."""
    return next_runs(job.timing, zone, now, count) if job.enabled else []


def job_json(job: Job | InvalidJob, zone: tzinfo, now: datetime, count: int) -> dict[str, Any]:
    """The job as JSON, with its next `count` runs (RFC 3339, UTC)."""
    if isinstance(job, InvalidJob):
        return {"id": job.id, "valid": False, "problem": job.problem, "sha256": job.sha256}
    runs = upcoming(job, zone, now, count)
    return {
        "id": job.id,
        "valid": True,
        "schedule": job.timing.expression if isinstance(job.timing, Cron) else None,
        "every": None if isinstance(job.timing, Cron) else job.timing.text,
        "prompt": job.prompt,
        "grants": list(job.grants),
        "max_steps": job.max_steps,
        "max_tokens": job.max_tokens,
        "max_runtime_s": job.max_runtime_s,
        "catch_up": job.catch_up.value,
        "enabled": job.enabled,
        "sha256": job.sha256,
        "next_runs": [rfc3339(int(run.timestamp() * 1000)) for run in runs],
    }


def runs_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`job_started` and `job_ended` records paired by run, oldest first."""
    runs: dict[int, dict[str, Any]] = {}
    for record in records:
        run = runs.setdefault(
            int(record["run"]),
            {
                "run": record["run"], "session": record["session"], "started": None,
                "why": None, "slot": None, "missed": None, "ended": None, "how": None,
                "steps": None, "tokens": None, "runtime_ms": None, "detail": None,
            },
        )  # fmt: skip
        if record["kind"] == "job_started":
            run.update(started=record["at"], why=record["why"], slot=record.get("slot"),
                       missed=record["missed"])  # fmt: skip
        else:
            run.update(ended=record["at"], how=record["how"], steps=record["steps"],
                       tokens=record.get("tokens"), runtime_ms=record["runtime_ms"],
                       detail=record.get("detail"))  # fmt: skip
    return [runs[key] for key in sorted(runs)]
