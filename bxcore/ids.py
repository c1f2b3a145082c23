"""The shapes of names: session ids (§6.1), request ids and call ids (§3.3), grant and job ids
(§5.1, §19).

Pure: no I/O. Every check is by bytes of UTF-8, as the wire counts them.
"""

from __future__ import annotations

import re

_SESSION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_FILE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")

MAX_REQUEST_ID = 64
MAX_CALL_ID = 128
MAX_TOOL_NAME = 64


def valid_session(session: str) -> bool:
    """1 to 128 bytes of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-`."""
    return _SESSION.fullmatch(session) is not None


def valid_grant_id(name: str) -> bool:
    """A grant's or a job's id, its file's stem (§5.1, §19): 1 to 64 of `a-z 0-9 -`, not
    starting with `-`."""
    return _FILE_ID.fullmatch(name) is not None


def byte_length_between(text: str, low: int, high: int) -> bool:
    """True when `text` is `low` to `high` bytes of UTF-8 (a lone surrogate is never valid)."""
    if len(text) > high:  # each character is at least one byte
        return False
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return low <= size <= high


SUB_AGENT_PREFIX = "sub-"


def kept_for_sub_agents(session: str) -> bool:
    """True for an id that only loopd's spawns may give (`sub-…`, §10.5): the owner may not
    name a session so, so no spawn can ever be handed a session that has a history."""
    return session.startswith(SUB_AGENT_PREFIX)


def parent_of_sub(session: str) -> str | None:
    """The parent of a sub-agent's id `sub-<parent>-<n>` (§6.3, §10.5), or None for any
    other id: the right piece must be ASCII digits and the left a valid session id."""
    if not session.startswith("sub-"):
        return None
    parent, dash, n = session[len("sub-") :].rpartition("-")
    if not dash or not n or not (n.isascii() and n.isdigit()):
        return None
    return parent if valid_session(parent) else None


def descends(session: str, ancestor: str) -> bool:
    """True when `session` is `ancestor` or one of its sub-agents, at any depth (§10.5)."""
    while session != ancestor:
        parent = parent_of_sub(session)
        if parent is None:
            return False
        session = parent
    return True


JOB_RUN_PREFIX = "job-"


def job_run_session(job_id: str, n: int) -> str:
    """The session of a job's run `n` (§19): `job-<id>-<n>`."""
    return f"{JOB_RUN_PREFIX}{job_id}-{n}"


def job_run_of(session: str) -> tuple[str, int] | None:
    """The job and run number a session belongs to (§19): `job-<id>-<n>`, or any sub-agent of
    one (`sub-job-<id>-<n>-<k>`, §10.5); None for every other id. `<id>` must be a job id and
    `<n>` ASCII digits without a leading zero."""
    while (parent := parent_of_sub(session)) is not None:
        session = parent
    if not session.startswith(JOB_RUN_PREFIX):
        return None
    job_id, dash, n = session[len(JOB_RUN_PREFIX) :].rpartition("-")
    if not dash or not n.isascii() or not n.isdigit() or n.startswith("0"):
        return None
    return (job_id, int(n)) if valid_grant_id(job_id) else None
