"""`bxctl job run ID` and `bxctl job history ID` (SPEC §13, §19): a run started now by loopd's
scheduler, followed until it ends if asked; and a job's runs as brokerd's ledger has them
(`job_started`, `job_ended`), paired by run number.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import datetime
from typing import Annotated

import typer

from bxcore.clock import local_zone, parse_rfc3339
from bxcore.home.layout import Home
from bxcore.jobs.view import runs_of
from bxcore.wire.messages import (
    HistoryQuery,
    JobHistoryQuery,
    JobRun,
    TurnEnd,
)
from bxctl.connect import ask
from bxctl.output import print_json, say, table
from bxctl.session_cmds import event_text

FOLLOW_POLL_S = 0.25  # how often `--follow` asks loopd for the run's new events


def run(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print the run's events until it ends.")
    ] = False,
) -> None:
    """Start a run of the job now, whatever its schedule; its session is `job-ID-N`."""
    home: Home = ctx.obj.home
    # a fresh id: loopd answers a repeated id with its first answer (a retry), not a new run
    request = JobRun(f"bxctl-job-run-{secrets.token_hex(8)}", job_id)
    answer = ask(home, "loop", request)
    say(f"started a run of {job_id}: session {answer.session}")
    if follow:
        _follow(home, answer.session)


def _follow(home: Home, session: str) -> None:
    """The run's events as they come, until its turn ends."""
    after = 0
    while True:
        answer = ask(home, "loop", HistoryQuery("bxctl-job-follow", session, after or None))
        for event in answer.events:
            after = event.seq
            say(event_text(event))
            if event.turn == 1 and isinstance(event.event, TurnEnd):
                return
        if not answer.more:
            time.sleep(FOLLOW_POLL_S)


def history(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    n: Annotated[int, typer.Option("-n", help="The last N runs.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """The job's last runs from the ledger: when each started and why, how it ended, its
    figures."""
    home: Home = ctx.obj.home
    answer = ask(home, "admin", JobHistoryQuery("bxctl-job-history", job_id, n))
    runs = runs_of([json.loads(line) for line in answer.records])
    if as_json:
        print_json(runs)
        return
    if not runs:
        say(f"no runs of {job_id} in the ledger")
        return
    zone = local_zone(os.environ)

    def local(at: str | None) -> str:
        if at is None:
            return ""
        moment = datetime.fromtimestamp(parse_rfc3339(at) / 1000, zone)
        return moment.strftime("%Y-%m-%d %H:%M:%S %Z")

    rows = [
        [
            run["run"], local(run["started"]), run["why"], local(run["ended"]),
            run["how"] or "running", "" if run["steps"] is None else run["steps"],
            "" if run["tokens"] is None else run["tokens"],
            "" if run["runtime_ms"] is None else f"{run['runtime_ms'] / 1000:.1f} s",
            run["detail"] or "",
        ]
        for run in runs
    ]  # fmt: skip
    table(["RUN", "STARTED", "WHY", "ENDED", "HOW", "STEPS", "TOKENS", "RUNTIME", "DETAIL"], rows)
