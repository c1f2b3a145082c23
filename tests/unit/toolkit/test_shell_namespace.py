"""`shell` as brokerd's sandbox runs it: the second process of a PID namespace of its own,
sealed by bwrap (no new privileges, no capability). It ends what the command left with one
`kill(-1)` and loads nothing of `_ctypes` (issue 15); run directly it adopts and reaps
instead (test_shell.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.unit.toolkit.conftest import bootstrap

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")


def _run(
    package: Path, folder: Path, command: str, *options: str, timeout_s: str = "60"
) -> tuple[subprocess.CompletedProcess[bytes], str]:
    """The toolkit's shell run as brokerd's unprivileged sandbox runs it (the host read-only
    but `folder`, the bound `package` in sight), `options` given to its interpreter; and the
    mark its processes carry."""
    mark = uuid.uuid4().hex
    argv = [
        "bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--clearenv", "--setenv", "BX_MARK", mark,
        "--setenv", "BX_PID_NAMESPACE", "own", "--setenv", "BX_TIMEOUT_S", timeout_s,
        "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
        "--bind", str(folder), str(folder),
        sys.executable, *options, "-I", "-S", "-c", bootstrap(package), "shell",
    ]  # fmt: skip
    arguments = json.dumps({"command": command, "cwd": str(folder)}).encode()
    return subprocess.run(argv, input=arguments, capture_output=True, timeout=30), mark


def _none_marked(mark: str, within_s: float = 3.0) -> bool:
    """Whether no live process carries `mark` (in its environment), within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for process in psutil.process_iter():
            try:
                if process.environ().get("BX_MARK") == mark and process.status() != "zombie":
                    alive.append(process)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.02)


def test_what_the_command_left_is_killed_at_once_and_libc_is_never_loaded(
    bound_package: Path, tmp_path: Path
) -> None:
    command = "sleep 100 & setsid sleep 100 & (sleep 100 &); echo done"
    started = time.monotonic()
    done, mark = _run(bound_package, tmp_path, command, "-X", "importtime")
    assert (done.returncode, done.stdout) == (0, b"done\n[exit status 0]")
    assert time.monotonic() - started < 5
    lines = done.stderr.decode().splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import")}
    assert "toolkit.shell" in imported
    assert not {"_ctypes", "toolkit.libc"} & imported
    assert _none_marked(mark)


def test_a_command_that_times_out_is_killed_with_all_it_started(
    bound_package: Path, tmp_path: Path
) -> None:
    command = "setsid sleep 100 & (sleep 100 &); sleep 100 & sleep 100"
    done, mark = _run(bound_package, tmp_path, command, timeout_s="0.5")
    assert (done.returncode, done.stdout, done.stderr) == (1, b"shell: timed out after 0.5 s", b"")
    assert _none_marked(mark)
