"""`bxctl job list | show ID | add | rm ID` (SPEC §13, §19): the owner's scheduled jobs, read
and written offline in `{home}/jobs/`; `run ID` and `history ID` are `bxctl.job_run_cmds`'s.

A job's grants are checked against the grants folder as brokerd reads it, and its next runs
are computed from the wall clock in the machine's time zone (`$TZ`, else /etc/localtime).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any

import typer

from bxcore.clock import local_zone
from bxcore.home.layout import Home
from bxcore.jobs import files as job_files
from bxcore.jobs.files import JobFields, JobRefused
from bxcore.jobs.job import Cron, InvalidJob, Job
from bxcore.jobs.view import job_json, upcoming
from bxctl import job_run_cmds
from bxctl.init import make_folder
from bxctl.output import fail, print_json, say, table
from services.brokerd.face import read_folder

app = typer.Typer(help="Scheduled jobs: turns the box starts by itself.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
SHOWN_RUNS = 5


def _home(ctx: typer.Context) -> Home:
    home: Home = ctx.obj.home
    return home


def _known_grants(home: Home) -> set[str]:
    """The ids of the owner's valid grants: a job naming any other is invalid."""
    return {grant.id for grant in read_folder(home.grants).valid}


def _when(job: Job) -> str:
    return f"cron {job.timing}" if isinstance(job.timing, Cron) else str(job.timing)


def _local(moment: datetime, zone: tzinfo) -> str:
    """`Mon 2026-05-04 07:30:00 CEST`: the owner's own clock."""
    return moment.astimezone(zone).strftime("%a %Y-%m-%d %H:%M:%S %Z")


def _budget(job: Job) -> str:
    return f"{job.max_steps} steps, {job.max_tokens} tokens, {job.max_runtime_s} s"


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every job with its next run, the invalid ones flagged with why."""
    home = _home(ctx)
    jobs = job_files.read_jobs(home.jobs, _known_grants(home)).everything()
    zone, now = local_zone(os.environ), datetime.now(UTC)
    if as_json:
        print_json([job_json(job, zone, now, 1) for job in jobs])
        return
    if not jobs:
        say(f"no jobs in {home.jobs}; add one with `bxctl job add`")
        return
    rows: list[list[Any]] = []
    styles: dict[int, str] = {}
    for index, job in enumerate(jobs):
        if isinstance(job, InvalidJob):
            rows.append([job.id, "INVALID", "", "", "", job.problem])
            styles[index] = "red"
            continue
        runs = upcoming(job, zone, now, 1)
        following = _local(runs[0], zone) if runs else "never"
        next_text = following if job.enabled else "disabled"
        grants = ", ".join(job.grants) or "(none)"
        rows.append([job.id, _when(job), next_text, grants, job.catch_up, _budget(job)])
    table(["ID", "WHEN", "NEXT RUN", "GRANTS", "CATCH-UP", "BUDGET PER RUN"], rows, styles=styles)


@app.command()
def show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonOption = False,
) -> None:
    """One job whole: its prompt, grants, budgets and next runs. Exit 1 when it is invalid."""
    home = _home(ctx)
    try:
        job = job_files.read_job(home.jobs, job_id, _known_grants(home))
    except JobRefused as error:
        fail(str(error))
    zone, now = local_zone(os.environ), datetime.now(UTC)
    if as_json:
        print_json(job_json(job, zone, now, SHOWN_RUNS))
    elif isinstance(job, InvalidJob):
        say(f"invalid: {job.id}: {job.problem}", style="red")
    else:
        say(f"job {job.id}: {_when(job)}, {'enabled' if job.enabled else 'disabled'}")
        say(f"grants: {', '.join(job.grants) or '(none: the job may call no tool)'}")
        say(f"budget per run: {_budget(job)}")
        say(f"catch up: {job.catch_up}")
        for run in upcoming(job, zone, now, SHOWN_RUNS):
            say(f"next run: {_local(run, zone)}")
        say("prompt:")
        for line in job.prompt.splitlines():
            say(f"  {line}")
    if isinstance(job, InvalidJob):
        raise typer.Exit(1)


@app.command()
def add(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="a-z 0-9 -, like morning-mail")],
    prompt: Annotated[str, typer.Option(help="What the job asks, as you would in a chat.")],
    schedule: Annotated[
        str | None,
        typer.Option(help='Five cron fields in local time, like "30 7 * * 1-5".'),
    ] = None,
    every: Annotated[
        str | None, typer.Option(help="An interval instead: a whole number and s, m, h or d.")
    ] = None,
    grant: Annotated[
        list[str] | None,
        typer.Option(help="A grant id the job's runs may use; repeat it. None: no tool."),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Model calls per run (24).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per run (50000).")] = None,
    max_runtime_s: Annotated[
        int | None, typer.Option(help="Seconds per run, approvals included (1800).")
    ] = None,
    catch_up: Annotated[
        str | None, typer.Option(help="once (default) or skip: runs missed while down.")
    ] = None,
    disabled: Annotated[bool, typer.Option("--disabled", help="Write it disabled.")] = False,
) -> None:
    """Write a new job file, or refuse with why."""
    home = _home(ctx)
    fields = JobFields(
        prompt,
        schedule,
        every,
        tuple(grant or ()),
        max_steps,
        max_tokens,
        max_runtime_s,
        catch_up,
        False if disabled else None,
    )
    try:
        make_folder(home.root)
        make_folder(home.jobs)
        job = job_files.add_job(home.jobs, job_id, fields, _known_grants(home), "`bxctl job add`")
    except JobRefused as error:
        fail(str(error))
    runs = upcoming(job, local_zone(os.environ), datetime.now(UTC), 1)
    first = f"; next run {_local(runs[0], local_zone(os.environ))}" if runs else ""
    say(f"added {job_id}: {_when(job)}{first}")


@app.command()
def rm(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Remove a job: no run of it starts after this."""
    try:
        job_files.remove_job(_home(ctx).jobs, job_id)
    except JobRefused as error:
        fail(f"{error}; see `bxctl job list`" if "no job" in str(error) else str(error))
    say(f"removed {job_id}")


def _set_enabled(ctx: typer.Context, job_id: str, enabled: bool) -> None:
    home = _home(ctx)
    try:
        job_files.set_enabled(home.jobs, job_id, enabled, _known_grants(home))
    except JobRefused as error:
        fail(f"{error}; see `bxctl job list`" if "no job" in str(error) else str(error))
    say(f"{'enabled' if enabled else 'disabled'} {job_id}")


@app.command()
def enable(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Let a job run on its schedule again (its `enabled` line; nothing else changes)."""
    _set_enabled(ctx, job_id, True)


@app.command()
def disable(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Stop a job's scheduled runs, keeping its file (`bxctl job run` still starts one)."""
    _set_enabled(ctx, job_id, False)


app.command("run")(job_run_cmds.run)
app.command("history")(job_run_cmds.history)
