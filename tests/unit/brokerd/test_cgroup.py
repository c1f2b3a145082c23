"""Where brokerd may make its calls' cgroups (`services.brokerd.sandbox.cgroup.discover`), read from
`/proc/self/cgroup` and a cgroup tree: here a folder of the test's that stands for one, so
that what is decided and written can be seen. The real thing is tried by
tests/service/test_hostile_model.py."""

from __future__ import annotations

import os
from pathlib import Path

from pytest import MonkeyPatch

from services.brokerd.sandbox import cgroup
from services.brokerd.sandbox.cgroup import Cgroups, Unavailable, discover

HYBRID = "12:pids:/a\n4:memory:/process_api/x\n1:name=systemd:/\n0::/\n"
UNIFIED = "0::/system.slice/boxmaker-brokerd.service\n"


def test_proc_self_cgroup_is_read_per_controller() -> None:
    assert cgroup._places(HYBRID) == {
        "pids": "/a",
        "memory": "/process_api/x",
        "name=systemd": "/",
        "": "/",
    }
    assert cgroup._places("bad line\n3:cpu,cpuacct:/c\n") == {"cpu": "/c", "cpuacct": "/c"}


def test_cgroup_v1s_memory_hierarchy_is_used(tmp_path: Path) -> None:
    (tmp_path / "memory" / "process_api" / "x").mkdir(parents=True)
    found = discover(64, proc=HYBRID, root=tmp_path)
    assert isinstance(found, Cgroups) and found.version == 1
    assert found.memory == tmp_path / "memory/process_api/x/boxmaker-tools"
    assert found.memory_bytes == 64 * 1024 * 1024


def test_where_no_cgroup_can_be_made_it_says_why(tmp_path: Path) -> None:
    missing = discover(64, proc=HYBRID, root=tmp_path / "nothing")
    assert isinstance(missing, Unavailable) and "cannot make a cgroup" in missing.why
    none = discover(64, proc="1:name=systemd:/\n", root=tmp_path)
    assert none == Unavailable("no memory controller is mounted")


def test_a_folder_another_user_left_is_not_used(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """A root brokerd made `boxmaker-tools`; this one, not root, may not write in it (here
    `os.access` says so: the tests run as root, whom the mode bits do not stop)."""
    (tmp_path / "memory" / "process_api" / "x" / "boxmaker-tools").mkdir(parents=True)
    monkeypatch.setattr(cgroup.os, "access", lambda path, mode: False)
    found = discover(64, proc=HYBRID, root=tmp_path)
    assert isinstance(found, Unavailable)
    assert found.why == (
        f"cannot make a cgroup ({tmp_path}/memory/process_api/x/boxmaker-tools): Permission denied"
    )


def test_cgroup_v2_needs_the_memory_controller_given_to_brokerds_own_cgroup(
    tmp_path: Path,
) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    own = tmp_path / "system.slice" / "boxmaker-brokerd.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io\n")
    found = discover(64, proc=UNIFIED, root=tmp_path)
    assert isinstance(found, Unavailable) and "memory controller is not available" in found.why


def test_stale_call_cgroups_of_brokerds_gone_are_removed_and_others_kept(tmp_path: Path) -> None:
    folder = tmp_path / "memory" / "boxmaker-tools"
    gone, alive = folder / "b999999999-call-1", folder / f"b{os.getpid()}-call-3"
    gone.mkdir(parents=True)
    alive.mkdir()
    found = discover(64, proc="4:memory:/\n", root=tmp_path)
    assert isinstance(found, Cgroups)
    assert not gone.exists() and alive.exists()


def test_in_cgroup_v1_the_toolkit_joins_its_cgroup_itself_through_its_tasks_file(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "boxmaker-tools"
    slot = cgroup.Slot("b1-call-1", (folder / "b1-call-1",))
    assert Cgroups(1, folder, 64).joinable(slot) == folder / "b1-call-1" / "tasks"
    assert Cgroups(2, folder, 64).joinable(slot) is None  # v2: brokerd moves the sandbox
