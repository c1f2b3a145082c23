"""The owner's one line when a service does not answer (issue 10): what the supervisor says
of it, or the old question when no supervisor runs (pure); and `ask`'s line when the
supervisor itself does not answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bxcore.wire.asking import Patience
from bxcore.wire.messages import ServiceInfo, ServiceState, SupervisorStatus
from bxctl.supervisor.link import NoAnswer, ask, down, explain

S = ServiceState
TROUBLE = "did not answer at ipc:///h/run/admin.sock"


def info(state: ServiceState, last_exit: str | None = "exit 1") -> ServiceInfo:
    pid = 4100 if state in (S.RUNNING, S.STARTING, S.STOPPING) else None
    return ServiceInfo("brokerd", state, 2, "2026-12-01T00:00:00.000Z", pid, last_exit)


@pytest.mark.parametrize(
    ("state", "line"),
    [
        (S.FAILED, "brokerd is not running (failed: exit 1); see `bxctl logs brokerd`, then "
                   "`bxctl restart brokerd`"),
        (S.STOPPED, "brokerd is not running (stopped); `bxctl restart brokerd` starts it"),
        (S.BACKOFF, "brokerd is not running (it exited: exit 1; restarting soon); "
                    "see `bxctl logs brokerd`"),
        (S.STARTING, "brokerd is starting; try again in a moment (see `bxctl logs brokerd`)"),
        (S.STOPPING, "brokerd is stopping; try again in a moment (see `bxctl logs brokerd`)"),
        (S.RUNNING, f"brokerd {TROUBLE}, though the supervisor says it runs (pid 4100); "
                    "see `bxctl logs brokerd`"),
    ],
)  # fmt: skip
def test_the_line_names_the_service_and_what_the_supervisor_says_of_it(
    state: ServiceState, line: str
) -> None:
    assert explain("brokerd", TROUBLE, info(state)) == line
    assert down(info(state)) is (state in (S.FAILED, S.STOPPED, S.STOPPING))


def test_without_a_supervisor_the_line_asks_whether_boxmaker_runs() -> None:
    assert explain("brokerd", TROUBLE, None) == (
        f"brokerd {TROUBLE}; is boxmaker running? try `bxctl up`"
    )
    assert not down(None)


def test_a_failed_service_with_no_exit_recorded_says_only_failed() -> None:
    line = explain("gatewayd", TROUBLE, info(S.FAILED, None))
    assert line.startswith("gatewayd is not running (failed); ")


def test_a_supervisor_that_does_not_answer_is_one_line_naming_its_endpoint(short_tmp: Path) -> None:
    endpoint = f"ipc://{short_tmp}/supervisor.sock"
    line = f"the supervisor did not answer at {endpoint} in 0.1 s"
    with pytest.raises(NoAnswer, match=f"^{re.escape(line)}$"):
        ask(endpoint, SupervisorStatus("s1"), Patience(1, 0.1, "a test"))
