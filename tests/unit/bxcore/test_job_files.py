"""The jobs folder (SPEC §19): read with its invalid jobs flagged, written whole and never over
an existing job, parsed back before it is written, turned on and off with nothing else in its
file changed, removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bxcore.home.atomic import create_atomically
from bxcore.jobs.files import (
    JobFields,
    JobRefused,
    add_job,
    job_file_mode,
    job_text,
    read_job,
    read_jobs,
    remove_job,
    set_enabled,
)
from bxcore.jobs.job import CatchUp, Every, Job, parse_job

TICK = b'every = "10s"\nprompt = "hello"\ngrants = ["memory"]\n'


def test_a_folder_is_read_with_its_invalid_jobs_and_other_files_ignored(tmp_path: Path) -> None:
    (tmp_path / "tick.toml").write_bytes(TICK)
    (tmp_path / "bad.toml").write_bytes(b"every = 1")
    (tmp_path / "tick.toml~").write_bytes(b"junk")
    (tmp_path / ".hidden.toml").write_bytes(b"junk")
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "dir.toml").mkdir()
    jobs = read_jobs(tmp_path, {"memory"})
    assert [job.id for job in jobs.valid] == ["tick"]
    problems = {job.id: job.problem for job in jobs.invalid}
    assert set(problems) == {"bad", "dir", "fifo"}
    assert "not a regular file" in problems["fifo"]
    assert [job.id for job in jobs.everything()] == ["bad", "dir", "fifo", "tick"]


def test_a_job_whose_grant_is_gone_is_read_as_invalid(tmp_path: Path) -> None:
    (tmp_path / "tick.toml").write_bytes(TICK)
    assert read_jobs(tmp_path, set()).invalid[0].problem.startswith("grants: no valid grant")
    assert not isinstance(read_job(tmp_path, "tick", set()), Job)
    assert isinstance(read_job(tmp_path, "tick", {"memory"}), Job)


def test_a_missing_folder_is_no_jobs(tmp_path: Path) -> None:
    assert read_jobs(tmp_path / "nowhere", set()).everything() == []


@pytest.mark.parametrize("job_id", ["nope", "Bad", "../x"])
def test_reading_a_job_that_is_not_there_is_refused(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(JobRefused):
        read_job(tmp_path, job_id, set())


@pytest.mark.parametrize(
    "fields",
    [
        JobFields("Summarise my mail.", schedule="30 7 * * 1-5", grants=("mail-read", "memory")),
        JobFields('A "quoted"\nmulti-line prompt\\', every="1h", catch_up="skip", enabled=False),
        JobFields("p", every="10s", max_steps=3, max_tokens=1000, max_runtime_s=60),
    ],
)
def test_written_text_parses_back_to_the_fields(fields: JobFields) -> None:
    job = parse_job("j", job_text(fields, "a test").encode())
    assert isinstance(job, Job), job
    assert job.prompt == fields.prompt
    assert job.grants == fields.grants
    assert job.enabled is (fields.enabled is not False)
    assert job.max_steps == (fields.max_steps or 24)


def test_add_writes_a_new_job_the_owners_alone_and_never_over_another(tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    fields = JobFields("hello", every="10s", catch_up="skip")
    job = add_job(folder, "tick", fields, set(), "a test")
    assert job.timing == Every(10, "10s")
    assert job.catch_up is CatchUp.SKIP
    assert (folder / "tick.toml").stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    before = (folder / "tick.toml").read_bytes()
    with pytest.raises(JobRefused, match="exists already"):
        add_job(folder, "tick", JobFields("other", every="1h"), set(), "a test")
    assert (folder / "tick.toml").read_bytes() == before
    assert sorted(os.listdir(folder)) == ["tick.toml"]  # no temporary file left


@pytest.mark.parametrize(
    ("folder_mode", "file_mode"),
    [
        (0o700, 0o600),  # bxctl init's: the owner's alone
        (0o2750, 0o640),
        (0o2775, 0o664),  # deploy/: the owner's side writes, the services read
        (0o2770, 0o660),
    ],
)
def test_a_new_job_file_is_as_open_as_its_folder_and_enabled_keeps_its_mode(
    tmp_path: Path, folder_mode: int, file_mode: int
) -> None:
    assert job_file_mode(folder_mode) == file_mode
    folder = tmp_path / "jobs"
    folder.mkdir()
    os.chmod(folder, folder_mode)
    add_job(folder, "tick", JobFields("hello", every="10s"), set(), "a test")
    assert (folder / "tick.toml").stat().st_mode & 0o7777 == file_mode
    set_enabled(folder, "tick", False, set())
    assert (folder / "tick.toml").stat().st_mode & 0o7777 == file_mode


@pytest.mark.parametrize(
    ("job_id", "fields", "known", "why"),
    [
        ("Tick", JobFields("p", every="1h"), set(), "is not a job id"),
        ("tick", JobFields("p"), set(), "not added: missing schedule or every"),
        ("tick", JobFields("p", every="1w"), set(), "not added: every: '1w'"),
        ("tick", JobFields("p", every="1h", grants=("mail",)), set(), "no valid grant 'mail'"),
        ("tick", JobFields("p", every="1h", max_steps=0), set(), "max_steps: expected 1 to"),
        ("tick", JobFields("p", every="1h", catch_up="all"), set(), "catch_up"),
    ],
)
def test_add_refuses_an_invalid_job_with_the_parsers_reason(
    tmp_path: Path, job_id: str, fields: JobFields, known: set[str], why: str
) -> None:
    with pytest.raises(JobRefused, match=why.replace("(", r"\(")):
        add_job(tmp_path, job_id, fields, known, "a test")
    assert os.listdir(tmp_path) == []


def test_enabled_is_set_in_place_and_nothing_else_in_the_file_changes(tmp_path: Path) -> None:
    text = (
        '# mine\nevery = "10s"  # often\nenabled = true # for now\nprompt = """\nenabled = 1\n"""\n'
    )
    (tmp_path / "tick.toml").write_text(text)
    (tmp_path / "tick.toml").chmod(0o600)
    job = set_enabled(tmp_path, "tick", False, set())
    assert isinstance(job, Job) and not job.enabled
    assert (tmp_path / "tick.toml").read_text() == text.replace(
        "enabled = true # for now", "enabled = false"
    )
    assert (tmp_path / "tick.toml").stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["tick.toml"]
    again = set_enabled(tmp_path, "tick", True, set())
    assert isinstance(again, Job) and again.enabled and again.prompt == "enabled = 1\n"


def test_enabled_is_added_when_the_file_has_none_and_an_invalid_job_keeps_its_problem(
    tmp_path: Path,
) -> None:
    (tmp_path / "tick.toml").write_bytes(TICK)
    job = set_enabled(tmp_path, "tick", False, set())
    assert not isinstance(job, Job) and "memory" in job.problem
    assert (tmp_path / "tick.toml").read_bytes() == b"enabled = false\n" + TICK
    assert parse_job("tick", (tmp_path / "tick.toml").read_bytes()).enabled is False  # type: ignore[union-attr]


@pytest.mark.parametrize("content", [b"every = ", b"\xff\xfe"])
def test_enabled_is_never_written_into_a_file_that_is_no_toml(
    tmp_path: Path, content: bytes
) -> None:
    (tmp_path / "bad.toml").write_bytes(content)
    with pytest.raises(JobRefused, match="cannot rewrite"):
        set_enabled(tmp_path, "bad", True, set())
    assert (tmp_path / "bad.toml").read_bytes() == content
    with pytest.raises(JobRefused, match="no job 'gone'"):
        set_enabled(tmp_path, "gone", True, set())


def test_remove_removes_a_job_and_refuses_one_that_is_not_there(tmp_path: Path) -> None:
    (tmp_path / "tick.toml").write_bytes(TICK)
    remove_job(tmp_path, "tick")
    assert not (tmp_path / "tick.toml").exists()
    with pytest.raises(JobRefused, match="no job 'tick'"):
        remove_job(tmp_path, "tick")
    with pytest.raises(JobRefused, match="is not a job id"):
        remove_job(tmp_path, "../grants/memory")


def test_create_atomically_never_replaces_and_ignores_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "f"
    saved = os.umask(0)
    try:
        create_atomically(target, b"one", mode=0o600)
    finally:
        os.umask(saved)
    assert target.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        create_atomically(target, b"two")
    assert target.read_bytes() == b"one"
    assert os.listdir(tmp_path) == ["f"]
