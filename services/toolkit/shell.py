"""`shell`: run `/bin/sh -c command` in a folder, in its own session, with a deadline.

Output format (exit 0 whenever the command ran): the combined stdout and stderr decoded as
UTF-8 with replacement, a newline if it does not end with one, then, if it was cut,
`[output cut at 1048576 bytes; the command wrote at least {n} bytes]`, then the last line
`[exit status {n}]` or `[killed by signal {n} ({NAME})]`. Exit 1: `shell: {cwd}: no such
directory` (or another reason it could not start) and `shell: timed out after {n} s`.
When the shell ends or times out, its whole process group is killed (and, run as the toolkit,
everything it started that left the group), as the sandbox would. Standard input is /dev/null.

Every wait is one poll on the output and the shell's pidfd: no nap (issue 15). In brokerd's
sandbox it imports `posix` and `select` only; `resource` and `_ctypes` only run directly, to
set the rlimits and seal the process (`_limit`, `_seal`), which brokerd and bwrap did there
already: `subprocess` (40 ms, `signal`'s enums 10 ms of them), `ctypes` (6 ms), `contextlib`
(4 ms) and `os` (1.2 ms) made most of a shell call's start (2-core x86_64, busy).
"""

import posix
import time

from .outcome import Outcome

MAX_OUTPUT = 1024 * 1024
SHELL = "/bin/sh"
GRACE_S = 1.0  # after the shell ends, how long to wait for what its killed children wrote
# <asm-generic/signal.h>: the same numbers on x86_64 and aarch64.
_SIGPIPE = 13  # ignored by Python; the command gets it back at its default, as subprocess does
_SIGKILL = 9
_SIGXFSZ = 25
_S_IFMT, _S_IFDIR = 0o170000, 0o040000  # <sys/stat.h>: `stat` would be 0.15 ms of the start


def run_shell(
    command: str,
    cwd: str,
    timeout_s: float,
    *,
    reap_orphans: bool = False,
    pid_namespace: bool = False,
    limits: tuple[int | None, int | None] = (None, None),
    cgroup: int | None = None,
) -> Outcome:
    """Run `command` in `cwd`; see the module docstring for what the model reads.

    `reap_orphans` (for the toolkit's own process only: it kills every child the caller has)
    seals this process (nothing the command runs may gain a privilege) and ends what the
    command started outside its group (`setsid`, a double fork) too. With `pid_namespace`
    (brokerd's sandbox, where this process is the first of a PID namespace of its own, bwrap's
    init aside) every other process of the namespace is killed at once; without it, this
    process becomes a child subreaper, so that those processes are orphaned to it, then
    killed and reaped. `limits` (memory in MiB, processes), given when it runs unconfined,
    are set on this process, and so inherited by the command, before it starts (the
    toolkit's process exists for this call alone), with no core dump; in brokerd's sandbox
    brokerd set them on the sandbox's first process before the toolkit started
    (`services.brokerd.sandbox.limits`). `cgroup`: the call's memory cgroup's `tasks` file, which
    this process joins, then closes, before the command starts (so everything the command
    starts is in it); if it cannot, the command does not run.
    """
    why = _not_a_folder(cwd)
    if why is not None:
        return Outcome.tool_error(f"shell: {cwd}: {why}")
    alone = adopted = False
    if reap_orphans:
        if not _seal():
            return Outcome.misuse("toolkit: shell: cannot forbid new privileges")
        alone = pid_namespace and _first_of_a_namespace()
        adopted = not alone and _become_subreaper()
    if limits != (None, None):
        _limit(*limits)
    if cgroup is not None:
        why = _join(cgroup)
        if why is not None:
            return Outcome.misuse(f"toolkit: shell: cannot join the call's memory cgroup: {why}")
    try:
        pid, output_fd = _spawn(command, cwd)
    except OSError as error:
        where = error.filename if isinstance(error.filename, str) else SHELL
        return Outcome.tool_error(f"shell: {where}: {error.strerror or error}")
    deadline = time.monotonic() + timeout_s
    try:
        output = _Output(output_fd)
        try:
            ended = output.read_until_ended(pid, deadline)
        finally:
            status = _kill_group(pid)
        if alone:
            _kill_namespace()
        elif adopted:
            _kill_orphans(time.monotonic() + GRACE_S)
        if ended:  # what the shell and its killed children wrote before they ended
            output.read_to_end(min(deadline, time.monotonic() + GRACE_S))
    finally:
        posix.close(output_fd)
    if not ended:
        return Outcome.tool_error(f"shell: timed out after {timeout_s:g} s")
    return Outcome.done(output.text() + _status_line(status))


def _spawn(command: str, cwd: str) -> tuple[int, int]:
    """Start the shell in `cwd`, in a session of its own, its output to a new pipe: its pid
    and the pipe's read end. `posix_spawn` (a vfork) needs no folder of its own: this
    process moves to `cwd` for the instant of the spawn. No other descriptor is inherited."""
    _close_on_exec_all()
    reading, writing = posix.pipe()
    here = posix.open(".", posix.O_PATH | posix.O_DIRECTORY)
    try:
        posix.chdir(cwd)
        pid = posix.posix_spawn(
            SHELL,
            [SHELL, "-c", command],
            posix.environ,
            file_actions=[
                (posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                (posix.POSIX_SPAWN_DUP2, writing, 1),
                (posix.POSIX_SPAWN_DUP2, writing, 2),
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=(_SIGPIPE, _SIGXFSZ),
        )
    except BaseException:
        posix.close(reading)
        raise
    finally:
        posix.close(writing)
        posix.fchdir(here)
        posix.close(here)
    return pid, reading


def _join(fd: int) -> str | None:
    """Move this thread, the process's only one, into the cgroup whose `tasks` file `fd` is
    (cgroup v1: `0` names the writer), then close `fd`; why not, or None. A thread that
    moves only itself skips the kernel's global lock, which a move of a whole process holds
    for an RCU grace period: 0.02 ms against 11 (6.18 kernel, 2-core x86_64, loaded)."""
    try:
        posix.write(fd, b"0")
    except OSError as error:
        return error.strerror or str(error)
    finally:
        try:  # noqa: SIM105
            posix.close(fd)
        except OSError:
            pass
    return None


def _close_on_exec_all() -> None:
    """Every descriptor but the standard three closed at exec, as `close_fds` would."""
    for name in posix.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:  # noqa: SIM105 - contextlib costs 4 ms of the start (module docstring)
                posix.set_inheritable(fd, False)
            except OSError:  # the listing's own, closed by now
                pass


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
        """Read until the shell `pid` has ended (True: left a zombie, its pid stays the group's
        id until reaped) or the deadline has passed (False). One poll waits for both, so
        neither an output closed early nor a quiet one costs a nap."""
        import select

        end = _ending(pid)
        self._poller.register(end, select.POLLIN)
        try:
            while True:
                left = deadline - time.monotonic()
                events = dict(self._poller.poll(max(left, 0.0) * 1000))
                if end in events:
                    return True
                if left <= 0:
                    return False
                if self.fd in events:
                    self._read()
        finally:
            self._poller.unregister(end)
            posix.close(end)

    def read_to_end(self, until: float) -> None:
        """Read what is left, until the end of the output or `until`, whichever is first."""
        while self.open:
            left = until - time.monotonic()
            if left <= 0 or not self._poller.poll(left * 1000):
                return
            self._read()

    def _read(self) -> None:
        chunk = posix.read(self.fd, 65536)
        room = MAX_OUTPUT - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.total += len(chunk)
        if not chunk:  # closed: a hung-up pipe would wake every poll from now on
            self.open = False
            self._poller.unregister(self.fd)

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


def _ending(pid: int) -> int:
    """A descriptor that becomes readable once our child `pid` has ended (a zombie, not
    reaped): its pidfd (Linux 5.3), or else a pipe whose write end a thread closes when a
    blocking `waitid` returns. The caller closes it."""
    try:
        return posix.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    import threading

    readable, writable = posix.pipe()

    def wait() -> None:
        try:
            posix.waitid(posix.P_PID, pid, posix.WEXITED | posix.WNOWAIT)
        except ChildProcessError:  # already reaped: it has ended all the same
            pass
        finally:
            posix.close(writable)

    threading.Thread(target=wait, daemon=True).start()
    return readable


def _limit(memory_mb: int | None, processes: int | None) -> None:
    """This process's rlimits, which the command inherits (SPEC §8.2), and no core dump."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb is not None:
        size = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if processes is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _kill_group(pid: int) -> int:
    """Kill the shell's process group, then reap the shell: its status as subprocess gives
    it (negative: the signal that killed it)."""
    try:  # noqa: SIM105
        posix.killpg(pid, _SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return posix.waitstatus_to_exitcode(posix.waitpid(pid, 0)[1])


def _become_subreaper() -> bool:
    """Linux's PR_SET_CHILD_SUBREAPER: orphaned descendants become this process's children."""
    try:
        from . import libc

        return libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
    except (ImportError, OSError, AttributeError):
        return False


def _seal() -> bool:
    """PR_SET_NO_NEW_PRIVS, and no capability left that this process holds: no program the
    command runs gains a privilege through a setuid bit or a file capability, whatever is
    left in the bounding and inheritable sets after the toolkit became the tool user. bwrap
    has done so in brokerd's sandbox, root's too: there `_ctypes` (0.6 ms of a shell call's
    start) is not even loaded. Run directly, it is done here."""
    if _sealed():
        return True
    try:
        from . import libc

        return libc.prctl(libc.PR_SET_NO_NEW_PRIVS, 1) and libc.drop_capabilities()
    except (ImportError, OSError, AttributeError):
        return False


# Not the inheritable set: under PR_SET_NO_NEW_PRIVS an exec never adds a capability to the
# permitted set it had (the kernel's `cap_bprm_creds_from_file`), so with these three empty
# nothing the command runs can hold one. A root brokerd's tool user keeps in it the four
# capabilities bwrap gave the toolkit, which its bounding set holds anyway (docs/decisions.md).
_CAPABILITY_SETS = (b"CapPrm", b"CapEff", b"CapAmb")


def _sealed() -> bool:
    """Whether /proc/self/status says PR_SET_NO_NEW_PRIVS is set and this process holds no
    capability: its permitted, effective and ambient sets are empty (a missing line counts
    as not)."""
    try:
        with open("/proc/self/status", "rb") as file:
            lines = file.read().splitlines()
    except OSError:
        return False
    status = dict(line.partition(b":\t")[::2] for line in lines)
    empty = all(status.get(name, b"1").strip(b"0") == b"" for name in _CAPABILITY_SETS)
    return empty and status.get(b"NoNewPrivs") == b"1"


def _first_of_a_namespace() -> bool:
    """Whether this process is the second of its PID namespace, the child of its init (as
    bwrap starts a command): in the host's own namespace PID 2 is a kernel thread, so
    `kill(-1)` can then reach only what this call started."""
    return posix.getpid() == 2 and posix.getppid() == 1


def _kill_namespace() -> None:
    """Kill every process of this PID namespace but its init and this one: one `kill(-1)`,
    which a process forking at that instant cannot escape (the kernel holds the process
    list; a fork under a pending SIGKILL fails). The namespace's init reaps them, and their
    end closes the output pipe."""
    try:  # noqa: SIM105
        posix.kill(-1, _SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing else is left
        pass


def _kill_orphans(until: float) -> None:
    """Kill and reap every child this process still has, until none is left or `until`. A
    killed child's own children become ours when it ends, so it goes round until none."""
    import select

    while children := _children():
        ends = []
        for pid in children:  # each is our child, alive or a zombie: its pid cannot be reused
            try:  # noqa: SIM105
                posix.kill(pid, _SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            ends.append(_ending(pid))
        poller = select.poll()
        for end in ends:
            poller.register(end, select.POLLIN)
        try:
            waiting = len(ends)
            while waiting and (left := until - time.monotonic()) > 0:
                for end, _ in poller.poll(left * 1000):
                    poller.unregister(end)
                    waiting -= 1
        finally:
            for end in ends:
                posix.close(end)
        try:
            while posix.waitpid(-1, posix.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        if time.monotonic() > until:
            return


def _children() -> list[int]:
    """This process's children (Linux /proc/.../children); empty where the kernel lacks it."""
    pids: list[int] = []
    try:
        for task in posix.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as file:
                pids.extend(int(pid) for pid in file.read().split())
    except OSError:
        pass
    return pids


def _status_line(code: int) -> str:
    if code >= 0:
        return f"[exit status {code}]"
    import signal  # only now: its enums cost 10 ms of every start

    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"[killed by signal {number}]"
    return f"[killed by signal {number} ({name})]"


def _not_a_folder(cwd: str) -> str | None:
    try:
        mode = posix.stat(cwd).st_mode
    except FileNotFoundError:
        return "no such directory"
    except OSError as error:
        return error.strerror or str(error)
    except ValueError as error:  # an embedded NUL: the broker never sends one
        return str(error)
    return None if mode & _S_IFMT == _S_IFDIR else "not a directory"
