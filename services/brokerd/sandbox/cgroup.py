"""Each shell call's memory as a whole (SPEC §8.2, issue 9): a cgroup of its own, where one
can be had.

`RLIMIT_AS` bounds one process's address space; it does not count what a tool writes to a
tmpfs, nor what several processes hold together. A memory cgroup counts all of it. brokerd
makes one cgroup a call under its own (`boxmaker-tools/b<pid>-call-N`) and sets `memory_mb`.
In cgroup v1 the toolkit joins it itself, before it starts the command (`joinable`: it is
handed the cgroup's `tasks` file, opened by brokerd); in v2 brokerd puts the sandbox in it
while bwrap waits, before anything runs inside (`enter`, `child.Hold`). Only the memory
controller is used (processes are bounded by `RLIMIT_NPROC`, which binds since no tool runs
as root), and only for `shell`: moving a whole process into a cgroup waits for an RCU grace
period (11 ms here, loaded), and the other tools run only the toolkit, whose reads and
writes are bounded by construction.

It can be had only where brokerd may write its own cgroup: as root with cgroup v1's memory
controller, or under systemd with `Delegate=yes` on cgroup v2. Elsewhere `discover` says why
(`Unavailable`), and `bxctl status` shows that memory is bounded per process only.
`discover` reads `/proc/self/cgroup` and the cgroup file system; a `Cgroups` writes only
under the folder it made.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
FOLDER = "boxmaker-tools"
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No cgroup can be had; `why` says so in one line."""

    why: str


@dataclass(slots=True)
class Slot:
    """One call's cgroup: a folder in each hierarchy it uses."""

    name: str
    folders: tuple[Path, ...]


@dataclass
class Cgroups:
    """Where this brokerd makes its calls' cgroups, and how (`version` 1 or 2)."""

    version: int
    memory: Path  # the folder holding the calls' cgroups (memory's hierarchy in v1)
    memory_bytes: int
    _free: list[Slot] = field(default_factory=list)
    _made: int = 0

    def __repr__(self) -> str:
        return f"Cgroups(v{self.version} at {self.memory}, {self._made} made)"

    @property
    def summary(self) -> str:
        return f"cgroup v{self.version} under {self.memory}"

    def take(self) -> Slot:
        """A cgroup for one call, with its limits set: an idle one, else a new one."""
        if self._free:
            return self._free.pop()
        self._made += 1
        name = f"b{os.getpid()}-call-{self._made}"  # brokerds of other homes share the folder
        folder = self.memory / name
        folder.mkdir(exist_ok=True)
        if self.version == 2:
            _write(folder / "memory.max", str(self.memory_bytes))
            _write_if_there(folder / "memory.swap.max", "0")
        else:
            _write(folder / "memory.limit_in_bytes", str(self.memory_bytes))
            _write_if_there(folder / "memory.memsw.limit_in_bytes", str(self.memory_bytes))
        return Slot(name, (folder,))

    def joinable(self, slot: Slot) -> Path | None:
        """The file where the call's toolkit writes `0` to join the cgroup itself, before it
        starts the command (cgroup v1's `tasks`: a thread that moves only itself skips the
        kernel's global lock, whose RCU grace period a whole process's move waits for); None
        where there is none (v2 moves whole processes: brokerd moves the sandbox, `enter`)."""
        if self.version != 1 or len(slot.folders) != 1:
            return None
        return slot.folders[0] / "tasks"

    def enter(self, slot: Slot, pid: int) -> None:
        """Put process `pid` in the call's cgroup (each hierarchy). OSError if it cannot."""
        for folder in slot.folders:
            _write(folder / "cgroup.procs", str(pid))

    def give_back(self, slot: Slot) -> None:
        """The call has ended: its cgroup is kept for the next one once it holds no process;
        one that still does is removed later (`close`), never reused."""
        if all(not _read(folder / "cgroup.procs").strip() for folder in slot.folders):
            self._free.append(slot)

    def close(self) -> None:
        """Remove every call's cgroup that is empty (at stop)."""
        for folder in sorted(self.memory.glob(f"b{os.getpid()}-call-*")):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._free.clear()


def discover(
    memory_mb: int, *, proc: str | None = None, root: Path = ROOT
) -> Cgroups | Unavailable:
    """Where this process may make its calls' cgroups, made ready; or why it may not."""
    try:
        text = proc if proc is not None else Path("/proc/self/cgroup").read_text()
    except OSError as error:
        return Unavailable(f"cannot read /proc/self/cgroup: {error.strerror}")
    places = _places(text)
    memory_bytes = memory_mb * MIB
    try:
        if "memory" in places:  # v1 (or hybrid): memory has a hierarchy of its own
            return Cgroups(1, _ready_v1(root / "memory", places["memory"]), memory_bytes)
        if "" in places and (root / "cgroup.controllers").exists():
            return Cgroups(2, _ready_v2(root, places[""]), memory_bytes)
    except OSError as error:
        why = error.strerror or str(error)
        where = f" ({error.filename})" if error.filename else ""
        return Unavailable(f"cannot make a cgroup{where}: {why}")
    return Unavailable("no memory controller is mounted")


def _places(text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as controller -> path; "" for cgroup v2's unified hierarchy."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found.setdefault(controller, path)
    return found


def _under(base: Path, path: str) -> Path:
    return base / path.lstrip("/") if path.strip("/") else base


def _ready_v1(hierarchy: Path, path: str) -> Path:
    """The folder of the calls' cgroups. It may be left by a brokerd of another user (root,
    earlier): then this one could make no call's cgroup, and every shell would fail."""
    folder = _under(hierarchy, path) / FOLDER
    folder.mkdir(exist_ok=True)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
    _tidy(folder)
    return folder


def _ready_v2(root: Path, path: str) -> Path:
    """Cgroup v2 lets controllers be given to children only by a cgroup with no process in
    it: brokerd moves itself into a leaf of its own first (systemd's `Delegate=yes` gives
    it its cgroup to arrange)."""
    own = _under(root, path)
    if "memory" not in _read(own / "cgroup.controllers").split():
        raise OSError(0, "the memory controller is not available here", str(own))
    leaf = own / "brokerd"
    leaf.mkdir(exist_ok=True)
    _write(leaf / "cgroup.procs", str(os.getpid()))
    folder = own / FOLDER
    folder.mkdir(exist_ok=True)
    _write(own / "cgroup.subtree_control", "+memory")
    _write(folder / "cgroup.subtree_control", "+memory")
    _tidy(folder)
    return folder


def _tidy(folder: Path) -> None:
    """Remove the empty call cgroups that brokerds no longer running left behind."""
    for stale in folder.glob("b*-call-*"):
        owner = stale.name[1:].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                stale.rmdir()


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _write_if_there(path: Path, text: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _write(path, text)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
