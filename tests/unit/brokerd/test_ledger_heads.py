"""A ledger that runs for a year (issue 10): a start reads only what the index does not hold;
a ledger cut or rolled back before the head brokerd confirmed, or the head the owner saw, is
broken and lets no call run again until the owner accepts it as it is."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bench.ledger_builder import build
from bxcore.home import witness
from services.brokerd.core.records import Record, line_hash, parse_line
from services.brokerd.ledger.file import (
    HEAD_FILE,
    INDEX_FILE,
    Ledger,
    LedgerState,
    LedgerUnavailable,
)
from services.brokerd.ledger.index import Index
from services.brokerd.ledger.scan import scan
from tests.unit.brokerd.test_ledger import (
    Clock,
    decision,
    fill,
    forget_what_brokerd_derived,
    lines_of,
    records_of,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "audit" / "ledger.jsonl"


def open_with(path: Path, witnesses: list[Path] | None = None) -> Ledger:
    return Ledger.open(path, now_ms=Clock(), witness_paths=witnesses or [])


def test_brokerd_keeps_the_head_it_confirmed_and_the_index_says_how_far_it_holds(
    path: Path,
) -> None:
    fill(path, 5)
    head = json.loads((path.parent / HEAD_FILE).read_text())
    last = lines_of(path)[-1]
    assert head == {"seq": 5, "hash": line_hash(last), "size": path.stat().st_size}
    index = Index(path.parent / INDEX_FILE)
    assert index.covered.head.seq == 5 and index.covered.size == path.stat().st_size
    assert index.lookup("chat-1", "c3") is not None
    index.close()


@pytest.mark.parametrize("keep", [0.5, 0.0, 0.99])
def test_a_ledger_cut_before_the_confirmed_head_is_broken_and_refuses_every_call(
    path: Path, keep: float
) -> None:
    fill(path, 20)
    whole = path.read_bytes()
    cut = whole[: whole.rfind(b"\n", 0, int(len(whole) * keep)) + 1]
    path.write_bytes(cut)
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.BROKEN and ledger.cut_short
        assert ledger.problem is not None
        assert "before the head brokerd confirmed (seq 20" in ledger.problem
        with pytest.raises(LedgerUnavailable, match="broken"):
            ledger.append(*decision("c1"))  # a call sent again is never decided again
    assert path.read_bytes() == cut  # nothing cut, nothing added: it is the evidence


def test_a_ledger_rolled_back_to_an_older_copy_is_broken(path: Path, tmp_path: Path) -> None:
    fill(path, 3)
    older = tmp_path / "older.jsonl"
    shutil.copy(path, older)
    with open_with(path) as ledger:
        ledger.append_batch([decision(f"later-{i}") for i in range(5)])
    shutil.copy(older, path)  # the ledger alone goes back
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.BROKEN and ledger.cut_short


def test_a_ledger_rewritten_at_its_confirmed_head_is_broken(path: Path) -> None:
    fill(path, 3)
    lines = lines_of(path)
    lines[-1] = lines[-1].replace(b'"c3"', b'"c9"')
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.BROKEN
        assert ledger.problem == (
            "the ledger no longer holds the head brokerd confirmed (seq 3): rewritten"
        )


def test_the_owner_accepts_a_cut_ledger_and_brokerd_says_what_was_lost(path: Path) -> None:
    fill(path, 6)
    lines = lines_of(path)
    path.write_bytes(b"".join(line + b"\n" for line in lines[:4]))
    with open_with(path) as ledger:
        said = ledger.accept()
        assert ledger.state is LedgerState.OK
        assert "as it is, at seq 4" in said and "may run again" in said
        assert "before the head brokerd confirmed (seq 6" in said
        assert ledger.lookup("chat-1", "c3") is not None
        assert ledger.lookup("chat-1", "c5") is None  # lost: it would be decided anew
        ledger.append(*decision("c5"))
    kinds = [record["kind"] for record in records_of(path)]
    assert kinds == ["decision"] * 4 + ["recovered", "decision"]
    with open_with(path) as again:
        assert again.state is LedgerState.OK and again.head.seq == 6


def test_nothing_but_a_cut_ledger_can_be_accepted(path: Path) -> None:
    fill(path, 2)
    with open_with(path) as ledger, pytest.raises(ValueError, match="nothing to accept"):
        ledger.accept()


def test_a_ledger_short_of_the_head_the_owner_saw_is_broken(path: Path) -> None:
    fill(path, 5)
    lines = lines_of(path)
    seen = path.parent.parent / "witness" / "gatewayd.json"
    witness.keep(seen, witness.Seen(5, line_hash(lines[-1])))
    path.write_bytes(b"".join(line + b"\n" for line in lines[:3]))
    forget_what_brokerd_derived(path)  # brokerd's own head is gone too
    with open_with(path, [seen]) as ledger:
        assert ledger.state is LedgerState.BROKEN and ledger.cut_short
        assert ledger.problem == (
            "the ledger ends at seq 3, before the head the owner saw (seq 5): cut or rewritten"
        )


def test_a_witness_that_cannot_be_read_is_a_broken_ledger_until_the_owner_accepts(
    path: Path,
) -> None:
    fill(path, 3)
    seen = path.parent.parent / "witness" / "bxctl.json"
    seen.parent.mkdir()
    seen.write_text("{not a head")
    with open_with(path, [seen]) as ledger:
        assert ledger.state is LedgerState.BROKEN and ledger.cut_short
        assert ledger.problem == f"the witness {seen} is damaged: it holds no ledger head"
        with pytest.raises(LedgerUnavailable):
            ledger.append(*decision("c9"))
        said = ledger.accept()
        assert ledger.state is LedgerState.OK and "at seq 3" in said


def test_a_lost_index_is_rebuilt_from_the_whole_ledger(path: Path) -> None:
    fill(path, 8)
    forget_what_brokerd_derived(path)
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.OK and ledger.head.seq == 8
        found = ledger.lookup("chat-1", "c7")
        assert found is not None and found.decision["call"] == "c7"


def test_the_fast_rebuild_indexes_exactly_what_the_full_walk_does(path: Path) -> None:
    path.parent.mkdir(parents=True)
    build(path, 1_001)  # calls allowed and run, every 50th asked and approved
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.OK and ledger.read_at_start == 1_001
    fast = sqlite3.connect(path.with_name(INDEX_FILE))
    full = Index(None)
    with open(path, "rb") as f:
        scan(f, full.add)
    for table in ("calls", "approvals"):
        rows = f"SELECT * FROM {table} ORDER BY 1, 2"
        assert fast.execute(rows).fetchall() == full._db.execute(rows).fetchall()
    assert fast.execute("SELECT count(*) FROM approvals").fetchone() == (10,)
    fast.close()


def test_a_batch_of_rows_is_indexed_exactly_as_its_records_one_by_one(path: Path) -> None:
    """`add_all`, what brokerd does after each group commit, inserts runs of decisions with
    one statement: the index it makes is `add`'s, duplicates and approvals included."""
    path.parent.mkdir(parents=True)
    build(path, 301)  # calls allowed and run, every 50th asked and approved
    added: list[tuple[Record, int]] = []
    offset = 0
    for line in path.read_bytes().splitlines(keepends=True):
        record = parse_line(line.rstrip(b"\n"))
        assert not isinstance(record, str)
        added.append((record, offset))
        offset += len(line)
    first = [(record, offset) for record, offset in added if record["kind"] == "decision"][:20]
    added += [({**record, "outcome": "denied"}, offset + 1) for record, offset in first]
    one, many = Index(None), Index(None)
    for record, offset in added:
        one.add(record, offset)
    for start in range(0, len(added), 16):
        many.add_all(added[start : start + 16])
    for table in ("calls", "approvals", "jobs"):
        rows = f"SELECT * FROM {table} ORDER BY 1, 2"
        assert many._db.execute(rows).fetchall() == one._db.execute(rows).fetchall()
    (approvals,) = one._db.execute("SELECT count(*) FROM approvals").fetchone()
    assert approvals > 0


def test_an_index_of_another_ledger_is_read_again_when_the_head_file_vouches_for_the_ledger(
    path: Path, tmp_path: Path
) -> None:
    fill(path, 4)
    other = tmp_path / "other" / "audit" / "ledger.jsonl"
    fill(other, 9)
    shutil.copy(other.parent / INDEX_FILE, path.parent / INDEX_FILE)  # 9 calls of another
    for suffix in ("-wal", "-shm"):
        (path.parent / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.OK and ledger.head.seq == 4
        assert ledger.lookup("chat-1", "c9") is None and ledger.lookup("chat-1", "c4") is not None


def test_a_damaged_head_file_is_a_broken_ledger(path: Path) -> None:
    fill(path, 2)
    (path.parent / HEAD_FILE).write_text('{"seq": "two"}')
    with open_with(path) as ledger:
        assert ledger.state is LedgerState.BROKEN and not ledger.cut_short
        assert ledger.problem is not None and "damaged" in ledger.problem
