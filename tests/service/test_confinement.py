"""I2, confined (SPEC §1, §8.2, §16): a real brokerd runs each call in real bwrap, and a call
granted one folder sees, writes and reaches nothing else of the host.

Every call goes over brokerd's broker socket, decided by grants this test writes. The tests
run as root, and brokerd then runs every tool as `nobody`; the folders a test grants, and the
other folder it tries to reach, are nobody's, so file permissions stop nothing: what a test
shows is what the sandbox hides.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psutil
import pytest

from bxcore.tools import Mount
from bxcore.wire.messages import Done, Failed, Outcome, ToolRequest, ToolResponse
from services.brokerd.core import bwrap
from services.brokerd.sandbox import child
from services.brokerd.sandbox import host as sandbox
from tests.support.brokerd import PYTHON, check_memory_limit
from tests.support.daemons import Daemon, init_home, running, tool_owned

NO_SUCH = "No such file or directory"


@dataclass
class Box:
    """A brokerd whose grants allow read_file, write_file and shell under `granted` only."""

    root: Path  # the test's own folder: h (the home), g (granted), o (another folder)
    brokerd: Daemon
    ids: Iterator[int] = field(default_factory=itertools.count)

    @property
    def home(self) -> Path:
        return self.root / "h"

    @property
    def granted(self) -> Path:
        return self.root / "g"

    @property
    def other(self) -> Path:
        return self.root / "o"

    def call(self, tool: str, arguments: dict[str, Any], *, timeout: float = 20.0) -> Outcome:
        n = next(self.ids)
        request = ToolRequest(f"r{n}", f"s{n}", f"c{n}", tool, json.dumps(arguments))
        answer = self.brokerd.ask(request, timeout=timeout)
        assert isinstance(answer, ToolResponse), answer
        return answer.outcome

    def shell(self, command: str, *, ok: bool = True) -> str:
        """Run `command` in the granted folder; its output (the status line included)."""
        outcome = self.call("shell", {"command": command, "cwd": str(self.granted)})
        assert isinstance(outcome, Done), outcome
        assert outcome.ok is ok, outcome
        return outcome.output

    def read(self, path: Path | str) -> Outcome:
        return self.call("read_file", {"path": str(path)})


def grant(home: Path, name: str, tool: str, path: Path) -> None:
    (home / "grants" / f"{name}.toml").write_text(
        f'tool = "{tool}"\nmode = "allow"\npath = "{path}"\nclass = "private"\n'
    )


def make_box(root: Path, config: str = "") -> Path:
    """The folders and grants of a `Box` under `root`; the home."""
    home = init_home(root / "h", config)
    for starter in (home / "grants").glob("workspace-*.toml"):
        starter.unlink()
    for tool in ("read_file", "write_file", "shell"):
        grant(home, f"test-{tool.replace('_', '-')}", tool, root / "g")
    (root / "g").mkdir()
    (root / "o").mkdir()
    (root / "o" / "secret.txt").write_text("OTHER FOLDER SECRET\n")
    (home / "secret.txt").write_text("HOME SECRET\n")
    tool_owned(root / "g", root / "o")
    return home


@contextlib.contextmanager
def box_running(config: str = "", env: dict[str, str] | None = None) -> Iterator[Box]:
    root = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    try:
        home = make_box(root, config)
        with running("brokerd", home, env) as brokerd:
            yield Box(root, brokerd)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    """Default timeouts; a memory and a process limit small enough to test."""
    with box_running("[sandbox]\nmemory_mb = 256\nmax_processes = 16\n") as started:
        yield started


@pytest.fixture(scope="module")
def tight() -> Iterator[Box]:
    """Timeouts of one second."""
    with box_running("[sandbox]\nshell_timeout_s = 1\nfile_timeout_s = 1\n") as started:
        yield started


def tool_error(outcome: Outcome) -> str:
    assert isinstance(outcome, Done) and not outcome.ok, outcome
    return outcome.output


# --- read_file and symbolic links ---------------------------------------------------------


def test_a_real_file_inside_the_granted_folder_is_read(box: Box) -> None:
    (box.granted / "inside.txt").write_text("inside\n")
    outcome = box.read(box.granted / "inside.txt")
    assert isinstance(outcome, Done) and outcome.ok and outcome.output == "inside\n"


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("to-home-file", "{home}/secret.txt"),
        ("to-other-file", "{other}/secret.txt"),
        ("relative-out", "../o/secret.txt"),
        ("to-etc-hostname", "/etc/hostname"),
        ("to-etc-passwd", "/etc/passwd"),
        ("to-run-folder", "{home}/run/broker.sock"),
    ],
)
def test_a_symlink_inside_the_granted_folder_pointing_outside_reads_nothing(
    box: Box, name: str, target: str
) -> None:
    target = target.format(home=box.home, other=box.other)
    link = box.granted / name
    link.symlink_to(target)
    assert os.path.lexists(os.path.join(link.parent, target))  # it exists on the host
    assert tool_error(box.read(link)) == f"read_file: {link}: no such file"


def test_a_symlink_to_a_folder_outside_shows_none_of_its_files(box: Box) -> None:
    link = box.granted / "to-other-folder"
    link.symlink_to(box.other)
    path = link / "secret.txt"
    assert path.read_text() == "OTHER FOLDER SECRET\n"  # on the host, through the link
    assert tool_error(box.read(path)) == f"read_file: {path}: no such file"


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_a_granted_path_that_a_shell_swapped_for_a_symlink_binds_nothing_it_points_to(
    box: Box, tool: str
) -> None:
    victim = box.other / f"victim-{tool}.txt"
    victim.write_text("UNTOUCHED\n")
    swapped = box.granted / f"swapped-{tool}"
    swapped.mkdir()
    tool_owned(swapped)
    grant(box.home, f"narrow-{tool.replace('_', '-')}", tool, swapped)
    # The model's own shell, granted the parent folder, points the narrower grant elsewhere.
    box.shell(f"rm -r {swapped} && ln -s {box.other} {swapped}")
    assert swapped.is_symlink()
    if tool == "read_file":
        outcome = box.read(swapped / victim.name)
    else:
        outcome = box.call("write_file", {"path": str(swapped / victim.name), "content": "x"})
    assert outcome == Failed(
        f"the granted path {swapped} cannot be confined: {swapped} is a symbolic link"
    )
    assert victim.read_text() == "UNTOUCHED\n"


def test_a_grant_of_one_file_binds_that_file_read_only_or_read_write() -> None:
    with box_running() as box:
        files = box.root / "f"
        files.mkdir()
        (files / "a.txt").write_text("A\n")
        tool_owned(files)
        grant(box.home, "one-read", "read_file", files / "a.txt")
        grant(box.home, "one-write", "write_file", files / "a.txt")
        grant(box.home, "new-write", "write_file", files / "new.txt")
        read = box.read(files / "a.txt")
        wrote = box.call("write_file", {"path": str(files / "a.txt"), "content": "B\n"})
        new = box.call("write_file", {"path": str(files / "new.txt"), "content": "C\n"})
        assert isinstance(read, Done) and read.ok and read.output == "A\n"
        assert isinstance(wrote, Done) and wrote.ok
        assert (files / "a.txt").read_text() == "B\n"
        # A file that does not exist yet cannot be bound, and its folder is not granted: the
        # sandbox shows no folder to create it in (docs/sandbox.md).
        assert tool_error(new) == f"write_file: {files}/new.txt: the directory does not exist"
        assert not (files / "new.txt").exists()


# --- shell: the host's files --------------------------------------------------------------


def test_a_shell_cannot_read_the_hosts_files(box: Box) -> None:
    host_passwd = Path("/etc/passwd").read_text()
    assert host_passwd.strip()
    output = box.shell(
        f"cat /etc/passwd; cat {box.home}/secret.txt; cat {box.other}/secret.txt; ls /etc",
        ok=True,
    )
    assert host_passwd.splitlines()[0] not in output
    assert "SECRET" not in output
    assert output.count(NO_SUCH) == 4  # the sandbox has no /etc at all


def test_a_shell_cannot_list_the_hosts_home_or_another_folder_of_the_test(box: Box) -> None:
    home = Path.home()
    # The sandbox binds the Python that runs the toolkit; its folders are all it may show.
    needed = set()
    for bound in (os.path.realpath(sys.base_prefix),):
        if bound.startswith(f"{home}/"):
            needed.add(bound[len(str(home)) + 1 :].split("/")[0])
    shown = box.shell(f"ls -A {home}").splitlines()[:-1]
    assert set(shown) <= needed, shown
    hosts = set(os.listdir(home)) - needed
    assert hosts and not hosts & set(shown)
    assert NO_SUCH in box.shell(f"ls -A {box.other}")
    assert NO_SUCH in box.shell(f"ls -A {box.home}")
    assert box.shell(f"ls -A {box.root}") == "g\n[exit status 0]"


def test_writes_outside_the_granted_folder_never_reach_the_host(box: Box) -> None:
    marker = f"bx-marker-{uuid.uuid4().hex}"
    box.shell(
        f"echo x > /tmp/{marker}; echo x > /{marker}; echo x > /usr/{marker}; "
        f"mkdir -p {box.other} && echo x > {box.other}/{marker}; "
        f"mkdir -p {box.home} && echo x > {box.home}/{marker}; "
        f"echo inside > {box.granted}/{marker}"
    )
    for outside in (Path("/tmp"), Path("/"), Path("/usr"), box.other, box.home):
        assert not (outside / marker).exists(), outside
    assert (box.granted / marker).read_text() == "inside\n"


def test_a_write_inside_the_granted_folder_appears_on_the_host(box: Box) -> None:
    path = box.granted / "written.txt"
    outcome = box.call("write_file", {"path": str(path), "content": "héllo"})
    assert outcome == Done(True, f"wrote 6 bytes to {path}", outcome.label)  # type: ignore[union-attr]
    assert path.read_text() == "héllo"


def test_the_sandbox_sees_its_own_processes_and_no_descriptor_of_the_host(box: Box) -> None:
    output = box.shell(
        "cat /proc/1/cmdline | tr '\\0' ' '; echo; "
        "for fd in /proc/[0-9]*/fd/*; do readlink $fd; done"
    )
    first, *targets = output.splitlines()[:-1]
    assert first.startswith("bwrap [boxmaker ")  # its PID 1 is bwrap (`leftovers.mark`)
    assert str(os.getpid()) not in output.split()
    allowed = ("pipe:", "socket:", "anon_inode:", "/dev/null", "/proc/")
    for target in targets:  # no descriptor of a host folder (the granted one) survived
        assert target.startswith(allowed), target


def test_a_shell_runs_as_the_tool_user_with_no_capability_and_no_namespace_of_its_own(
    box: Box,
) -> None:
    """Never root: the tool user (nobody, as brokerd runs as root here), every capability
    gone, no new privilege for anything it runs, and nested user namespaces off, so nothing
    inside can remount, unshare or rearrange what it sees."""
    output = box.shell(
        "id -u; grep -E '^(Cap|NoNewPrivs)' /proc/self/status; unshare -U true; unshare -m true"
    )
    lines = output.splitlines()
    assert lines[0] == ("65534" if os.getuid() == 0 else str(os.getuid()))
    status = dict(line.split(":\t") for line in lines if line.startswith(("Cap", "NoNew")))
    for held in ("CapPrm", "CapEff", "CapAmb"):
        assert int(status[held], 16) == 0, status
    # A root brokerd's tool user keeps inheritable what bwrap gave the toolkit, no more than
    # its bounding set allows: neither can be regained (the next test).
    assert int(status["CapInh"], 16) & ~int(status["CapBnd"], 16) == 0, status
    assert status["NoNewPrivs"] == "1"
    assert output.count("unshare: unshare failed:") == 2


# CAP_DAC_READ_SEARCH, CAP_SETGID and CAP_SETUID (<linux/capability.h>): three of the four a
# root brokerd's toolkit holds until it becomes the tool user (`sandbox.ROOT_CAPS`; the host
# here may lack the fourth, CAP_SYS_RESOURCE, in its own bounding set).
THREE_CAPS = (1 << 2) | (1 << 6) | (1 << 7)


def _with_file_capabilities(path: Path, *, permitted: int, inheritable: int) -> None:
    """A copy of `cat` at `path` that an exec makes capable, as `setcap …=e` would."""
    shutil.copy("/usr/bin/cat", path)
    # struct vfs_cap_data, revision 2 with the effective bit: the low words of fP and fI.
    xattr = (0x02000000 | 1, permitted, inheritable, 0, 0)
    os.setxattr(path, "security.capability", b"".join(n.to_bytes(4, "little") for n in xattr))


def _capabilities(status: str) -> dict[str, int]:
    found = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    return {name: int(value, 16) for name, value in found.items()}


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="root, setpriv")
def test_no_program_with_file_capabilities_gives_the_shell_one(box: Box) -> None:
    """What the tool user keeps (the inheritable and bounding sets bwrap leaves a root
    brokerd's toolkit) would be regained only by an exec of a file with file capabilities:
    on the host such files do give them to a user in that state; in a shell neither does,
    since every process there has PR_SET_NO_NEW_PRIVS and every mount is nosuid."""
    by_inheritable, by_permitted = box.granted / "cat-i", box.granted / "cat-p"
    as_the_tool_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    as_the_tool_user += ["--inh-caps=+dac_read_search,+setgid,+setuid"]
    try:
        _with_file_capabilities(by_inheritable, permitted=0, inheritable=THREE_CAPS)
        _with_file_capabilities(by_permitted, permitted=THREE_CAPS, inheritable=0)
        for program in (by_inheritable, by_permitted):
            on_the_host = subprocess.run(
                [*as_the_tool_user, program, "/proc/self/status"], capture_output=True, text=True
            )
            assert _capabilities(on_the_host.stdout)["CapPrm"] == THREE_CAPS, on_the_host
            ran = _capabilities(box.shell(f"./{program.name} /proc/self/status"))
            assert (ran["CapPrm"], ran["CapEff"], ran["CapAmb"]) == (0, 0, 0), (program, ran)
    finally:
        by_inheritable.unlink(missing_ok=True)
        by_permitted.unlink(missing_ok=True)


def test_a_missing_working_folder_is_the_tools_error_not_the_sandboxes(box: Box) -> None:
    cwd = box.granted / "not-there"
    outcome = box.call("shell", {"command": "pwd", "cwd": str(cwd)})
    assert tool_error(outcome) == f"shell: {cwd}: no such directory"


def test_a_grant_of_root_shows_the_host_but_keeps_proc_dev_and_tmp_private() -> None:
    marker = Path("/tmp") / f"bx-marker-{uuid.uuid4().hex}"
    marker.write_text("on the host's /tmp\n")
    hostname = Path("/etc/hostname").read_text()
    try:
        with box_running() as box:
            grant(box.home, "root-read", "read_file", Path("/"))
            grant(box.home, "root-shell", "shell", Path("/"))
            read = box.read("/etc/hostname")
            shell = box.call("shell", {"command": f"cat /etc/hostname; cat {marker}", "cwd": "/"})
    finally:
        marker.unlink()
    assert isinstance(read, Done) and read.ok and read.output == hostname
    assert isinstance(shell, Done) and shell.ok
    assert shell.output.startswith(hostname)
    assert f"cat: {marker}: {NO_SUCH}" in shell.output


def test_mode_none_runs_unconfined_and_says_so() -> None:
    with box_running('[sandbox]\nmode = "none"\n') as box:
        output = box.shell("cat /etc/hostname")
        log = box.brokerd.output()
    assert output == Path("/etc/hostname").read_text() + "[exit status 0]"  # the host's own
    assert 'UNSANDBOXED: [sandbox] mode is "none"' in log


# --- shell: the network -------------------------------------------------------------------

PROBE = """
import socket, sys
for family, address in {targets!r}:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(address)
        print("CONNECTED", address)
    except OSError as error:
        print("no", error.errno)
"""


def test_a_shell_has_no_network_interface_but_its_own_loopback(box: Box) -> None:
    lines = box.shell("cat /proc/net/dev").splitlines()[2:-1]
    assert [line.split(":")[0].strip() for line in lines] == ["lo"]


def test_a_shell_cannot_connect_to_the_host_or_beyond(box: Box) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener, abstract:
        listener.bind(("0.0.0.0", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        name = f"\0bx-test-{uuid.uuid4().hex}"
        abstract.bind(name)
        abstract.listen(8)
        host_addresses = [
            address.address
            for addresses in psutil.net_if_addrs().values()
            for address in addresses
            if address.family == socket.AF_INET
        ]
        assert "127.0.0.1" in host_addresses
        inet, unix = int(socket.AF_INET), int(socket.AF_UNIX)
        targets: list[tuple[int, Any]] = [(inet, (a, port)) for a in host_addresses]
        targets += [(inet, ("1.1.1.1", 443)), (unix, name)]
        with socket.create_connection(("127.0.0.1", port)):  # the host itself can
            pass
        listener.accept()[0].close()
        program = PROBE.format(targets=targets)
        output = box.shell(f"{PYTHON} -I -S -c {shlex.quote(program)}")
        assert "CONNECTED" not in output
        assert output.count("no ") == len(targets), output
        ready, _, _ = select.select([listener, abstract], [], [], 0)
        assert ready == []  # nothing reached either listener


# --- limits -------------------------------------------------------------------------------


def sleepers(root: Path) -> list[psutil.Process]:
    """Live `sleep 100` processes started by a shell granted `root` (found by BX_ROOT, which
    only that sandbox's processes carry, even once orphaned)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            ours = process.cmdline() == ["sleep", "100"] and process.status() != "zombie"
            if ours and process.environ().get("BX_ROOT") == str(root):
                found.append(process)
    return found


def call_in_thread(box: Box, command: str) -> tuple[threading.Thread, list[Outcome]]:
    answers: list[Outcome] = []

    def call() -> None:
        answers.append(box.call("shell", {"command": command, "cwd": str(box.granted)}))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, answers


def wait_for(predicate: Any, deadline_s: float) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize(
    "command",
    [
        "sleep 100 & sleep 100",
        "setsid sleep 100 & (sleep 100 &) ; sleep 100",
        "i=0; while [ $i -lt 40 ]; do sleep 100 & i=$((i+1)); done; wait",
    ],
    ids=["child", "escaped-the-group", "many"],
)
def test_a_shell_is_killed_at_its_timeout_with_every_process_it_started(
    tight: Box, command: str
) -> None:
    started = time.monotonic()
    thread, answers = call_in_thread(tight, command)
    running = wait_for(lambda: sleepers(tight.granted), 5)
    assert running, "the sleeps never started"
    for process in running:  # they are the sandbox's, under this brokerd
        assert tight.brokerd.pid in [parent.pid for parent in process.parents()]
    thread.join(10)
    took = time.monotonic() - started
    assert answers == [Done(False, "shell: timed out after 1 s", answers[0].label)]  # type: ignore[union-attr]
    assert took < 5
    assert wait_for(lambda: not sleepers(tight.granted), 2)


def test_what_a_shell_leaves_running_is_killed_when_it_ends_not_waited_for(box: Box) -> None:
    """Orphans that escaped the group and still hold the output: the toolkit, its sandbox's
    PID 2, ends them all with one kill(-1) once the shell has ended (BX_PID_NAMESPACE). The
    call answers at once, and the one that would have written a file half a second later
    (inside the second the toolkit gives the output to end) never does."""
    late = box.granted / "late.txt"
    command = "setsid sh -c 'sleep 0.5; echo late > late.txt' & (sleep 100 &); echo done"
    started = time.monotonic()
    output = box.shell(command)
    assert output == "done\n[exit status 0]"
    assert time.monotonic() - started < 5
    assert wait_for(lambda: not sleepers(box.granted), 2)
    time.sleep(1.5)
    assert not late.exists()


def test_a_read_that_never_ends_is_killed_at_the_file_timeout(tight: Box) -> None:
    """read_file has no timeout of its own: opening a FIFO blocks until the sandbox's wall."""
    fifo = tight.granted / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    outcome = tight.read(fifo)
    assert outcome == Failed("the call timed out after 1 s and was killed")
    assert time.monotonic() - started < 5


def test_a_memory_hog_is_stopped_by_the_memory_limit(box: Box) -> None:
    check_memory_limit(box.shell)


def test_max_processes_binds_since_no_tool_runs_as_root(box: Box) -> None:
    """RLIMIT_NPROC never binds root; tools never run as root, so it binds every sandbox."""
    forks = (
        "import os, signal\nkids = []\nfor _ in range(40):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n"
        "        os.execv('/bin/sleep', ['sleep', '3'])\n    kids.append(pid)\n"
        "print(len(kids))\nfor kid in kids:\n    os.kill(kid, signal.SIGKILL)\n"
    )
    output = box.shell(f"{PYTHON} -I -S -c {shlex.quote(forks)}")
    assert 0 < int(output.splitlines()[0]) < 16, output


def test_a_fork_bomb_ends_within_the_calls_limits_and_brokerd_serves_on(tight: Box) -> None:
    started = time.monotonic()
    outcome = tight.call(
        "shell", {"command": "b() { b | b & }; b", "cwd": str(tight.granted)}, timeout=30
    )
    assert isinstance(outcome, Done | Failed), outcome
    assert time.monotonic() - started < 10
    assert tight.shell("echo still serving") == "still serving\n[exit status 0]"


def bare_sandbox(script: str) -> list[str]:
    """bwrap with the flags and system folders of §8.2 running `/bin/sh -c script`: no
    toolkit, so that what is tested is bwrap and the limits alone."""
    host = sandbox.discover_host("/usr/bin/bwrap", "/bin/sh", "/usr", "/nonexistent")
    argv = bwrap.command(host, bwrap.Confined("shell", Mount.NONE, None))
    argv = argv[: argv.index("--setenv")]
    toolkit = argv.index("/nonexistent")
    del argv[toolkit - 1 : toolkit + 2]  # the toolkit's --ro-bind
    return [*argv, "--chdir", "/", "/bin/sh", "-c", script]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another user")
def test_max_processes_binds_a_sandbox_started_by_a_user_other_than_root() -> None:
    from services.brokerd.sandbox import limits  # what brokerd sets on a shell's sandbox

    def become_nobody_then_limit() -> None:
        os.setgid(65534)
        os.setuid(65534)
        limits.set_on(0, 256, 8)

    script = "i=0; while [ $i -lt 30 ]; do sleep 2 & i=$((i+1)); done; kill $(jobs -p)"
    ran = subprocess.run(
        bare_sandbox(script),
        capture_output=True,
        text=True,
        preexec_fn=become_nobody_then_limit,
        cwd="/",
        timeout=20,
    )
    assert "fork" in ran.stderr.lower(), ran  # dash: "Cannot fork"


def marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries BX_WALL=marker."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.status() != "zombie" and process.environ().get("BX_WALL") == marker:
                found.append(process)
    return found


@pytest.mark.anyio
async def test_the_sandbox_wall_kills_everything_inside_even_without_the_toolkit() -> None:
    """The toolkit kills what its shell started; this is the second wall, in brokerd: at the
    timeout it kills bwrap, and with it every process of the sandbox's PID namespace, those
    that left its session and group included."""
    marker = uuid.uuid4().hex
    argv = bare_sandbox("setsid sleep 100 & (sleep 100 &); sleep 100")
    argv[argv.index("--chdir") : argv.index("--chdir")] = ["--setenv", "BX_WALL", marker]
    seen: list[int] = []
    started = time.monotonic()
    async with anyio.create_task_group() as tasks:

        async def watch() -> None:
            def four() -> list[psutil.Process]:
                found = marked(marker)
                return found if len(found) >= 4 else []

            seen.append(len(await anyio.to_thread.run_sync(lambda: wait_for(four, 1.5))))

        tasks.start_soon(watch)
        finished = await child.run(argv, b"", timeout_s=1.0)
    assert finished.exit is None  # killed at the timeout
    assert time.monotonic() - started < 4
    assert seen and seen[0] >= 4  # sh and its three sleeps were running
    assert wait_for(lambda: not marked(marker), 2)


# --- bwrap missing or failing -------------------------------------------------------------


def every_sandboxed_call(box: Box) -> tuple[list[Outcome], list[str]]:
    """One call of each sandboxed tool (a write and a shell that would each leave a file),
    and what the granted folder holds afterwards."""
    (box.home / "grants" / "fetch.toml").write_text(
        'tool = "http_fetch"\nmode = "allow"\nhost = "test.example"\n'
    )
    (box.granted / "a.txt").write_text("a\n")
    answers = [
        box.read(box.granted / "a.txt"),
        box.call("write_file", {"path": str(box.granted / "written"), "content": "x"}),
        box.call("shell", {"command": "echo x > shelled", "cwd": str(box.granted)}),
        box.call("http_fetch", {"url": "https://test.example/"}),
    ]
    return answers, sorted(os.listdir(box.granted))


def test_without_bwrap_every_sandboxed_call_is_an_error_and_nothing_runs() -> None:
    with box_running(env={"PATH": "/nonexistent"}) as box, running("memoryd", box.home):
        answers, left = every_sandboxed_call(box)
        memory = box.call("memory", {"action": "note", "text": "still works"})
    unavailable = Failed("sandbox unavailable: bwrap not found (install bubblewrap)")
    assert answers == [unavailable] * 4
    assert left == ["a.txt"]
    assert isinstance(memory, Done) and memory.ok, memory


def test_a_bwrap_that_fails_to_start_is_an_error_and_nothing_runs(short_tmp: Path) -> None:
    fake = short_tmp / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\n"
        "exit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    with box_running(env={"PATH": f"{fake}:/usr/bin:/bin"}) as box:
        answers, left = every_sandboxed_call(box)
        log = box.brokerd.output()
    failed = Failed("sandbox unavailable: bwrap could not set up the sandbox (see brokerd's log)")
    assert answers == [failed] * 4
    assert left == ["a.txt"]
    assert "bwrap: Creating new namespace failed: Operation not permitted" in log
