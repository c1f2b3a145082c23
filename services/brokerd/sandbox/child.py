"""One sandbox process on the event loop (SPEC §8.2's limits): its input fed, its output read
within caps, its end seen through a pidfd, and its whole process group killed at the timeout.

It uses the loop's readers and writers on the pipes, not asyncio's subprocess transports:
those start a thread per child to wait for it and take several turns of the loop to connect
their pipes, about 1 ms of an allowed read_file's 17 (bench toolcall).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from bxcore import aio

if TYPE_CHECKING:
    import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed

log = logging.getLogger(__name__)

OUTPUT_CAP = 1024 * 1024 + 4096  # the toolkit cuts at 1 MiB and adds a note; this is the wall
ERROR_CAP = 64 * 1024
_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*([0-9]{1,10})[^0-9]')
CHUNK = 65536
TREE_GONE_S = 2.0  # how long a killed tree may take to end (SIGKILL: milliseconds)


@dataclass(frozen=True, slots=True)
class Hold:
    """bwrap waits after it has made the sandbox's process: it writes that process's pid to
    `info` and goes on when a byte arrives on `release`. `ready(pid)` runs in between (the
    tool user's map written, a shell's rlimits set, the process put in its cgroup); if it
    raises, the sandbox is killed before anything runs in it."""

    info: int  # the read end of bwrap's --info-fd pipe
    release: int  # the write end of its block pipe
    ready: Callable[[int], None]
    slow: Callable[[int], None] | None = None  # run after `ready`, in a thread (a cgroup move)


@dataclass(frozen=True, slots=True)
class Finished:
    """How a sandboxed process ended: `exit` None means it was killed (the timeout, or
    output past the cap when `cut`)."""

    exit: int | None
    stdout: bytes
    stderr: bytes
    cut: bool  # stdout passed OUTPUT_CAP and the process was stopped
    ms: int


async def run(
    argv: Sequence[str],
    stdin: bytes,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
    hold: Hold | None = None,
    executable: str | None = None,
) -> Finished:
    """Run `argv` in a new session; kill its whole group at `timeout_s`. OSError if it cannot
    start.

    No `preexec_fn`: it would make every call fork brokerd whole instead of spawning (3 ms
    of a read_file's 15; bench toolcall). A shell's rlimits are set on bwrap's process
    while it waits (`Hold`, `services.brokerd.sandbox.limits`).

    Killing bwrap kills the sandbox: `--die-with-parent` kills its init, and with it every
    process of its PID namespace, whatever session or group they moved to. Without bwrap
    (`[sandbox] mode = "none"`) the toolkit's shell runs in a session of its own: so a kill
    (the timeout, brokerd stopping: a cancel) takes the whole tree, found by parentage, and
    `run` returns only once all of it has ended (issue 10)."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        executable=executable,  # when argv[0] is a name of brokerd's (`leftovers.mark`)
        bufsize=0,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(env) if env is not None else {},
        cwd=cwd,
        pass_fds=tuple(pass_fds),
    )
    try:
        exchange = _Exchange(process, stdin, hold)
    except BaseException:
        _kill_group(process.pid)
        with process:  # closes its pipes and reaps it
            raise
    try:
        with anyio.move_on_after(timeout_s):
            await exchange.done
    finally:
        with anyio.CancelScope(shield=True):
            killed = not exchange.over or exchange.cut
            tree = _kill_tree(process.pid) if killed else []
            try:
                await exchange.close()
            finally:  # even if a plain cancel cut the wait short: killed, it ends at once
                process.wait()
                await _gone(tree)
    ms = int((time.monotonic() - started) * 1000)
    return Finished(
        None if killed else process.returncode,
        bytes(exchange.out),
        bytes(exchange.err),
        exchange.cut,
        ms,
    )


class _Exchange:
    """The pipes and the pidfd of one process, watched by the running loop. `done` is set
    (and `over` true) when it has ended and both its outputs are closed, or as soon as stdout
    passes the cap. A timeout cancels `done` itself, leaving `over` false."""

    def __init__(
        self, process: subprocess.Popen[bytes], data: bytes, hold: Hold | None = None
    ) -> None:
        assert process.stdin and process.stdout and process.stderr
        self._loop = aio.loop()
        self._process = process
        self._pidfd = os.pidfd_open(process.pid)
        self._in = process.stdin.fileno()
        self._out = process.stdout.fileno()
        self._err = process.stderr.fileno()
        self.out = bytearray()
        self.err = bytearray()
        self.cut = False
        self.over = False
        self.done: aio.Future[None] = self._loop.create_future()
        self._ended: aio.Future[None] = self._loop.create_future()
        self._open = {self._out, self._err}
        self._pending = memoryview(data)
        self._writing = False  # a writer waits for room in the pipe
        self._hold = hold
        self._info = bytearray()
        self._released = False  # `_release` ran: the descriptors may be another's by now
        try:
            for fd in (self._in, self._out, self._err):
                os.set_blocking(fd, False)
            if hold is not None:
                os.set_blocking(hold.info, False)
                self._loop.add_reader(hold.info, self._informed)
            self._loop.add_reader(self._pidfd, self._exited)
            self._loop.add_reader(self._out, self._read, self._out, self.out, OUTPUT_CAP)
            self._loop.add_reader(self._err, self._read, self._err, self.err, ERROR_CAP)
            self._write()  # most arguments fit in the pipe at once
        except BaseException:
            self._release()
            raise

    def _write(self) -> None:
        try:
            while self._pending:
                self._pending = self._pending[os.write(self._in, self._pending) :]
        except BlockingIOError:
            if not self._writing:
                self._loop.add_writer(self._in, self._write)
                self._writing = True
            return
        except OSError:  # it stopped reading (a broken pipe): what it does next is its answer
            self._pending = self._pending[:0]
        self._stop_writing()
        self._process.stdin.close()  # type: ignore[union-attr]

    def _stop_writing(self) -> None:
        if self._writing:  # only while stdin is open: its number may be reused once closed
            self._loop.remove_writer(self._in)
            self._writing = False

    def _read(self, fd: int, into: bytearray, cap: int) -> None:
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._loop.remove_reader(fd)
            self._open.discard(fd)
            self._settle()
            return
        into += chunk
        if len(into) > cap:
            del into[cap:]  # stderr past its cap is read and dropped, so it never blocks
            if fd == self._out:
                self.cut = True
                self._finish()

    def _informed(self) -> None:
        """bwrap said which process the sandbox is: get it ready, then let it go on."""
        assert self._hold is not None
        try:
            chunk = os.read(self._hold.info, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._info += chunk
        # bwrap writes `{"child-pid": N` at once and the rest of the object later, once the
        # sandbox has gone on: the pid is read as soon as a character follows its digits.
        found = _CHILD_PID.search(self._info)
        if found is None:
            if chunk and len(self._info) < 4096:
                return  # not all of it yet
            self._let_go()  # bwrap ended before it made the sandbox: nothing to hold
            return
        self._let_go()
        pid = int(found.group(1))
        try:
            self._hold.ready(pid)
        except Exception:
            self._not_ready()
            return
        if self._hold.slow is None:
            self._go_on()
            return
        moved = self._loop.run_in_executor(None, self._hold.slow, pid)
        moved.add_done_callback(
            lambda done: self._not_ready() if done.exception() else self._go_on()
        )

    def _go_on(self) -> None:
        if self._hold is not None and not self._released:
            with contextlib.suppress(OSError):
                os.write(self._hold.release, b"x")

    def _not_ready(self) -> None:
        log.error("the sandbox could not be made ready, so it is killed", exc_info=True)
        if not self._released:
            _kill_tree(self._process.pid)

    def _let_go(self) -> None:
        if self._hold is not None:
            self._loop.remove_reader(self._hold.info)

    def _exited(self) -> None:
        self._loop.remove_reader(self._pidfd)
        if not self._ended.done():
            self._ended.set_result(None)
        self._settle()

    def _settle(self) -> None:
        if self._ended.done() and not self._open:
            self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.over = True
            self.done.set_result(None)

    async def close(self) -> None:
        """Wait for the end (killed, if it was not over), then let go of everything."""
        try:
            await self._ended
        finally:
            self._release()
            for pipe in (self._process.stdin, self._process.stdout, self._process.stderr):
                if pipe is not None:
                    pipe.close()

    def _release(self) -> None:
        """Every reader and writer off while the descriptors are still open (closed, their
        numbers may be reused by another process's pipes at once), then the pidfd closed."""
        self._released = True
        for fd in (self._pidfd, self._out, self._err):
            self._loop.remove_reader(fd)
        self._let_go()
        self._stop_writing()
        os.close(self._pidfd)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _kill_tree(pid: int) -> list[psutil.Process]:
    """SIGKILL `pid`'s group and every process descended from it, whatever its session."""
    from bxcore import process_tree  # psutil: 30 ms of brokerd's start, for a rare path

    try:
        return process_tree.kill_tree(pid)
    except Exception:  # never let a look at /proc keep the group kill from happening
        log.exception("could not look for what the sandbox %d started", pid)
        _kill_group(pid)
        return []


async def _gone(tree: list[psutil.Process]) -> None:
    """Wait (a little) until the killed tree has ended: its processes are not ours to reap."""
    if not tree:
        return
    from bxcore import process_tree

    deadline = time.monotonic() + TREE_GONE_S
    while (tree := process_tree.alive(tree)) and time.monotonic() < deadline:
        await anyio.sleep(0.005)
    if tree:
        log.error("%d process(es) of a killed sandbox still run", len(tree))
