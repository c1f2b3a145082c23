"""The child runner: input fed whole, outputs read within their caps, the exit seen, the whole
group killed at the timeout. Real processes (a shell), no sandbox: that is test_confinement's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import anyio
import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from services.brokerd.sandbox import child
from services.brokerd.sandbox.child import ERROR_CAP, OUTPUT_CAP

pytestmark = pytest.mark.anyio

SH = "/bin/sh"


async def sh(script: str, stdin: bytes = b"", timeout_s: float = 10.0) -> child.Finished:
    return await child.run([SH, "-c", script], stdin, timeout_s=timeout_s)


async def test_input_is_fed_whole_and_both_outputs_are_read() -> None:
    data = os.urandom(3 * 1024 * 1024).hex().encode()[: 3 * 1024 * 1024]  # past a pipe's buffer
    finished = await sh("wc -c; echo note >&2", data)
    assert finished == child.Finished(0, b"%d\n" % len(data), b"note\n", False, finished.ms)


async def test_the_exit_status_is_kept() -> None:
    assert (await sh("exit 3")).exit == 3
    assert (await sh("kill -TERM $$")).exit == -15


async def test_a_process_that_does_not_read_its_input_still_ends() -> None:
    finished = await sh("exit 0", b"x" * (4 * 1024 * 1024))
    assert finished.exit == 0 and not finished.cut


async def test_output_past_the_cap_stops_the_process() -> None:
    finished = await sh("yes")
    assert finished.cut and finished.exit is None and len(finished.stdout) == OUTPUT_CAP


async def test_errors_past_their_cap_are_dropped_without_blocking_the_process() -> None:
    finished = await sh("head -c 1000000 /dev/zero >&2; echo done")
    assert finished.exit == 0 and finished.stdout == b"done\n"
    assert len(finished.stderr) == ERROR_CAP


async def test_at_the_timeout_the_whole_group_is_killed() -> None:
    started = time.monotonic()
    finished = await sh("sleep 100 & sleep 100", timeout_s=0.3)
    assert finished.exit is None and not finished.cut
    assert time.monotonic() - started < 5


async def test_a_program_that_cannot_start_raises_oserror() -> None:
    with pytest.raises(OSError):
        await child.run(["/nonexistent/program"], b"", timeout_s=1.0)


async def test_a_process_that_ended_before_its_input_was_written_is_seen_to_end() -> None:
    """The race of a sandbox that fails at once: the first write meets a broken pipe."""
    process = subprocess.Popen(
        [SH, "-c", "exit 4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.read()  # type: ignore[union-attr]
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    exchange = child._Exchange(process, b"x" * 100_000)
    await exchange.done
    await exchange.close()
    assert process.wait() == 4 and exchange.over and not exchange.cut


async def test_close_cancelled_while_it_waits_still_closes_every_descriptor() -> None:
    """brokerd's router stops its tasks with task.cancel(), which a shielded scope does not
    hold off: a close() cut short while it waits for the end must still let go of the pipes
    and the pidfd (run() then reaps the killed process)."""
    before = set(os.listdir("/proc/self/fd"))
    process = subprocess.Popen(
        [SH, "-c", "exec sleep 100"],  # one process: the kill below ends it all
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    exchange = child._Exchange(process, b"")
    task = asyncio.get_running_loop().create_task(exchange.close())
    await asyncio.sleep(0.05)  # close() now waits for the process to end
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert set(os.listdir("/proc/self/fd")) <= before
    process.kill()
    assert process.wait() == -9


# --- the hold: bwrap says which process the sandbox is, and waits ---------------------------

# Plays bwrap's part: write `{"child-pid": N` (the rest comes later, as bwrap writes it), then
# wait for a byte on the block descriptor, then say it went on.
FAKE_BWRAP = (
    "printf '{{\\n    \"child-pid\": %d,\\n' $$ > /proc/self/fd/{info}; "
    "head -c 1 < /proc/self/fd/{block} >/dev/null && echo released"
)


async def held(ready: object) -> tuple[child.Finished, list[int]]:
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    seen: list[int] = []

    def on_ready(pid: int) -> None:
        seen.append(pid)
        if callable(ready):
            ready(pid)

    try:
        finished = await child.run(
            [SH, "-c", FAKE_BWRAP.format(info=info_w, block=block_r)],
            b"",
            timeout_s=5.0,
            pass_fds=(info_w, block_r),
            hold=child.Hold(info_r, block_w, on_ready),
        )
    finally:
        for fd in (info_r, info_w, block_r, block_w):
            os.close(fd)
    return finished, seen


async def test_a_held_sandbox_goes_on_once_it_is_ready() -> None:
    finished, seen = await held(None)
    assert finished.exit == 0 and finished.stdout == b"released\n"
    assert len(seen) == 1 and seen[0] > 1


async def test_a_sandbox_that_cannot_be_made_ready_is_killed_before_it_goes_on() -> None:
    def fail(pid: int) -> None:
        raise OSError("no cgroup")

    started = time.monotonic()
    finished, seen = await held(fail)
    assert len(seen) == 1
    assert b"released" not in finished.stdout
    assert finished.exit is not None and finished.exit < 0  # killed
    assert time.monotonic() - started < 4


async def test_a_bwrap_that_ends_before_it_says_anything_is_not_waited_for() -> None:
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    seen: list[int] = []
    try:
        finished = await child.run(
            [SH, "-c", "echo 'bwrap: cannot' >&2; exit 1"],
            b"",
            timeout_s=5.0,
            hold=child.Hold(info_r, block_w, seen.append),
        )
    finally:
        for fd in (info_r, info_w, block_r, block_w):
            os.close(fd)
    assert finished.exit == 1 and seen == []


def _ended(pid: int) -> bool:
    """True when `pid` has ended; else False, and it is killed so that no test leaks it."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        process.kill()
        return False
    except psutil.NoSuchProcess:
        return True


# `setsid` leaves the group and the session, as the toolkit's shell does without bwrap
# (`[sandbox] mode = "none"`): a group kill alone misses it (issue 10).
ESCAPES = "setsid sleep 300 & echo $!; sleep 100"


async def test_at_the_timeout_what_left_for_a_session_of_its_own_is_killed_too() -> None:
    finished = await sh(ESCAPES, timeout_s=0.5)
    assert finished.exit is None
    escaped = int(finished.stdout)
    assert _ended(escaped)


async def test_a_cancelled_run_kills_the_whole_tree_before_it_returns() -> None:
    """What brokerd does with a sandbox in flight when it stops (SIGTERM cancels its tasks)."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sh, ESCAPES, b"", 100.0)
        await anyio.sleep(0.5)
        pids = [p.pid for p in psutil.Process().children(recursive=True)]
        assert len(pids) >= 3, pids  # sh, its sleep, and the sleep in a session of its own
        tasks.cancel_scope.cancel()
    assert all([_ended(pid) for pid in pids])  # a list: every one is looked at
