"""The fast whole-file check (issue 10): on any damage it reports what the full walk reports,
word for word; it walks only what is new with `--since-witness`; it says how far it got; and
100,000 records take a fraction of the full walk's time."""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ledger_builder import build
from services.brokerd.core.records import Head, line_hash
from services.brokerd.ledger import verify as fast
from services.brokerd.ledger.index import START, Mark
from services.brokerd.ledger.scan import scan
from services.brokerd.ledger.verify import LedgerUnreadable, Verified, held, verify_file


@pytest.fixture(scope="module")
def base() -> Iterator[bytes]:
    """A small ledger of every sort of record brokerd writes, chained."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"
        build(path, 40)
        yield path.read_bytes()


def full_walk(path: Path, witness: Head | None) -> tuple[object, int]:
    with open(path, "rb") as f:
        found = scan(f, witness=witness)
    return found.report, found.good_bytes


def lines_of(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


def head_at(data: bytes, seq: int) -> Head:
    return Head(seq, line_hash(lines_of(data)[seq - 1]))


def mark_at(data: bytes, seq: int) -> Mark:
    lines = lines_of(data)
    return Mark(Head(seq, line_hash(lines[seq - 1])), sum(len(x) + 1 for x in lines[:seq]))


# --- the same reports as the full walk -----------------------------------------------------


def damaged(data: bytes, how: str, a: int, b: int, value: int) -> bytes:
    lines = lines_of(data)
    i, j = a % len(lines), b % len(lines)
    if how == "byte":
        at = a % len(data)
        new = value if value != data[at] else (value + 1) % 256
        return data[:at] + bytes([new]) + data[at + 1 :]
    if how == "cut-line":
        del lines[i]
    elif how == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "copy-line":
        lines.insert(j, lines[i])
    elif how == "torn-end":
        return data[: a % len(data)]
    elif how == "junk":
        at = a % (len(data) + 1)
        return data[:at] + bytes([value]) * (1 + b % 7) + data[at:]
    elif how == "cut-tail":
        del lines[i:]
    return b"".join(line + b"\n" for line in lines)


#: How a ledger is damaged, and where (`damaged`).
DAMAGE = {
    "how": st.sampled_from(
        ["byte", "cut-line", "swap", "copy-line", "torn-end", "junk", "cut-tail"]
    ),
    "a": st.integers(0, 1 << 20),
    "b": st.integers(0, 1 << 20),
    "value": st.integers(0, 255),
}


@settings(max_examples=400, deadline=None)
@given(
    **DAMAGE,
    witnessed=st.integers(0, 40),
    block=st.sampled_from([7, 64, 500, 4096, fast.BLOCK]),
)
def test_the_fast_walk_reports_what_the_full_walk_reports_on_any_damage(
    base: bytes, how: str, a: int, b: int, value: int, witnessed: int, block: int
) -> None:
    witness = None if witnessed == 0 else head_at(base, witnessed)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"
        path.write_bytes(damaged(base, how, a, b, value))
        with mock.patch.object(fast, "BLOCK", block):
            found = verify_file(path, witness=witness)
        assert (found.report, found.size) == full_walk(path, witness)


@settings(max_examples=200, deadline=None)
@given(
    **DAMAGE,
    since=st.integers(1, 40),
    witnessed=st.integers(0, 40),
)
def test_since_a_verified_record_it_reports_what_the_full_walk_from_there_reports(
    base: bytes, how: str, a: int, b: int, value: int, since: int, witnessed: int
) -> None:
    """From a record a verify checked before, found where it ended, or else from the start."""
    mark = mark_at(base, since)
    witness = None if witnessed == 0 else head_at(base, witnessed)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"
        path.write_bytes(damaged(base, how, a, b, value))
        with mock.patch.object(fast, "BLOCK", 64):
            found = verify_file(path, witness=witness, since=mark)
        with open(path, "rb") as f:
            start = START if found.since_problem is not None else mark
            expected = scan(f, start=start, witness=witness)
        assert found.start == start
        assert (found.report, found.size) == (expected.report, expected.good_bytes)


@pytest.mark.parametrize("block", [7, 100, fast.BLOCK])
def test_an_undamaged_ledger_is_ok_whatever_the_block(
    base: bytes, tmp_path: Path, block: int
) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(base)
    with mock.patch.object(fast, "BLOCK", block):
        found = verify_file(path, witness=head_at(base, 40))
    assert str(found.report) == "ok: 40 records"
    assert (found.size, found.start) == (len(base), START)


@pytest.mark.parametrize("seq", [12, 40])
def test_a_witnessed_record_changed_into_another_record_is_tampering_in_either_walk(
    base: bytes, tmp_path: Path, seq: int
) -> None:
    lines = lines_of(base)
    lines[seq - 1] = lines[seq - 1].replace(b'"chat-', b'"chaT-', 1)  # still a record
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    seen = head_at(base, seq)
    found = verify_file(path, witness=seen)
    assert (found.report, found.size) == full_walk(path, seen)
    assert str(found.report) == f"line {seq}: does not match the head seen (seq {seq}): tampered"


def test_an_empty_ledger_is_ok(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"")
    assert str(verify_file(path).report) == "ok: 0 records"


def test_a_rewritten_chain_is_caught_against_the_witness_by_either_walk(
    base: bytes, tmp_path: Path
) -> None:
    """The limit the fast walk owns: a line that is no canonical record, with every line
    after it chained to it again, is not parsed; only whoever rewrote the tail can make one,
    and the witness catches that rewrite in both walks (the full walk names the line)."""
    lines = lines_of(base)
    lines[2] = lines[2].replace(b'"session":', b'"session": ', 1)  # not canonical
    prev = line_hash(lines[2])
    for k in range(3, len(lines)):
        at = lines[k].index(b'"prev":"') + 8
        lines[k] = lines[k][:at] + prev.encode() + lines[k][at + 64 :]
        prev = line_hash(lines[k])
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    seen = head_at(base, 40)
    found = verify_file(path, witness=seen)
    assert str(found.report) == "line 40: does not match the head seen (seq 40): tampered"
    report, _ = full_walk(path, seen)
    assert str(report) == "line 3: not in canonical form"


def test_a_ledger_that_cannot_be_read_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerUnreadable, match=r"cannot read the ledger .*: No such file"):
        verify_file(tmp_path / "nothing.jsonl")


# --- since the last verify --------------------------------------------------------------------


def test_since_a_held_record_only_what_follows_is_walked(base: bytes, tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(base)
    since = mark_at(base, 30)
    calls: list[tuple[int, int, int]] = []
    found = verify_file(path, since=since, progress=lambda *a: calls.append(a))
    assert str(found.report) == "ok: 40 records" and found.start == since
    assert found.since_problem is None
    left = len(base) - since.size
    assert calls[0] == (0, 0, left) and calls[-1] == (10, left, left)


def test_since_a_record_that_is_not_there_any_more_everything_is_walked(
    base: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.jsonl"
    since = mark_at(base, 30)
    path.write_bytes(b"".join(line + b"\n" for line in lines_of(base)[:20]))
    found = verify_file(path, since=since)
    assert found.start == START and str(found.report) == "ok: 20 records"
    assert found.since_problem is not None and "before the head the last verify checked" in (
        found.since_problem
    )
    lines = lines_of(base)
    lines[29] = lines[29].replace(b'"chat-', b'"chaT-', 1)  # the same length, another hash
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    found = verify_file(path, since=since)
    assert found.start == START and found.since_problem is not None
    assert "no longer holds the head the last verify checked" in found.since_problem
    assert str(found.report) == "line 31: prev does not match the hash of line 30"


def test_a_damaged_line_after_the_witnessed_start_is_named_as_in_a_whole_walk(
    base: bytes, tmp_path: Path
) -> None:
    lines = lines_of(base)
    lines[34] = lines[34].replace(b'"kind":', b'"kind";', 1)
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    found = verify_file(path, since=mark_at(base, 30))
    assert (found.report, found.size) == full_walk(path, None)
    assert str(found.report).startswith("line 35: not JSON")


def test_held_finds_a_record_or_says_why_not(base: bytes, tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(base)
    assert held(path, mark_at(base, 12), "the head gatewayd saw") is None
    path.write_bytes(base[: mark_at(base, 11).size])
    assert "before the head gatewayd saw (seq 12" in str(
        held(path, mark_at(base, 12), "the head gatewayd saw")
    )


# --- at scale -----------------------------------------------------------------------------------


def test_a_hundred_thousand_records_verify_in_a_fraction_of_the_full_walk(tmp_path: Path) -> None:
    """The CI-sized figure of `python -m bench scale` (1M records <= 10 s on a 2-core box)."""
    path = tmp_path / "ledger.jsonl"
    head, size = build(path, 100_000)
    calls: list[tuple[int, int, int]] = []
    started = time.process_time()  # CPU time: a loaded machine does not make it flaky
    found = verify_file(path, witness=head, progress=lambda *a: calls.append(a))
    took = time.process_time() - started
    assert isinstance(found, Verified)
    assert str(found.report) == "ok: 100000 records" and found.report.head == head
    assert found.size == size
    assert calls[-1] == (100_000, size, size)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls), "progress never goes back"
    assert took < 1.5, f"{took:.2f} s for 100,000 records (measured ~0.4 s; the full walk ~3 s)"
    digest = hashlib.sha256(path.read_bytes().split(b"\n")[-2]).hexdigest()
    assert digest == head.hash
