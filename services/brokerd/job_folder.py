"""brokerd's own reading of `{home}/jobs/<id>.toml` (SPEC §19): what a job's run may use is
what the job's file says when the call is decided, read by brokerd, never taken from loopd.

Only a job's run costs anything: one `stat` of its job's file a decision, the file read and
parsed again only when its inode, size or times changed. Parsing is `bxcore.jobs.job`'s; the
scope is the core's (`services.brokerd.core.job_scope`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from bxcore.ids import job_run_of
from bxcore.jobs.files import read_job_bytes
from bxcore.jobs.job import InvalidJob, Job, parse_job
from services.brokerd.core.grants import Grant
from services.brokerd.core.job_scope import JobScope, scope_of

log = logging.getLogger(__name__)

Mark = tuple[int, int, int, int]


class JobFolder:
    """The jobs folder as brokerd sees it, each file cached by its `stat` marks."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[str, tuple[Mark, Job | InvalidJob]] = {}

    def __repr__(self) -> str:
        return f"JobFolder({self.folder}: {len(self._cache)} jobs read)"

    def scope(self, session: str, grants: Sequence[Grant]) -> JobScope | None:
        """The grants `session` may use when it is a job's run (else None, at the cost of a
        look at its name); `grants`: the owner's valid grants now."""
        run = job_run_of(session)
        if run is None:
            return None
        return scope_of(session, self._job(run[0]), {grant.id for grant in grants})

    def prompt(self, job_id: str) -> str | None:
        """The prompt of job `job_id` as its file says now; None when it has no valid file."""
        job = self._job(job_id)
        return job.prompt if isinstance(job, Job) else None

    def _job(self, job_id: str) -> Job | InvalidJob | None:
        path = self.folder / f"{job_id}.toml"
        try:
            info = os.stat(path)
        except FileNotFoundError:
            self._cache.pop(job_id, None)
            return None
        except OSError as error:
            return InvalidJob(job_id, "", f"cannot read the file: {error.strerror}")
        mark = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = self._cache.get(job_id)
        if cached is not None and cached[0] == mark:
            return cached[1]
        try:
            job = parse_job(job_id, read_job_bytes(path))
        except FileNotFoundError:
            return None
        except OSError as error:
            return InvalidJob(job_id, "", f"cannot read the file: {error.strerror}")
        if isinstance(job, InvalidJob):
            log.warning("job %s is invalid, so its runs get no grant: %s", job_id, job.problem)
        self._cache[job_id] = (mark, job)
        return job
