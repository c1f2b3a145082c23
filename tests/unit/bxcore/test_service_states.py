"""`{run}/services.json` (issue 10): the supervisor's word on each service's state, written
whole, read again only when it changed, and ignored once its supervisor is gone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bxcore import service_states
from bxcore.service_states import Entry, Snapshot, StatesFile

ME = os.getpid()  # a supervisor that is alive


def snapshot(supervisor: int = ME, **states: str) -> Snapshot:
    return Snapshot(supervisor, {name: Entry(state, "exit 78") for name, state in states.items()})


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_snapshot_round_trips_through_the_file(tmp_path: Path) -> None:
    written = snapshot(memoryd="failed", brokerd="running")
    service_states.write(tmp_path, written)
    assert service_states.parse(service_states.path_in(tmp_path).read_bytes()) == written


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"supervisor": 0, "services": {}}',
        b'{"supervisor": true, "services": {}}',
        b'{"supervisor": 5, "services": {"memoryd": {"state": 3}}}',
        b'{"supervisor": 5, "services": {"memoryd": "failed"}}',
        b'{"supervisor": 5}',
    ],
)
def test_what_is_not_a_snapshot_is_none(data: bytes) -> None:
    assert service_states.parse(data) is None


@pytest.mark.parametrize(
    ("state", "down"),
    [
        ("failed", True),
        ("stopped", True),
        ("running", False),
        ("starting", False),
        ("backoff", False),
        ("stopping", False),
    ],
)
def test_only_failed_and_stopped_are_down(tmp_path: Path, state: str, down: bool) -> None:
    service_states.write(tmp_path, snapshot(memoryd=state))
    found = StatesFile(service_states.path_in(tmp_path)).down("memoryd")
    assert (found is not None) is down
    if down:
        assert found == Entry(state, "exit 78")


def test_no_file_an_unknown_service_or_a_dead_supervisor_says_nothing(tmp_path: Path) -> None:
    states = StatesFile(service_states.path_in(tmp_path))
    assert states.down("memoryd") is None
    service_states.write(tmp_path, snapshot(brokerd="failed"))
    assert states.down("memoryd") is None
    service_states.write(tmp_path, snapshot(dead_pid(), memoryd="failed"))
    assert states.down("memoryd") is None  # a killed supervisor's file: stale


def test_the_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    states = StatesFile(service_states.path_in(tmp_path))
    service_states.write(tmp_path, snapshot(memoryd="failed"))
    assert states.down("memoryd") is not None
    service_states.write(tmp_path, snapshot(memoryd="running"))  # a new inode: read again
    assert states.down("memoryd") is None
    service_states.path_in(tmp_path).unlink()
    assert states.down("memoryd") is None


def test_a_supervisor_removes_only_its_own_file(tmp_path: Path) -> None:
    service_states.write(tmp_path, snapshot(ME + 1, memoryd="failed"))
    service_states.remove(tmp_path, ME)
    assert service_states.path_in(tmp_path).exists()
    service_states.remove(tmp_path, ME + 1)
    assert not service_states.path_in(tmp_path).exists()
