"""Killing a tree whole (issue 10): what left its parent's group and session is found by
parentage and killed with it; a zombie counts as ended; a subreaper adopts orphans. Real
processes (sh, sleep), each killed by the test whatever happens."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from bxcore import process_tree

# sh starts a sleep in its group and one in a session of its own, says their pids, and waits.
TREE = "sleep 300 & echo $!; setsid sleep 300 & echo $!; wait"


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    shell = subprocess.Popen(["sh", "-c", TREE], stdout=subprocess.PIPE, start_new_session=True)
    assert shell.stdout is not None
    pids = [int(shell.stdout.readline()), int(shell.stdout.readline())]
    deadline = time.monotonic() + 5
    while os.getsid(pids[1]) == os.getsid(shell.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # `setsid` has not run yet
    try:
        yield shell, pids
    finally:
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        shell.kill()
        shell.wait()


def test_descendants_include_what_left_for_a_session_of_its_own(
    tree: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    shell, pids = tree
    found = {p.pid for p in process_tree.descendants(shell.pid)}
    assert set(pids) <= found
    assert os.getsid(pids[1]) != os.getsid(shell.pid)  # the group kill would miss this one


def test_kill_tree_ends_the_group_and_what_escaped_it(
    tree: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    shell, pids = tree
    killed = process_tree.kill_tree(shell.pid)
    assert shell.wait(5) == -9
    assert process_tree.wait_gone(killed, 5.0) == []
    assert all(process_tree.gone(psutil.Process(pid)) for pid in pids if psutil.pid_exists(pid))


def test_a_zombie_counts_as_gone() -> None:
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
    try:
        process = psutil.Process(child.pid)
        assert process.status() == psutil.STATUS_ZOMBIE
        assert process_tree.gone(process) and process_tree.alive([process]) == []
    finally:
        child.wait()


def test_nothing_is_found_under_a_pid_that_is_gone() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert process_tree.descendants(child.pid) == [] and process_tree.kill_tree(child.pid) == []


SUBREAPER = """
import os, subprocess, sys
from bxcore import process_tree
assert process_tree.become_subreaper()
# a child that starts a grandchild and exits: the orphan comes to us, not to init
subprocess.run(["sh", "-c", "sleep 300 & echo $!"], stdout=open("pid", "w"), check=True)
orphan = int(open("pid").read())
adopted = [p.pid for p in process_tree.children(os.getpid())]
os.kill(orphan, 9)
while not process_tree.reap(orphan):
    pass
print(orphan in adopted)
"""


def test_a_subreaper_adopts_an_orphan_and_can_reap_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SUBREAPER], capture_output=True, text=True, cwd=str(tmp_path),
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
