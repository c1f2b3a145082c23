"""A brokerd that is not root (SPEC §8.2), through the real daemon: started in a user
namespace of its own as uid 1000 with no capability, it takes the unprivileged way — bwrap
makes the sandbox's user namespace itself, brokerd holds the sandbox (`--block-fd`) while it
sets the limits on it (`prlimit`), and every tool runs as brokerd's own user — and a call
still sees and writes nothing but its grant.

When the tests run as root, brokerd's user is root's own uid outside the namespace, with no
capability there: file permissions stop nothing (the folders are its own), and RLIMIT_NPROC,
which never binds the host's root user, is left to test_confinement (a sandbox started by
nobody). Skipped where this machine cannot make the namespaces.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bxcore.wire.messages import Done, ToolRequest, ToolResponse
from tests.support.brokerd import check_memory_limit, short_folder
from tests.support.daemons import Daemon, init_home, running

AS_USER = ("unshare", "--user", "--map-user=1000", "--map-group=1000")
#: How brokerd is started: in a namespace of its own when the tests are root; as it is else.
PREFIX = AS_USER if os.geteuid() == 0 else ()
UID = "1000" if os.geteuid() == 0 else str(os.geteuid())


def _cannot() -> str | None:
    """Why an unprivileged brokerd cannot be tried here (None: it can)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    probe = [*PREFIX, "bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"]
    try:
        ran = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except OSError as error:
        return f"{probe[0]}: {error}"
    if ran.returncode != 0:
        return f"no user namespace for an unprivileged bwrap: {ran.stderr.strip()[:200]}"
    return None


class Box:
    """brokerd as another user; read_file, write_file and shell allowed in `granted`."""

    def __init__(self, root: Path, brokerd: Daemon) -> None:
        self.root, self.brokerd = root, brokerd
        self.granted, self.other = root / "g", root / "o"
        self._ids = itertools.count()

    def call(self, tool: str, arguments: dict[str, str]) -> Done:
        n = next(self._ids)
        request = ToolRequest(f"r{n}", f"s{n}", f"c{n}", tool, json.dumps(arguments))
        answer = self.brokerd.ask(request, timeout=30.0)
        assert isinstance(answer, ToolResponse) and isinstance(answer.outcome, Done), answer
        return answer.outcome

    def shell(self, command: str) -> str:
        return self.call("shell", {"command": command, "cwd": str(self.granted)}).output


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    why = _cannot()
    if why is not None:
        pytest.skip(why)
    with short_folder() as root:
        home = init_home(root / "h", "[sandbox]\nmemory_mb = 256\n")
        for starter in (home / "grants").glob("workspace-*.toml"):
            starter.unlink()
        for tool in ("read_file", "write_file", "shell"):
            grant = f'tool = "{tool}"\nmode = "allow"\npath = "{root / "g"}"\nclass = "private"\n'
            (home / "grants" / f"test-{tool.replace('_', '-')}.toml").write_text(grant)
        (root / "g").mkdir()
        (root / "g" / "note.md").write_text("a note\n")
        (root / "o").mkdir()
        (root / "o" / "secret.txt").write_text("OTHER FOLDER SECRET\n")
        with running("brokerd", home, prefix=PREFIX) as brokerd:
            yield Box(root, brokerd)


def test_brokerd_runs_as_another_user_with_no_capability(box: Box) -> None:
    status = Path(f"/proc/{box.brokerd.pid}/status").read_text()
    fields = dict(line.split(":\t") for line in status.splitlines() if ":\t" in line)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0, fields
    assert "runs as root" not in box.brokerd.output()


def test_a_shell_runs_as_brokerds_user_with_no_capability_and_no_namespace_of_its_own(
    box: Box,
) -> None:
    output = box.shell(
        "id -u; grep -E '^(Cap|NoNewPrivs)' /proc/self/status; unshare -U true; unshare -m true"
    )
    lines = output.splitlines()
    assert lines[0] == UID, output
    status = dict(line.split(":\t") for line in lines if line.startswith(("Cap", "NoNew")))
    for held in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[held], 16) == 0, status
    assert status["NoNewPrivs"] == "1"
    assert output.count("unshare: unshare failed:") == 2


def test_a_call_reads_its_grant_and_sees_nothing_else_of_the_host(box: Box) -> None:
    read = box.call("read_file", {"path": str(box.granted / "note.md")})
    assert (read.ok, read.output) == (True, "a note\n")
    output = box.shell(f"cat note.md; cat {box.other / 'secret.txt'}; ls {box.root / 'h'}")
    assert output.startswith("a note\n"), output
    assert "SECRET" not in output and "config.toml" not in output, output
    assert output.count("No such file or directory") == 2, output


@pytest.mark.parametrize(
    "name, target",
    [
        ("to-other", "o/secret.txt"),
        ("to-config", "h/config.toml"),
        ("to-ledger", "h/audit/ledger.jsonl"),
    ],
)
def test_a_link_in_the_grant_to_the_boxs_own_files_reads_nothing(
    box: Box, name: str, target: str
) -> None:
    """brokerd's user owns its home here, so only the sandbox stands between a tool and it."""
    link = box.granted / name
    link.symlink_to(box.root / target)
    assert link.read_bytes()  # on the host, through the link
    read = box.call("read_file", {"path": str(link)})
    assert (read.ok, read.output) == (False, f"read_file: {link}: no such file")
    assert "No such file or directory" in box.shell(f"cat {name}")


def test_writes_outside_the_grant_never_reach_the_host(box: Box) -> None:
    name = f"bx-escape-{uuid.uuid4().hex}"
    escapes = [Path("/tmp") / name, box.other / name, box.root / name]
    box.shell("; ".join(f"echo x > {path}" for path in escapes) + f"; echo x > {name}")
    for path in escapes:
        assert not path.exists(), path
    assert (box.granted / name).read_text() == "x\n"


def test_a_memory_hog_is_stopped_by_the_limits_brokerd_set(box: Box) -> None:
    check_memory_limit(box.shell)


def test_what_a_shell_leaves_running_is_ended_with_it(box: Box) -> None:
    marker = f"100.{uuid.uuid4().int % 10**6}"
    assert box.shell(f"(sleep {marker} &); echo done") == "done\n[exit status 0]"

    def left() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.cmdline() == ["sleep", marker] and process.status() != "zombie":
                    found.append(process)
        return found

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left()
