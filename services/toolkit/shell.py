"""`shell`: run `/bin/sh -c command` in a folder, in its own session, with a deadline.

Output format (exit 0 whenever the command ran): the combined stdout and stderr decoded as
UTF-8 with replacement, a newline if it does not end with one, then, if it was cut,
`[output cut at 1048576 bytes; the command wrote at least {n} bytes]`, then the last line
`[exit status {n}]` or `[killed by signal {n} ({NAME})]`. Exit 1: `shell: {cwd}: no such
directory` (or another reason it could not start) and `shell: timed out after {n} s`.
When the shell ends or times out, its whole process group is killed (and, run as the toolkit,
everything it started that left the group), as the sandbox would. Standard input is /dev/null.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from .outcome import Outcome

MAX_OUTPUT = 1024 * 1024
SHELL = "/bin/sh"
GRACE_S = 1.0  # after the shell ends, how long to wait for what its killed children wrote
_POLL_S = 0.05  # how often to look whether the shell has ended while its output is quiet
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522  # <linux/capability.h>


def run_shell(
    command: str,
    cwd: str,
    timeout_s: float,
    *,
    reap_orphans: bool = False,
    limits: tuple[int | None, int | None] = (None, None),
) -> Outcome:
    """Run `command` in `cwd`; see the module docstring for what the model reads.

    `reap_orphans` (for the toolkit's own process only: it kills every child the caller has)
    makes this process a child subreaper, so that what the command started outside its group
    (`setsid`, a double fork) is orphaned to it, then killed and reaped too, and seals it:
    nothing the command runs may gain a privilege. `limits` (memory in MiB, processes) are
    set on the command before it starts, and no core is ever dumped.
    """
    why = _not_a_folder(cwd)
    if why is not None:
        return Outcome.tool_error(f"shell: {cwd}: {why}")
    if reap_orphans:
        if not _seal():
            return Outcome.misuse("toolkit: shell: cannot forbid new privileges")
        reap_orphans = _become_subreaper()
    try:
        process = subprocess.Popen(
            [SHELL, "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _limit(*limits),
        )
    except OSError as error:
        where = error.filename if isinstance(error.filename, str) else SHELL
        return Outcome.tool_error(f"shell: {where}: {error.strerror or error}")
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    with process.stdout:
        output = _Output(process.stdout.fileno())
        ended = output.read_until_ended(process.pid, deadline)
        _kill_group(process)
        if reap_orphans:
            _kill_orphans(time.monotonic() + GRACE_S)
        if ended:  # what the shell and its killed children wrote before they ended
            output.read_to_end(min(deadline, time.monotonic() + GRACE_S))
    if not ended:
        return Outcome.tool_error(f"shell: timed out after {timeout_s:g} s")
    return Outcome.done(output.text() + _status_line(process.returncode))


class _Output:
    """Reads the command's output pipe: keeps the first MAX_OUTPUT bytes, counts them all."""

    def __init__(self, fd: int) -> None:
        import select

        self.fd = fd
        self.kept = bytearray()
        self.total = 0
        self.open = True
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def read_until_ended(self, pid: int, deadline: float) -> bool:
        """Read until the shell `pid` has ended (True, left a zombie: its pid stays the group's
        id until reaped) or the deadline has passed (False)."""
        while not _has_ended(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self.open:  # the output is closed, the shell runs on: look again soon
                time.sleep(min(left, _POLL_S))
            elif self._poller.poll(min(left, _POLL_S) * 1000):
                self._read()
        return True

    def read_to_end(self, until: float) -> None:
        """Read what is left, until the end of the output or `until`, whichever is first."""
        while self.open:
            left = until - time.monotonic()
            if left <= 0 or not self._poller.poll(left * 1000):
                return
            self._read()

    def _read(self) -> None:
        chunk = os.read(self.fd, 65536)
        room = MAX_OUTPUT - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.total += len(chunk)
        self.open = bool(chunk)

    def text(self) -> str:
        cut = self.total > len(self.kept)
        # A character split by the cut is dropped rather than shown as U+FFFD.
        text = _decode(self.kept, final=not cut)
        if text and not text.endswith("\n"):
            text += "\n"
        if cut:
            text += (
                f"[output cut at {MAX_OUTPUT} bytes; "
                f"the command wrote at least {self.total} bytes]\n"
            )
        return text


def _decode(data: bytearray, final: bool) -> str:
    import codecs

    return codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(data), final=final)


def _has_ended(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _limit(memory_mb: int | None, processes: int | None) -> None:
    """Runs in the child between fork and exec: the command's rlimits (SPEC §8.2)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb is not None:
        size = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if processes is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the shell's process group, then reap the shell."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _become_subreaper() -> bool:
    """Linux's PR_SET_CHILD_SUBREAPER: orphaned descendants become this process's children."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):
        return False


def _seal() -> bool:
    """PR_SET_NO_NEW_PRIVS, and no capability left in any set this process can lower: no
    program the command runs gains a privilege through a setuid bit or a file capability,
    whatever is left in the bounding set after the toolkit became the tool user."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
        nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice
        return bool(libc.capset(header, nothing) == 0)
    except (ImportError, OSError, AttributeError):
        return False


def _kill_orphans(until: float) -> None:
    """Kill and reap every child this process still has, until none is left or `until`."""
    while True:
        children = _children()
        for pid in children:  # each is our child, alive or a zombie: its pid cannot be reused
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if not children or time.monotonic() > until:
            return
        time.sleep(0.005)


def _children() -> list[int]:
    """This process's children (Linux /proc/.../children); empty where the kernel lacks it."""
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as file:
                pids.extend(int(pid) for pid in file.read().split())
    return pids


def _status_line(code: int) -> str:
    if code >= 0:
        return f"[exit status {code}]"
    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"[killed by signal {number}]"
    return f"[killed by signal {number} ({name})]"


def _not_a_folder(cwd: str) -> str | None:
    import stat

    try:
        mode = os.stat(cwd).st_mode
    except FileNotFoundError:
        return "no such directory"
    except OSError as error:
        return error.strerror or str(error)
    except ValueError as error:  # an embedded NUL: the broker never sends one
        return str(error)
    return None if stat.S_ISDIR(mode) else "not a directory"
