"""Job files (SPEC §19): `parse_job` reads a job strictly, its defaults as docs/jobs.md says,
and anything wrong is an `InvalidJob` whose one-line problem says why; it never raises.
`check_grants` makes a job naming a grant the owner does not hold invalid."""

from __future__ import annotations

import hashlib
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.jobs.job import (
    BUDGETS,
    KEYS,
    CatchUp,
    Cron,
    Every,
    InvalidJob,
    Job,
    check_grants,
    parse_job,
)

MAIL = b"""
schedule = "30 7 * * 1-5"
prompt = "Summarise my new mail in five lines."
grants = ["mail-read", "memory"]
max_tokens = 20000
catch_up = "skip"
"""


def test_a_job_is_read_with_its_fields() -> None:
    job = parse_job("morning-mail", MAIL)
    assert isinstance(job, Job)
    assert job.timing == Cron("30 7 * * 1-5")
    assert job.prompt == "Summarise my new mail in five lines."
    assert job.grants == ("mail-read", "memory")
    assert job.max_tokens == 20000
    assert job.catch_up is CatchUp.SKIP
    assert job.sha256 == hashlib.sha256(MAIL).hexdigest()
    assert repr(job) == "Job(morning-mail: 30 7 * * 1-5, 2 grants, enabled)"


def test_the_defaults_are_the_documented_ones() -> None:
    job = parse_job("tick", b'every = "10s"\nprompt = "hello"')
    assert isinstance(job, Job)
    assert job.timing == Every(10, "10s")
    assert job.grants == ()  # least privilege: no grant unless named
    assert (job.max_steps, job.max_tokens, job.max_runtime_s) == (24, 50_000, 1800)
    assert job.catch_up is CatchUp.ONCE
    assert job.enabled is True


@pytest.mark.parametrize(
    ("every", "seconds"),
    [("1s", 1), ("10s", 10), ("30m", 1800), ("2h", 7200), ("1d", 86_400), ("366d", 31_622_400)],
)
def test_every_is_a_whole_number_and_a_unit(every: str, seconds: int) -> None:
    job = parse_job("j", f'every = "{every}"\nprompt = "p"'.encode())
    assert isinstance(job, Job)
    assert job.timing == Every(seconds, every)


def test_a_schedule_is_kept_with_its_spaces_made_single() -> None:
    job = parse_job("j", b'schedule = " 0  9\\t* * mon "\nprompt = "p"')
    assert isinstance(job, Job)
    assert job.timing == Cron("0 9 * * mon")


@pytest.mark.parametrize(
    ("job_id", "content", "why"),
    [
        ("Bad", MAIL, "is not a job id"),
        ("-x", MAIL, "is not a job id"),
        ("j", b"\xff", "not UTF-8"),
        ("j", b"prompt = ", "not TOML"),
        ("j", MAIL + b"owner = 1", "unknown key 'owner'"),
        ("j", b'prompt = "p"', "missing schedule or every"),
        ("j", b'every = "1h"\nschedule = "* * * * *"\nprompt = "p"', "not both"),
        ("j", b'every = 60\nprompt = "p"', "every: expected a string"),
        ("j", b'every = "1w"\nprompt = "p"', "every: '1w' is not a whole number"),
        ("j", b'every = "0s"\nprompt = "p"', "every: '0s'"),
        ("j", b'every = "05m"\nprompt = "p"', "every: '05m'"),
        ("j", b'every = "1.5h"\nprompt = "p"', "every: '1.5h'"),
        ("j", b'every = " 1h"\nprompt = "p"', "every: ' 1h'"),
        ("j", b'every = "367d"\nprompt = "p"', "longer than 366d"),
        ("j", b'schedule = 5\nprompt = "p"', "schedule: expected a string"),
        ("j", b'schedule = "* * * *"\nprompt = "p"', "is not five cron fields"),
        ("j", b'schedule = "0 * * * * *"\nprompt = "p"', "is not five cron fields"),
        ("j", b'schedule = "@daily"\nprompt = "p"', "is not five cron fields"),
        ("j", b'schedule = "61 * * * *"\nprompt = "p"', "bad minute"),
        ("j", b'schedule = "0 0 30 2 *"\nprompt = "p"', "bad day-of-month"),
        ("j", b'schedule = "0 0 * * 8"\nprompt = "p"', "bad day-of-week"),
        ("j", b'schedule = "\xd9\xa3 * * * *"\nprompt = "p"', "is not five cron fields"),
        ("j", b'every = "1h"', "prompt: missing"),
        ("j", b'every = "1h"\nprompt = 3', "prompt: expected a string"),
        ("j", b'every = "1h"\nprompt = " \\n"', "prompt: empty"),
        ("j", b'every = "1h"\nprompt = "' + b"x" * 16_001 + b'"', "longer than 16000"),
        ("j", b'every = "1h"\nprompt = "p"\ngrants = "mail"', "grants: expected a list"),
        ("j", b'every = "1h"\nprompt = "p"\ngrants = ["Mail"]', "'Mail' is not a grant id"),
        ("j", b'every = "1h"\nprompt = "p"\ngrants = [1]', "1 is not a grant id"),
        ("j", b'every = "1h"\nprompt = "p"\ngrants = ["a", "a"]', "'a' is named twice"),
        ("j", b'every = "1h"\nprompt = "p"\nmax_steps = 0', "max_steps: expected 1 to 1000"),
        ("j", b'every = "1h"\nprompt = "p"\nmax_steps = true', "max_steps: expected a whole"),
        ("j", b'every = "1h"\nprompt = "p"\nmax_tokens = 1.5', "max_tokens: expected a whole"),
        ("j", b'every = "1h"\nprompt = "p"\nmax_runtime_s = -1', "max_runtime_s: expected 1"),
        ("j", b'every = "1h"\nprompt = "p"\ncatch_up = "all"', 'expected "skip" or "once"'),
        ("j", b'every = "1h"\nprompt = "p"\ncatch_up = ["once"]', 'expected "skip" or "once"'),
        ("j", b'every = "1h"\nprompt = "p"\nenabled = "yes"', "enabled: expected true or false"),
        ("j", b"#" + b"x" * (64 * 1024), "larger than 65536 bytes"),
    ],
)
def test_an_invalid_job_says_why_in_one_line(job_id: str, content: bytes, why: str) -> None:
    job = parse_job(job_id, content)
    assert isinstance(job, InvalidJob), job
    assert why in job.problem
    assert "\n" not in job.problem
    assert job.sha256 == hashlib.sha256(content).hexdigest()


def test_a_job_naming_a_grant_the_owner_lacks_is_invalid() -> None:
    job = parse_job("morning-mail", MAIL)
    assert check_grants(job, {"mail-read", "memory", "other"}) is job
    missing = check_grants(job, {"memory"})
    assert isinstance(missing, InvalidJob)
    assert missing.problem == "grants: no valid grant 'mail-read' (see `bxctl grant list`)"
    assert missing.sha256 == job.sha256  # type: ignore[union-attr]


def test_an_invalid_job_stays_invalid_for_the_same_reason() -> None:
    invalid = parse_job("j", b"")
    assert check_grants(invalid, set()) is invalid


# -- properties ------------------------------------------------------------------------------

_WORD = st.text(string.ascii_letters + string.digits + " *-/,#L?@\\\"'\n\t=[]{}.", max_size=20)
_VALUE = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    _WORD,
    st.lists(st.one_of(_WORD, st.integers()), max_size=4),
)


def _toml_line(key: str, value: object) -> str:
    if isinstance(value, bool):
        return f"{key} = {str(value).lower()}"
    if isinstance(value, str):
        return f"{key} = {value!r}" if "'" not in value else f'{key} = "{value}"'
    return f"{key} = {value!r}"


@settings(max_examples=400)
@given(
    st.dictionaries(
        st.one_of(st.sampled_from(KEYS), st.sampled_from(["note", "x", "grant"])),
        _VALUE,
        max_size=len(KEYS) + 2,
    )
)
def test_any_tomlish_job_gives_a_job_or_an_invalid_job(fields: dict[str, object]) -> None:
    """Keys the parser knows, values of any shape, lines that are sometimes not TOML at all."""
    content = "\n".join(_toml_line(key, value) for key, value in fields.items()).encode()
    job = parse_job("j", content)
    assert isinstance(job, Job | InvalidJob)
    if isinstance(job, InvalidJob):
        assert "\n" not in job.problem
    else:
        for key, (_, most) in BUDGETS.items():
            assert 1 <= getattr(job, key) <= most


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_any_schedule_text_gives_a_job_or_an_invalid_job(schedule: str) -> None:
    content = f"schedule = {_quoted(schedule)}\nprompt = 'p'".encode()
    assert isinstance(parse_job("j", content), Job | InvalidJob)


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_job_or_an_invalid_job(content: bytes) -> None:
    assert isinstance(parse_job("j", content), Job | InvalidJob)


def _quoted(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's, for these)."""
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}" for c in text)
    return f'"{escaped}"'


def test_grants_that_cannot_be_seen_are_not_checked() -> None:
    """loopd under deploy/ may not list `grants/`: it leaves the check to brokerd."""
    job = parse_job("mail", b'every = "1h"\nprompt = "p"\ngrants = ["mail-read"]\n')
    assert check_grants(job, None) is job
    assert isinstance(check_grants(job, set()), InvalidJob)
