"""The console's Jobs routes (SPEC §12.3, §19; each in docs/console.md): every job with its
next runs and last results, Run now, and Enable/Disable.

The jobs are read from `{home}/jobs/` with `bxcore.jobs.files` and shown with `bxcore.jobs.view`,
the code of `bxctl job list` and `bxctl job history`: their next runs computed in the machine's
time zone, their grants checked against the grants brokerd holds valid, their runs paired from
brokerd's ledger. A run is started by loopd (`job_run`), never here; turning a job on or off
rewrites only its file's `enabled`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bxcore.clock import local_zone
from bxcore.ids import job_run_of
from bxcore.jobs import files as job_files
from bxcore.jobs.files import JobRefused
from bxcore.jobs.job import InvalidJob, Job
from bxcore.jobs.view import job_json, runs_of
from bxcore.wire.messages import (
    AuditRecords,
    GrantList,
    GrantsReload,
    JobHistoryQuery,
    JobRun,
    JobRunStarted,
    PendingList,
    PendingQuery,
)
from services.gatewayd.console.api import Backend, Refused, body, rid

NEXT_RUNS = 3
LAST_RUNS = 5
MOST_JOBS = 200


class Jobs:
    """The Jobs routes, asking what `backend` asks: brokerd (grants, the ledger, pending
    approvals) and loopd (runs)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def jobs(self, request: Request) -> Response:
        """`{"zone", "jobs": [job_json + runs (newest first), running, waiting]}`."""
        known = await self._known()
        found = await anyio.to_thread.run_sync(job_files.read_jobs, self.backend.home.jobs, known)
        waiting = await self._waiting()
        zone, now = local_zone(os.environ), datetime.now(UTC)
        rows = []
        for job in found.everything()[:MOST_JOBS]:
            row = job_json(job, zone, now, NEXT_RUNS)
            runs = await self._runs(job.id)
            going = runs[-1] if runs and runs[-1]["ended"] is None else None
            row["runs"] = runs[-LAST_RUNS:][::-1]
            row["running"] = going["session"] if going else None
            row["waiting"] = waiting.get(job.id, [])
            rows.append(row)
        return JSONResponse({"zone": getattr(zone, "key", None) or str(zone), "jobs": rows})

    async def run(self, request: Request) -> Response:
        """Run now: loopd starts a run whatever the schedule; 409 while the last one goes on."""
        job_id = request.path_params["job"]
        await body(request, {})
        job = await self._job(job_id, await self._known())
        if isinstance(job, InvalidJob):
            raise Refused(400, f"job {job_id} is invalid: {job.problem}")
        b = self.backend
        try:
            started: JobRunStarted = await b.ask(b.loop, JobRun(rid(), job_id))
        except Refused as refused:  # the job is there and valid: its last run is still going
            raise Refused(409 if refused.status == 400 else refused.status, str(refused)) from None
        return JSONResponse({"job": job_id, "session": started.session}, 202)

    async def enabled(self, request: Request) -> Response:
        """Enable or Disable: the job file's `enabled` rewritten, every other line kept."""
        job_id = request.path_params["job"]
        given = await body(request, {"enabled": bool})
        if not isinstance(given.get("enabled"), bool):
            raise Refused(400, "enabled must be true or false")
        known = await self._known()
        await self._job(job_id, known)
        folder = self.backend.home.jobs
        try:
            job = await anyio.to_thread.run_sync(
                job_files.set_enabled, folder, job_id, given["enabled"], known
            )
        except JobRefused as error:
            raise Refused(400, str(error)) from None
        now = datetime.now(UTC)
        return JSONResponse({"job": job_json(job, local_zone(os.environ), now, NEXT_RUNS)})

    async def _known(self) -> set[str]:
        """The ids of the grants brokerd holds valid: a job naming any other is invalid."""
        b = self.backend
        found: GrantList = await b.ask(b.admin, GrantsReload(rid()))
        return {grant.id for grant in found.grants if grant.valid}

    async def _job(self, job_id: str, known: set[str]) -> Job | InvalidJob:
        try:
            return await anyio.to_thread.run_sync(
                job_files.read_job, self.backend.home.jobs, job_id, known
            )
        except JobRefused:
            raise Refused(404, f"no job {job_id[:64]!r}: see the Jobs view") from None

    async def _runs(self, job_id: str) -> list[dict[str, Any]]:
        """The job's last runs from the ledger, oldest first (two records a run)."""
        b = self.backend
        query = JobHistoryQuery(rid(), job_id, 2 * LAST_RUNS)
        found: AuditRecords = await b.ask(b.admin, query)
        return runs_of([json.loads(line) for line in found.records])

    async def _waiting(self) -> dict[str, list[str]]:
        """The pending approvals of each job's runs (sub-agents' included), by job."""
        b = self.backend
        answer = await b.gateway.pending_query(PendingQuery(rid()))
        pending: PendingList = b.answer(answer)
        waiting: dict[str, list[str]] = defaultdict(list)
        for approval in pending.approvals:
            run = job_run_of(approval.session)
            if run is not None:
                waiting[run[0]].append(approval.approval)
        return waiting
