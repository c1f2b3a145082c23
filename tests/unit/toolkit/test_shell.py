"""`shell`: status, combined output, the folder it runs in, the cut, the timeout (SPEC §8.3)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

MIB = 1024 * 1024


def _shell(toolkit, command: str, cwd: Path | str | None = None, **env: str):
    arguments = {"command": command} if cwd is None else {"command": command, "cwd": str(cwd)}
    return toolkit("shell", arguments, env=env)


def _alive(pid: int) -> bool:
    """Whether `pid` is still there at all: running, or a zombie nobody reaped."""
    return psutil.pid_exists(pid)


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


def _none_alive(pids: list[int], within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_shell_shows_combined_output_then_the_exit_status(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "echo out; echo err >&2; echo out2; exit 3", tmp_path)
    assert (ran.exit, ran.stdout, ran.stderr) == (0, "out\nerr\nout2\n[exit status 3]", "")


def test_shell_puts_the_status_on_a_line_of_its_own(toolkit, tmp_path) -> None:
    assert _shell(toolkit, "printf abc", tmp_path).stdout == "abc\n[exit status 0]"


def test_shell_with_no_output_shows_only_the_status(toolkit, tmp_path) -> None:
    assert _shell(toolkit, "true", tmp_path).stdout == "[exit status 0]"


def test_shell_reports_a_shell_killed_by_a_signal(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "echo before; kill -9 $$", tmp_path)
    assert (ran.exit, ran.stdout) == (0, "before\n[killed by signal 9 (SIGKILL)]")


def test_shell_runs_in_cwd(toolkit, tmp_path) -> None:
    (tmp_path / "here.txt").write_text("x")
    assert _shell(toolkit, "pwd; ls", tmp_path).stdout == f"{tmp_path}\nhere.txt\n[exit status 0]"


def test_shell_without_cwd_runs_in_the_granted_root(toolkit, tmp_path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert _shell(toolkit, "pwd", BX_ROOT=str(root)).stdout == f"{root}\n[exit status 0]"


def test_shell_without_cwd_or_granted_root_runs_in_slash(toolkit) -> None:
    assert _shell(toolkit, "pwd").stdout == "/\n[exit status 0]"


def test_shell_in_a_missing_folder_could_not_start(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "echo never", tmp_path / "missing")
    assert (ran.exit, ran.stdout, ran.stderr) == (
        1,
        f"shell: {tmp_path}/missing: no such directory",
        "",
    )


def test_shell_in_a_regular_file_could_not_start(toolkit, tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    ran = _shell(toolkit, "echo never", tmp_path / "file")
    assert (ran.exit, ran.stdout) == (1, f"shell: {tmp_path}/file: not a directory")


def test_shell_with_a_missing_granted_root_could_not_start(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "echo never", BX_ROOT=str(tmp_path / "gone"))
    assert (ran.exit, ran.stdout) == (1, f"shell: {tmp_path}/gone: no such directory")


def test_shell_output_over_1_mib_is_cut_with_a_note(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "head -c 1100000 /dev/zero | tr '\\0' a; echo done >&2", tmp_path)
    note = "[output cut at 1048576 bytes; the command wrote at least 1100005 bytes]"
    assert ran.exit == 0
    assert ran.stdout == "a" * MIB + "\n" + note + "\n[exit status 0]"


def test_shell_output_of_exactly_1_mib_is_not_cut(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, f"head -c {MIB} /dev/zero | tr '\\0' b", tmp_path)
    assert ran.stdout == "b" * MIB + "\n[exit status 0]"


def test_shell_output_that_is_not_utf8_is_shown_with_replacement(toolkit, tmp_path) -> None:
    ran = _shell(toolkit, "printf 'caf\\351 ok\\n'", tmp_path)
    assert ran.stdout == "caf\ufffd ok\n[exit status 0]"


def test_shell_gives_the_command_an_empty_standard_input(toolkit, tmp_path) -> None:
    assert _shell(toolkit, "cat; echo end", tmp_path).stdout == "end\n[exit status 0]"


def test_shell_that_times_out_kills_and_reaps_the_command_and_all_it_started(toolkit, tmp_path):
    pids = tmp_path / "pids"
    command = (
        f"echo $$ >> {pids}; "
        f"sleep 100 & echo $! >> {pids}; "
        f"(sleep 100 & echo $! >> {pids}; wait) & echo $! >> {pids}; "
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 100' & "  # leaves the process group
        f"until [ $(wc -l < {pids}) -ge 5 ]; do sleep 0.01; done; "
        "echo started; wait"
    )
    started = time.monotonic()
    ran = _shell(toolkit, command, tmp_path, BX_TIMEOUT_S="0.5")
    assert (ran.exit, ran.stdout, ran.stderr) == (1, "shell: timed out after 0.5 s", "")
    assert time.monotonic() - started < 5
    assert len(_pids(pids)) == 5
    assert _none_alive(_pids(pids))


def test_shell_kills_what_the_command_left_running_and_does_not_wait_for_it(toolkit, tmp_path):
    pids = tmp_path / "pids"
    started = time.monotonic()
    command = (
        f"sleep 100 & echo $! >> {pids}; "
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 100' & "  # leaves the process group
        f"until [ $(wc -l < {pids}) -ge 2 ]; do sleep 0.01; done; "
        "echo done"
    )
    ran = _shell(toolkit, command, tmp_path)
    assert (ran.exit, ran.stdout) == (0, "done\n[exit status 0]")
    assert time.monotonic() - started < 5
    assert len(_pids(pids)) == 2
    assert _none_alive(_pids(pids))


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf", ""])
def test_a_timeout_that_is_not_a_positive_number_is_misuse(toolkit, tmp_path, value) -> None:
    ran = _shell(toolkit, "true", tmp_path, BX_TIMEOUT_S=value)
    expected = f'toolkit: BX_TIMEOUT_S is not a positive number: "{value}"\n'
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", expected)


# --- the call's memory cgroup, joined before the command starts (BX_CGROUP_FD) ----------


def _joining(toolkit_command, tmp_path: Path, target: Path):
    """The toolkit's shell given `target` as its cgroup's `tasks` file (here a plain file of
    the test's, which records what was written to it): the exit, the output, the error, what
    the toolkit wrote there, and whether the command ran."""
    ran = tmp_path / "ran"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    held = f"test -e /proc/self/fd/{fd} && echo held || echo ran"  # closed before it starts?
    arguments = tmp_path / "arguments.json"
    arguments.write_text(json.dumps({"command": f": > {ran}; {held}", "cwd": str(tmp_path)}))
    try:
        with arguments.open("rb") as stdin:
            done = subprocess.run(
                [*toolkit_command, "shell"],
                stdin=stdin,
                capture_output=True,
                env={"BX_CGROUP_FD": str(fd)},
                pass_fds=(fd,),
                timeout=20,
            )
    finally:
        os.close(fd)
    written = target.read_bytes() if target.is_file() else None
    return done.returncode, done.stdout.decode(), done.stderr.decode(), written, ran.exists()


def test_a_shell_joins_its_cgroup_itself_then_runs_the_command_without_its_descriptor(
    toolkit_command, tmp_path
) -> None:
    code, out, err, written, ran = _joining(toolkit_command, tmp_path, tmp_path / "tasks")
    assert (code, out, err) == (0, "ran\n[exit status 0]", "")
    assert written == b"0" and ran  # `0`: the writer itself


def test_a_shell_that_cannot_join_its_cgroup_runs_nothing(toolkit_command, tmp_path) -> None:
    full = tmp_path / "full"
    full.symlink_to("/dev/full")  # every write fails: ENOSPC
    code, out, err, _, ran = _joining(toolkit_command, tmp_path, full)
    assert (code, out) == (2, "")
    assert err == "toolkit: shell: cannot join the call's memory cgroup: No space left on device\n"
    assert not ran


@pytest.mark.parametrize("value", ["", "x", "2", "-4"])
def test_a_cgroup_descriptor_that_is_not_one_is_misuse(toolkit, tmp_path, value) -> None:
    ran = _shell(toolkit, "true", tmp_path, BX_CGROUP_FD=value)
    expected = f'toolkit: BX_CGROUP_FD is not a descriptor: "{value}"\n'
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", expected)
