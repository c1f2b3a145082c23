"""One question to the running supervisor, on its socket (named by `{run}/supervisor.pid`):
`ask` and `status_report` for the box commands, and `whereabouts` for the owner's error lines,
so that "brokerd did not answer" can say *why*: failed, stopped, restarting (issue 10).
`explain` is pure.
"""

from __future__ import annotations

import secrets
from typing import TypeVar

from bxcore.client import AskFailed, SyncClient, Unreachable
from bxcore.home.layout import Home
from bxcore.wire.asking import Patience, patience
from bxcore.wire.messages import (
    Asks,
    Error,
    ServiceInfo,
    ServiceState,
    SupervisorReport,
    SupervisorStatus,
)
from bxctl.output import fail
from bxctl.supervisor import pidfile

NOT_COMING_BACK = (ServiceState.FAILED, ServiceState.STOPPED, ServiceState.STOPPING)
A = TypeVar("A")
WHEREABOUTS = Patience(1, 1.0, "an error line waits no longer than this for the supervisor's word")


class NoAnswer(Exception):
    """The supervisor did not answer (or answered something unreadable); the text says so."""


def request_id() -> str:
    return f"bxctl-{secrets.token_hex(6)}"


def ask(endpoint: str, message: Asks[A], given: Patience | None = None) -> A | Error:
    """One request to the supervisor; its answer, or NoAnswer."""
    each = given or patience("supervisor", message)
    with SyncClient(endpoint, socket="supervisor") as client:
        try:
            return client.ask(message, patience=each)
        except Unreachable:
            silent = f"the supervisor did not answer at {endpoint} in {each.timeout_s:g} s"
            raise NoAnswer(silent) from None
        except AskFailed as error:
            raise NoAnswer(str(error)) from None


def running(home: Home) -> pidfile.BoxRecord | None:
    """The record of the supervisor that runs `home`'s box; None when none runs."""
    return pidfile.running(home.pidfile("supervisor"))


def status_report(record: pidfile.BoxRecord) -> SupervisorReport:
    """The running supervisor's report; a box command fails with one line without it."""
    try:
        report = ask(record.endpoint, SupervisorStatus(request_id()))
    except NoAnswer as error:
        fail(f"{error} (its pid is {record.supervisor.pid})")
    if isinstance(report, Error):
        fail(f"the supervisor: {report.message}")
    return report


def whereabouts(home: Home, service: str) -> ServiceInfo | None:
    """What the running supervisor says of `service`; None when no supervisor runs, it does
    not answer, or it does not supervise `service` (a box run by systemd, say)."""
    record = running(home)
    if record is None:
        return None
    try:
        report = ask(record.endpoint, SupervisorStatus(request_id()), WHEREABOUTS)
    except NoAnswer:
        return None
    if isinstance(report, Error):
        return None
    return next((info for info in report.services if info.name == service), None)


def explain(service: str, trouble: str, info: ServiceInfo | None) -> str:
    """The owner's one line when `service` did not answer (`trouble`: what went wrong, e.g.
    "did not answer at ipc://…"), with what the supervisor says of it (`info`). Pure."""
    if info is None:
        return f"{service} {trouble}; is boxmaker running? try `bxctl up`"
    logs = f"see `bxctl logs {service}`"
    exited = f": {info.last_exit}" if info.last_exit else ""
    state = info.state
    if state is ServiceState.FAILED:
        return f"{service} is not running (failed{exited}); {logs}, then `bxctl restart {service}`"
    if state is ServiceState.STOPPED:
        return f"{service} is not running (stopped); `bxctl restart {service}` starts it"
    if state is ServiceState.BACKOFF:
        return f"{service} is not running (it exited{exited}; restarting soon); {logs}"
    if state in (ServiceState.STARTING, ServiceState.STOPPING):
        return f"{service} is {state.value}; try again in a moment ({logs})"
    pid = f" (pid {info.pid})" if info.pid is not None else ""
    return f"{service} {trouble}, though the supervisor says it runs{pid}; {logs}"


def down(info: ServiceInfo | None) -> bool:
    """True when the supervisor says the service will not run unless the owner acts (failed,
    stopped or being stopped): no use waiting for it. One that is restarting (backoff,
    starting) is worth the rest of the wait: a command sent across a crash goes through."""
    return info is not None and info.state in NOT_COMING_BACK
