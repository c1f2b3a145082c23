"""A cut ledger through the real box (issue 10, I8): brokerd and gatewayd under `bxctl up`,
the ledger cut to half while the box is down. Nothing runs again, `status` and `verify` say
why, until the owner runs `bxctl audit accept`; then brokerd writes again and gatewayd's
witness follows the ledger's new head.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.home import witness
from bxcore.home.layout import Home
from tests.support.box import box_home, bxctl, up, wait_until
from tests.support.brokerd import args, call_raw, denial, ledger_records
from tests.support.daemons import init_home

CALLS = 10


@pytest.fixture
def home(short_tmp: Path) -> Iterator[Path]:
    with box_home(short_tmp) as home:
        yield home


def witnessed(home: Path, seq: int) -> bool:
    seen = witness.read(Home(home).witness("gatewayd"))
    return seen is not None and seen.seq == seq


def test_a_cut_ledger_waits_for_the_owner_and_accept_makes_the_box_write_again(
    home: Path,
) -> None:
    init_home(home)
    folder = home / "workspace"
    writes = {f"c{n}": args(path=f"{folder}/f{n}", content="x") for n in range(CALLS)}
    assert up(home, "brokerd", "gatewayd").returncode == 0
    for call_id, arguments in writes.items():
        assert b'"outcome":"done"' in call_raw(home, "cut", call_id, "write_file", arguments)
    head = ledger_records(home)[-1]["seq"]
    wait_until(lambda: witnessed(home, head), 10, "gatewayd's witness at the head")
    assert bxctl(home, "down").returncode == 0
    ledger = home / "audit" / "ledger.jsonl"
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[: len(lines) // 2]))
    for written in folder.glob("f*"):
        written.unlink()

    cut = up(home, "brokerd", "gatewayd")  # up, and says the ledger must be looked at
    assert cut.returncode == 1
    assert cut.stderr.count("\n") == 1 and "ledger broken: the ledger ends at byte" in cut.stderr
    assert "`bxctl audit accept`" in cut.stderr and cut.stderr.endswith("(the box is up)\n")
    for call_id, arguments in writes.items():
        answer = call_raw(home, "cut", call_id, "write_file", arguments, rid="again")
        assert answer == denial("audit_unavailable", rid="again")
    assert not list(folder.glob("f*"))
    status = bxctl(home, "status")
    assert status.returncode == 3
    assert "ledger broken: the ledger ends at byte" in status.stdout
    assert bxctl(home, "audit", "verify").returncode == 1

    asked = bxctl(home, "audit", "accept")  # not a terminal, no --yes: nothing changes
    assert asked.returncode == 1
    assert "run `bxctl audit accept --yes`" in asked.stderr
    assert bxctl(home, "status").returncode == 3

    accepted = bxctl(home, "audit", "accept", "--yes")
    assert accepted.returncode == 0, accepted.stderr
    assert "brokerd says the ledger is broken: the ledger ends at byte" in accepted.stdout
    assert "accepted: " in accepted.stdout and "may run again" in accepted.stdout
    assert bxctl(home, "status").returncode == 0
    assert bxctl(home, "audit", "verify").returncode == 0
    assert bxctl(home, "audit", "accept", "--yes").returncode == 0  # again: nothing lost

    kept = {r["call"] for r in ledger_records(home) if r["kind"] == "decision"}
    fresh = next(call_id for call_id in writes if call_id not in kept)
    answer = call_raw(home, "cut", fresh, "write_file", writes[fresh], rid="after")
    assert b'"outcome":"done"' in answer  # lost with the cut: the owner accepted it runs anew
    head = ledger_records(home)[-1]["seq"]
    wait_until(lambda: witnessed(home, head), 10, "gatewayd's witness at the new head")
    lost = [r for r in ledger_records(home) if r["kind"] == "recovered"]
    assert len(lost) == 1 and "accepted the ledger as it is" in json.dumps(lost[0])
