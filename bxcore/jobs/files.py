"""The jobs folder (SPEC §19): reading every `{home}/jobs/*.toml`, writing a new job, turning
one on or off, and removing one. The one code behind `bxctl job list | show | add | rm`, loopd's
scheduler and the console's Jobs view.

Parsing is `bxcore.jobs.job`'s; a job is written as TOML and parsed back before it is linked into
place, so what is written is what the scheduler will read. Every refusal is a `JobRefused`
with one line the owner reads. Which grants exist is the caller's to say (`known`: the ids of
the owner's valid grants), since only brokerd's parser decides that.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tomllib
from collections.abc import Set
from pathlib import Path

from bxcore import owner_toml
from bxcore.config.written import toml_value
from bxcore.frozen import frozen
from bxcore.home.atomic import create_atomically, write_atomically
from bxcore.ids import valid_grant_id
from bxcore.jobs.job import MAX_JOB_BYTES, InvalidJob, Job, check_grants, parse_job

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_NOTHING = hashlib.sha256(b"").hexdigest()
#: A line that may hold the top-level `enabled` key (a multi-line prompt may hold one too: a
#: rewrite is kept only when the file parses back to the same table with `enabled` changed).
_ENABLED_LINE = re.compile(r"^[ \t]*enabled[ \t]*=.*$", re.MULTILINE)


class JobRefused(Exception):
    """Nothing was written or removed; `str()` says why, in one line."""


@frozen
class JobSet:
    valid: tuple[Job, ...] = ()
    invalid: tuple[InvalidJob, ...] = ()

    def everything(self) -> list[Job | InvalidJob]:
        return sorted([*self.valid, *self.invalid], key=lambda job: job.id)


@frozen
class JobFields:
    """What the owner gives `bxctl job add`; None: the key is left out (its default holds)."""

    prompt: str
    schedule: str | None = None
    every: str | None = None
    grants: tuple[str, ...] = ()
    max_steps: int | None = None
    max_tokens: int | None = None
    max_runtime_s: int | None = None
    catch_up: str | None = None
    enabled: bool | None = None


def read_jobs(folder: Path, known: Set[str] | None) -> JobSet:
    """Every `*.toml` file in `folder`, parsed and its grants checked against `known`; a
    missing folder is no jobs."""
    valid: list[Job] = []
    invalid: list[InvalidJob] = []
    for name in sorted(owner_toml.names(folder)):
        job_id = name[: -len(".toml")]
        try:
            parsed = check_grants(parse_job(job_id, read_job_bytes(folder / name)), known)
        except OSError as error:
            parsed = InvalidJob(job_id, _NOTHING, f"cannot read the file: {error.strerror}")
        if isinstance(parsed, Job):
            valid.append(parsed)
        else:
            invalid.append(parsed)
    return JobSet(tuple(valid), tuple(invalid))


def job_text(fields: JobFields, written_by: str) -> str:
    """The job file's text, with a first comment naming who wrote it."""
    lines = []
    for key in ("schedule", "every"):
        value = getattr(fields, key)
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")
    lines.append(f"grants = {toml_value(list(fields.grants))}")
    for key in ("max_steps", "max_tokens", "max_runtime_s", "catch_up", "enabled"):
        value = getattr(fields, key)
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")
    lines.append(f"prompt = {toml_value(fields.prompt)}")
    return f"# Written by {written_by}.\n" + "\n".join(lines) + "\n"


def check_job(job_id: str, fields: JobFields, known: Set[str], written_by: str) -> tuple[Job, str]:
    """The job as the scheduler will read it, and its file's text; JobRefused when invalid."""
    if not valid_grant_id(job_id):
        raise JobRefused(
            f"{job_id!r} is not a job id: use a-z, 0-9 and -, at most 64, not starting with -"
        )
    text = job_text(fields, written_by)
    parsed = check_grants(parse_job(job_id, text.encode()), known)
    if isinstance(parsed, InvalidJob):
        raise JobRefused(f"not added: {parsed.problem}")
    return parsed, text


def job_file_mode(folder_mode: int) -> int:
    """A new job file is the owner's alone (0600), unless the jobs folder lets its group in
    (deploy/: `jobs/` is 2750 with the services' group, which reads): then the file is open
    as the folder is (its group reading, and writing where the folder says so). Never more
    than the folder, whatever the umask."""
    mode = FILE_MODE
    if folder_mode & stat.S_IRGRP:
        mode |= stat.S_IRGRP | (folder_mode & stat.S_IWGRP)
    if folder_mode & stat.S_IROTH:
        mode |= stat.S_IROTH
    return mode


def add_job(folder: Path, job_id: str, fields: JobFields, known: Set[str], written_by: str) -> Job:
    """Write `{folder}/{job_id}.toml`, durably, never over an existing job."""
    job, text = check_job(job_id, fields, known, written_by)
    target = folder / f"{job_id}.toml"
    try:
        if not folder.exists():
            folder.mkdir(mode=FOLDER_MODE, parents=True)
        mode = job_file_mode(os.stat(folder).st_mode)
        create_atomically(target, text.encode(), mode=mode)
    except FileExistsError:
        raise JobRefused(f"a job {job_id!r} exists already ({target}); remove it first") from None
    except OSError as error:
        raise JobRefused(f"cannot write the job in {folder}: {error.strerror}") from None
    return job


def remove_job(folder: Path, job_id: str) -> None:
    """Remove `{folder}/{job_id}.toml`: no run of it starts after this."""
    if not valid_grant_id(job_id):
        raise JobRefused(f"{job_id!r} is not a job id")
    try:
        (folder / f"{job_id}.toml").unlink()
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise JobRefused(f"no job {job_id!r} in {folder}") from None
    except OSError as error:
        raise JobRefused(f"cannot remove the job {job_id!r}: {error.strerror}") from None


def set_enabled(folder: Path, job_id: str, enabled: bool, known: Set[str]) -> Job | InvalidJob:
    """Rewrite `{folder}/{job_id}.toml` with `enabled` set, durably and atomically; every other
    key, comment and line stays as it was. The job as it then reads; JobRefused when there is
    no such job or its file is no TOML table (nothing is written)."""
    path = folder / f"{job_id}.toml"
    read_job(folder, job_id, known)  # JobRefused: no such job, or no job id
    old = _toml_text(path)
    table = tomllib.loads(old)
    wanted = {**table, "enabled": enabled}
    line = f"enabled = {toml_value(enabled)}"
    tries = [old[: m.start()] + line + old[m.end() :] for m in _ENABLED_LINE.finditer(old)]
    tries.append(f"{line}\n{old}")  # top-level whatever follows: before any table header
    new = next((text for text in tries if _table_or_none(text) == wanted), None)
    if new is None:
        raise JobRefused(f"cannot set enabled in {path}: edit the file by hand")
    try:  # the file keeps its mode: who may read and write it is the folder's, not ours
        write_atomically(path, new.encode(), mode=stat.S_IMODE(os.stat(path).st_mode))
    except OSError as error:
        raise JobRefused(f"cannot write the job {job_id!r}: {error.strerror}") from None
    return check_grants(parse_job(job_id, new.encode()), known)


def _toml_text(path: Path) -> str:
    """The job file's text, once it is a TOML table (a valid job or not); else JobRefused."""
    try:
        text = read_job_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise JobRefused(f"cannot rewrite {path}: it cannot be read as UTF-8 text") from None
    if _table_or_none(text) is None:
        raise JobRefused(f"cannot rewrite {path}: it is not TOML; fix it by hand")
    return text


def _table_or_none(text: str) -> dict[str, object] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def read_job(folder: Path, job_id: str, known: Set[str] | None) -> Job | InvalidJob:
    """One job by its id; JobRefused when there is no such file."""
    if not valid_grant_id(job_id):
        raise JobRefused(f"{job_id!r} is not a job id")
    try:
        data = read_job_bytes(folder / f"{job_id}.toml")
    except FileNotFoundError:
        raise JobRefused(f"no job {job_id!r} in {folder}") from None
    except OSError as error:
        return InvalidJob(job_id, _NOTHING, f"cannot read the file: {error.strerror}")
    return check_grants(parse_job(job_id, data), known)


def read_job_bytes(path: Path) -> bytes:
    """A job file's bytes, at most one more than a job may hold; never blocks on a FIFO."""
    return owner_toml.read(path, MAX_JOB_BYTES)
