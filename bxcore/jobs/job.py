"""Job files (SPEC §19): one TOML file a job in `{home}/jobs/`, parsed strictly, like grants.

`parse_job` is pure: a file's id and bytes in, a `Job` or an `InvalidJob` (with why, in one
line) out; it never raises. `check_grants` is the second, separate check: a job naming a grant
the folder does not hold is invalid. Reading the folder is the shell's (`bxcore.jobs.files`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Set
from datetime import datetime
from typing import Any

from cronsim import CronSim, CronSimError

from bxcore.frozen import frozen
from bxcore.ids import valid_grant_id
from bxcore.owner_toml import TableError, load_table

MAX_JOB_BYTES = 64 * 1024
MAX_PROMPT = 16_000  # characters
MAX_GRANTS = 64
#: The longest `every`: a year (366 days).
MAX_EVERY_S = 366 * 86_400

KEYS = (
    "schedule",
    "every",
    "prompt",
    "grants",
    "max_steps",
    "max_tokens",
    "max_runtime_s",
    "catch_up",
    "enabled",
)

#: Per-run budgets: (default, most). The defaults are written in docs/jobs.md.
BUDGETS: dict[str, tuple[int, int]] = {
    "max_steps": (24, 1000),  # as [loop] max_steps (§10.1)
    "max_tokens": (50_000, 10_000_000),  # prompt and answer tokens of every model call
    "max_runtime_s": (1800, 7 * 86_400),  # longer than an approval's default life (600 s)
}

_EVERY = re.compile(r"([1-9][0-9]{0,8})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_CRON_TEXT = re.compile(r"[\x21-\x7e]+( +[\x21-\x7e]+){4}")  # five fields of printable ASCII
#: Any fixed instant: cronsim checks an expression's fields when it is built from one.
_ANY_INSTANT = datetime(2000, 1, 1)


class CatchUp(enum.StrEnum):
    """What runs missed while the box was down do (§19)."""

    SKIP = "skip"  # nothing: the next run is the next one on the schedule
    ONCE = "once"  # one run, at once, for any number missed


@frozen
class Cron:
    """`schedule`: five cron fields, read in the owner's time zone (see `bxcore.jobs.schedule`)."""

    expression: str

    def __str__(self) -> str:
        return self.expression


@frozen
class Every:
    """`every`: a fixed interval, in seconds, as written (`text`)."""

    seconds: int
    text: str

    def __str__(self) -> str:
        return f"every {self.text}"


Timing = Cron | Every


@frozen
class Job:
    id: str
    timing: Timing
    prompt: str
    grants: tuple[str, ...]
    max_steps: int
    max_tokens: int
    max_runtime_s: int
    catch_up: CatchUp
    enabled: bool
    sha256: str

    def __repr__(self) -> str:
        state = "enabled" if self.enabled else "disabled"
        return f"Job({self.id}: {self.timing}, {len(self.grants)} grants, {state})"


@frozen
class InvalidJob:
    id: str
    sha256: str
    problem: str


def parse_job(job_id: str, data: bytes) -> Job | InvalidJob:
    """One job file's bytes, strictly: anything wrong makes the whole job invalid."""
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        return _parse(job_id, data, sha256)
    except _Invalid as problem:
        return InvalidJob(job_id, sha256, str(problem))


def check_grants(job: Job | InvalidJob, known: Set[str] | None) -> Job | InvalidJob:
    """The job, or invalid when it names a grant id not in `known` (the ids of the owner's
    valid grants): a job never runs with fewer grants than its owner wrote without saying so.
    `known` None: the grants cannot be seen from here (loopd under deploy/, where only brokerd
    reads them): brokerd gives a run of a job naming a grant that is gone no grant at all."""
    if isinstance(job, InvalidJob) or known is None:
        return job
    missing = [grant for grant in job.grants if grant not in known]
    if not missing:
        return job
    names = ", ".join(repr(grant) for grant in missing)
    return InvalidJob(
        job.id, job.sha256, f"grants: no valid grant {names} (see `bxctl grant list`)"
    )


class _Invalid(Exception):
    pass


def _parse(job_id: str, data: bytes, sha256: str) -> Job:
    if not valid_grant_id(job_id):
        raise _Invalid(
            f"the file name {job_id!r} is not a job id (a-z 0-9 -, at most 64, not starting with -)"
        )
    try:
        table = load_table(data, MAX_JOB_BYTES, KEYS)
    except TableError as error:
        raise _Invalid(str(error)) from None
    timing = _timing(table)
    prompt = table.get("prompt")
    if prompt is None:
        raise _Invalid("prompt: missing; a job says what to do, as the owner would in a chat")
    if type(prompt) is not str:
        raise _Invalid(f"prompt: expected a string, got {_shown(prompt)}")
    if not prompt.strip():
        raise _Invalid("prompt: empty")
    if len(prompt) > MAX_PROMPT:
        raise _Invalid(f"prompt: longer than {MAX_PROMPT} characters")
    budgets = {key: _count(table, key, *limits) for key, limits in BUDGETS.items()}
    catch_up = table.get("catch_up", CatchUp.ONCE.value)
    if type(catch_up) is not str or catch_up not in CatchUp.__members__.values():
        raise _Invalid(f'catch_up: expected "skip" or "once", got {_shown(catch_up)}')
    enabled = table.get("enabled", True)
    if type(enabled) is not bool:
        raise _Invalid(f"enabled: expected true or false, got {_shown(enabled)}")
    return Job(
        job_id,
        timing,
        prompt,
        _grants(table.get("grants", [])),
        budgets["max_steps"],
        budgets["max_tokens"],
        budgets["max_runtime_s"],
        CatchUp(catch_up),
        enabled,
        sha256,
    )


def _timing(table: dict[str, Any]) -> Timing:
    """`schedule` or `every`: exactly one of the two."""
    schedule, every = table.get("schedule"), table.get("every")
    if schedule is None and every is None:
        raise _Invalid('missing schedule or every (like schedule = "30 7 * * 1-5" or every = "1h")')
    if schedule is not None and every is not None:
        raise _Invalid("schedule and every: give one of the two, not both")
    if every is not None:
        if type(every) is not str:
            raise _Invalid(f'every: expected a string like "30m", got {_shown(every)}')
        found = _EVERY.fullmatch(every)
        if found is None:
            raise _Invalid(f"every: {_shown(every)} is not a whole number and s, m, h or d")
        seconds = int(found[1]) * _UNIT_S[found[2]]
        if seconds > MAX_EVERY_S:
            raise _Invalid(f"every: {every!r} is longer than 366d")
        return Every(seconds, every)
    if type(schedule) is not str:
        raise _Invalid(f'schedule: expected a string like "30 7 * * 1-5", got {_shown(schedule)}')
    expression = " ".join(schedule.split())
    if _CRON_TEXT.fullmatch(expression) is None:
        raise _Invalid(
            f"schedule: {_shown(schedule)} is not five cron fields "
            "(minute hour day-of-month month day-of-week)"
        )
    try:
        CronSim(expression, _ANY_INSTANT)
    except CronSimError as error:
        raise _Invalid(f"schedule: {expression!r}: {str(error).lower()}") from None
    return Cron(expression)


def _grants(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(
            f'grants: expected a list of grant ids like ["mail-read"], got {_shown(value)}'
        )
    if len(value) > MAX_GRANTS:
        raise _Invalid(f"grants: more than {MAX_GRANTS}")
    seen: list[str] = []
    for grant in value:
        if type(grant) is not str or not valid_grant_id(grant):
            raise _Invalid(f"grants: {_shown(grant)} is not a grant id")
        if grant in seen:
            raise _Invalid(f"grants: {grant!r} is named twice")
        seen.append(grant)
    return tuple(seen)


def _count(table: dict[str, Any], key: str, default: int, most: int) -> int:
    value = table.get(key, default)
    if type(value) is not int:
        raise _Invalid(f"{key}: expected a whole number, got {_shown(value)}")
    if not 1 <= value <= most:
        raise _Invalid(f"{key}: expected 1 to {most}, got {value}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
