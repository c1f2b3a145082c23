"""`shell` waits for the command's end and its output without a nap (issue 15): one poll on the
output and the shell's pidfd, or, where there is no pidfd, a pipe that a blocking wait closes.

Run in this process (not as the toolkit), so that `time.sleep` can be forbidden; no orphan
reaping here, which would take this process's other children too."""

from __future__ import annotations

import errno
import os
import time

import pytest

from services.toolkit import shell
from services.toolkit.outcome import Outcome


@pytest.fixture(params=["pidfd", "thread"])
def no_naps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """`time.sleep` fails the test; `thread`: the kernel has no pidfd_open."""

    def nap(seconds: float) -> None:
        raise AssertionError(f"shell slept {seconds} s")

    monkeypatch.setattr(time, "sleep", nap)
    if request.param == "thread":

        def no_pidfd(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    return str(request.param)


def test_a_shell_that_closes_its_output_then_runs_on_is_waited_for(no_naps, tmp_path) -> None:
    ran = shell.run_shell("echo early; exec >&- 2>&-; sleep 0.2; exit 4", str(tmp_path), 10)
    assert ran == Outcome.done("early\n[exit status 4]")


def test_a_shell_whose_output_ends_with_it_is_answered_at_once(no_naps, tmp_path) -> None:
    (tmp_path / "note.md").write_text("a short note\n")
    started = time.monotonic()
    for _ in range(20):
        ran = shell.run_shell("cat note.md", str(tmp_path), 10)
        assert ran == Outcome.done("a short note\n[exit status 0]")
    # Twenty naps of the old 50 ms would take a second on their own.
    assert time.monotonic() - started < 1.0


def test_a_quiet_shell_that_outlives_its_deadline_times_out(no_naps, tmp_path) -> None:
    started = time.monotonic()
    ran = shell.run_shell("exec >&- 2>&-; sleep 30", str(tmp_path), 0.3)
    assert ran == Outcome.tool_error("shell: timed out after 0.3 s")
    assert time.monotonic() - started < 5
