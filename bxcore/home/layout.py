"""The home folder's layout (SPEC §2.2) and the run folder that holds the sockets (§2.3).

It computes paths and creates folders (and the run folder's symlink); nothing else: it never
writes, reads or removes a file. When `{home}/run` is too long for a Unix socket path, the run
folder is a short folder under /tmp and `{home}/run` is a symlink to it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from bxcore.errors import one_line
from bxcore.ids import valid_grant_id, valid_session

SOCKETS: tuple[str, ...] = (
    "broker",
    "admin",
    "broker-events",
    "loop",
    "loop-events",
    "memory",
    "gateway",
    "supervisor",
)
"""Every ZeroMQ socket, by name (§2.3)."""

SERVICES: tuple[str, ...] = ("brokerd", "memoryd", "loopd", "gatewayd")
"""The four daemons, in the order `bxctl up` starts them (§13)."""

MAX_SOCKET_PATH = 107
"""The longest Unix socket path, in bytes (`sun_path` is 108 bytes with its NUL)."""

MAX_NAME = 32
"""The longest name of a lock, pid file, log or socket."""

_LONGEST_SOCKET = max(SOCKETS, key=len)

SHORT_RUN_BASE = Path("/tmp")

_NAME = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{MAX_NAME - 1}}}")


class HomeError(Exception):
    """The home folder cannot be used as it is; the message is one line that says why."""


def resolve_home(option: str | Path | None, env: Mapping[str, str]) -> Path:
    """`--home DIR`, else `$BX_HOME`, else the platform's user data folder (§2.2).

    An empty option or variable counts as not given; `~` is expanded. The result is absolute
    but not symlink-resolved, so it names the home the way the owner wrote it.
    """
    chosen: str | Path | None = option if option not in (None, "") else None
    if chosen is None:
        chosen = env.get("BX_HOME") or None
    if chosen is None:
        chosen = platformdirs.user_data_dir("boxmaker")
    if "\x00" in str(chosen):
        raise HomeError("the home folder's path contains a NUL character")
    return Path(os.path.abspath(Path(chosen).expanduser()))  # normalised, links kept


def _name(kind: str, name: str) -> str:
    if _NAME.fullmatch(name) is None:
        raise ValueError(f"not a valid {kind} name: {name!r}")
    return name


@dataclass(frozen=True)
class Home:
    """The paths of one home folder. `root` must be absolute (see `resolve_home`)."""

    root: Path

    def __post_init__(self) -> None:
        if not self.root.is_absolute():
            raise ValueError(f"the home folder must be an absolute path: {self.root}")

    @classmethod
    def resolve(cls, option: str | Path | None, env: Mapping[str, str]) -> Home:
        return cls(resolve_home(option, env))

    # -- the owner's files -----------------------------------------------------------------

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def grants(self) -> Path:
        return self.root / "grants"

    def grant(self, grant_id: str) -> Path:
        if not valid_grant_id(grant_id):
            raise ValueError(f"not a valid grant id: {grant_id!r}")
        return self.grants / f"{grant_id}.toml"

    @property
    def jobs(self) -> Path:
        """The owner's scheduled jobs, one TOML file each (§19)."""
        return self.root / "jobs"

    def job(self, job_id: str) -> Path:
        if not valid_grant_id(job_id):
            raise ValueError(f"not a valid job id: {job_id!r}")
        return self.jobs / f"{job_id}.toml"

    @property
    def workspace(self) -> Path:
        """The folder the starter grants name (§5.6)."""
        return self.root / "workspace"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    def witness(self, who: str) -> Path:
        """The newest ledger head `who` (gatewayd, bxctl) has seen (§7): the owner's side."""
        return self.root / "witness" / f"{_name('witness', who)}.json"

    # -- the services' files ---------------------------------------------------------------

    @property
    def audit(self) -> Path:
        return self.root / "audit"

    @property
    def ledger(self) -> Path:
        return self.audit / "ledger.jsonl"

    @property
    def state_broker(self) -> Path:
        return self.root / "state" / "broker"

    def session_state(self, session: str) -> Path:
        """brokerd's label file of one session (§6)."""
        return self.state_broker / f"{_session(session)}.json"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    def session_history(self, session: str) -> Path:
        return self.sessions / f"{_session(session)}.jsonl"

    @property
    def job_runs(self) -> Path:
        """loopd's schedule of the jobs (§19): each job's last handled time and run number,
        and its open run. Written by loopd only, beside the histories it owns."""
        return self.sessions / ".jobs.json"

    @property
    def memory_db(self) -> Path:
        return self.root / "memory" / "memory.sqlite3"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def mcp(self) -> Path:
        """`{home}/mcp/`: the owner's pins, one file a server (SPEC §18.3), and the npm and
        Python servers `bxctl mcp add` installed (`mcp_npm`, `mcp_venv`)."""
        return self.root / "mcp"

    def mcp_npm(self, server: str) -> Path:
        """The folder npm installed server `server`'s package in (issue 27)."""
        return self.mcp / "npm" / _name("server", server)

    def mcp_venv(self, server: str) -> Path:
        """The virtual environment pip installed server `server`'s package in (issue 27)."""
        return self.mcp / "venv" / _name("server", server)

    @property
    def matrix(self) -> Path:
        """`{home}/matrix/` (0700): the phone channel's crypto store, sync position, threads
        and cards (SPEC §21.1); only gatewayd reads or writes it."""
        return self.root / "matrix"

    def ensure_matrix(self) -> Path:
        """`{home}/matrix/`, made 0700 if missing; one that is not a private folder of ours
        is refused (`HomeError`)."""
        _ensure_private_folder(self.matrix)
        return self.matrix

    def mcp_pins(self, server: str) -> Path:
        return self.mcp / f"{_name('server', server)}.pins.json"

    def mcp_log(self, server: str) -> Path:
        """A server's standard error (§18.2)."""
        return self.logs / f"mcp-{_name('server', server)}.log"

    def log(self, service: str) -> Path:
        return self.logs / f"{_name('service', service)}.log"

    # -- the run folder --------------------------------------------------------------------

    @property
    def run(self) -> Path:
        """`{home}/run` as the owner sees it: a folder, or a symlink to the short one."""
        return self.root / "run"

    @property
    def run_moved(self) -> bool:
        """True when `{home}/run` is too long for socket paths and /tmp holds the sockets."""
        longest = self.run / f"{_LONGEST_SOCKET}.sock"
        return len(os.fsencode(longest)) > MAX_SOCKET_PATH

    @property
    def run_dir(self) -> Path:
        """The real run folder: `{home}/run`, or `/tmp/bx-{uid}-{hash}` when that is too long."""
        if not self.run_moved:
            return self.run
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return SHORT_RUN_BASE / f"bx-{os.getuid()}-{digest}"

    @property
    def run_note(self) -> str:
        """A line for the log when the run folder was moved, else ""."""
        if not self.run_moved:
            return ""
        return (
            f"the run folder is {self.run_dir} ({self.run} links to it): "
            f"socket paths under the home folder would exceed {MAX_SOCKET_PATH} bytes"
        )

    def lock(self, service: str) -> Path:
        return self.run / f"{_name('service', service)}.lock"

    def pidfile(self, name: str) -> Path:
        return self.run / f"{_name('pid file', name)}.pid"

    @property
    def console_token(self) -> Path:
        """The console's owner token (§12.1): kept across restarts, beside the keys."""
        return self.keys / "console.token"

    @property
    def console_logins(self) -> Path:
        """The console's logins (digests of cookies and keys, §12.1): gatewayd's, kept across
        its restarts, gone with the run folder."""
        return self.run / "console-logins.json"

    def socket_path(self, name: str) -> Path:
        """Every name in `SOCKETS` fits in 107 bytes; a longer name may not, and is refused."""
        path = self.run_dir / f"{_name('socket', name)}.sock"
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise ValueError(f"the socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
        return path

    def endpoint(self, name: str) -> str:
        """The default `ipc://` endpoint of a socket, in the real (short) run folder."""
        return f"ipc://{self.socket_path(name)}"

    def ensure_run(self) -> Path:
        """Create the run folder (0700), and the symlink to it when it is under /tmp.

        Idempotent. Returns the real folder. Raises `HomeError` (one line) when what is there
        is not ours: a symlink to elsewhere, a /tmp folder owned by someone else or open to
        others, or a plain `{home}/run` folder where a symlink is needed.
        """
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # the owner's alone
            if not self.run_moved:
                return self._ensure_plain_run()
            target = self.run_dir
            _ensure_private_folder(target)
            self._ensure_link(target)
            return target
        except OSError as exc:
            raise HomeError(f"cannot create the run folder: {one_line(exc)}") from exc

    def _ensure_plain_run(self) -> Path:
        run = self.run
        try:
            run.mkdir(mode=0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(run, 0o700)
            return run
        info = os.lstat(run)
        if not stat.S_ISDIR(info.st_mode):
            raise HomeError(f"{run} is not a folder; remove it so boxmaker can create one")
        if info.st_uid != os.getuid():
            raise HomeError(f"{run} is owned by uid {info.st_uid}, not by this user")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(run, 0o700)
        return run

    def _ensure_link(self, target: Path) -> None:
        link = self.run
        for _ in range(2):
            try:
                os.symlink(target, link)
                return
            except FileExistsError:
                pass
            try:
                info = os.lstat(link)
            except FileNotFoundError:
                continue  # removed meanwhile: try again
            if not stat.S_ISLNK(info.st_mode):
                raise HomeError(
                    f"{link} must be a symlink to {target} (its path is too long for "
                    f"sockets); remove it and start again"
                )
            found = os.readlink(link)
            if found != str(target):
                raise HomeError(f"{link} links to {found}, not to {target}; refusing to use it")
            return
        raise HomeError(f"{link} keeps changing; refusing to use it")


def _ensure_private_folder(folder: Path) -> None:
    """`folder` exists, is a real folder (not a symlink), is ours and is 0700."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(folder, 0o700)  # the umask may have taken bits away
        return
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise HomeError(f"{folder} is not a folder; refusing to use it")
    if info.st_uid != os.getuid():
        raise HomeError(f"{folder} is owned by uid {info.st_uid}, not by this user; refusing")
    if stat.S_IMODE(info.st_mode) != 0o700:
        mode = oct(stat.S_IMODE(info.st_mode))[2:]
        raise HomeError(f"{folder} has mode {mode}, not 700; refusing to use it")


def _session(session: str) -> str:
    if not valid_session(session):
        raise ValueError(f"not a valid session id: {session!r}")
    return session
