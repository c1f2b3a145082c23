"""The witness file (SPEC §7, issue 10): a missing file is no witness, a damaged or unreadable
one is never taken for none; `keep` never goes back, `reset` does; `holds` finds a witnessed
record again by where its line ends, without reading the ledger through."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from bxcore.home import witness
from bxcore.home.witness import Seen, WitnessUnreadable
from services.brokerd.core.records import build

H5 = "5" * 64
H9 = "9" * 64


def ledger_of(path: Path, n: int) -> list[bytes]:
    """A chained ledger of `n` records at `path`; its lines."""
    lines, prev = [], "0" * 64
    for seq in range(1, n + 1):
        line = build(seq, "2026-11-30T02:34:30.123Z", prev, "started", {"pid": seq, "version": "t"})
        prev = hashlib.sha256(line).hexdigest()
        lines.append(line)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return lines


def seen_at(lines: list[bytes], seq: int) -> Seen:
    size = sum(len(line) + 1 for line in lines[:seq])
    return Seen(seq, hashlib.sha256(lines[seq - 1]).hexdigest(), size)


def test_a_missing_witness_is_none(tmp_path: Path) -> None:
    assert witness.read(tmp_path / "gatewayd.json") is None
    assert witness.newest([tmp_path / "a.json", tmp_path / "b.json"]) is None


def test_a_witness_out_of_reach_is_reported_to_the_owner_and_passed_over_by_brokerd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "gatewayd.json"
    witness.keep(kept, Seen(5, H5, 1234))
    read_bytes = Path.read_bytes

    def as_another_user(path: Path) -> bytes:  # root reads every file: EACCES, as brokerd gets
        if path == kept:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", as_another_user)
    with pytest.raises(WitnessUnreadable, match=r"cannot read the witness .*Permission denied"):
        witness.read(kept)
    assert witness.newest([kept]) is None


def test_a_witness_written_before_sizes_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "bxctl.json"
    path.write_text(f'{{"seq": 5, "hash": "{H5}"}}')
    assert witness.read(path) == Seen(5, H5, None)


def test_a_kept_head_keeps_its_size(tmp_path: Path) -> None:
    path = tmp_path / "witness" / "gatewayd.json"
    assert witness.keep(path, Seen(5, H5, 1234))
    assert witness.read(path) == Seen(5, H5, 1234)
    assert path.read_text() == f'{{"seq": 5, "hash": "{H5}", "size": 1234}}'


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[5]",
        b'{"seq": 5}',
        b'{"seq": -1, "hash": "' + H5.encode() + b'"}',
        b'{"seq": 5, "hash": "ABC"}',
        b'{"seq": 5, "hash": "' + H5.encode() + b'", "size": -3}',
        b'{"seq": 5, "hash": "' + H5.encode() + b'", "size": true}',
        b'{"seq": 5, "hash": "' + H5.encode() + b'", "by": "me"}',
        b"\xff\xfe",
    ],
)
def test_a_damaged_witness_is_an_error_never_no_witness(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "gatewayd.json"
    path.write_bytes(content)
    with pytest.raises(WitnessUnreadable, match=r"the witness .*gatewayd\.json is damaged"):
        witness.read(path)
    with pytest.raises(WitnessUnreadable):
        witness.newest([tmp_path / "missing.json", path])
    with pytest.raises(WitnessUnreadable):
        witness.keep(path, Seen(9, H9, 10))
    assert path.read_bytes() == content, "a damaged witness is evidence: left as it is"


def test_a_witness_that_cannot_be_read_says_so(tmp_path: Path) -> None:
    path = tmp_path / "gatewayd.json"
    path.mkdir()  # reading it fails whoever we are (root reads a mode-0 file)
    with pytest.raises(WitnessUnreadable, match=r"cannot read the witness .*: Is a directory"):
        witness.read(path)


def test_keep_never_moves_back_and_reset_does(tmp_path: Path) -> None:
    path = tmp_path / "gatewayd.json"
    assert witness.keep(path, Seen(9, H9, 900))
    assert not witness.keep(path, Seen(5, H5, 500))
    assert witness.read(path) == Seen(9, H9, 900)
    witness.reset(path, Seen(5, H5, 500))
    assert witness.read(path) == Seen(5, H5, 500)


def test_reset_replaces_a_damaged_witness(tmp_path: Path) -> None:
    path = tmp_path / "gatewayd.json"
    path.write_bytes(b"{")
    witness.reset(path, Seen(5, H5))
    assert witness.read(path) == Seen(5, H5)


def test_a_ledger_holds_each_witnessed_record_at_its_size(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    lines = ledger_of(ledger, 6)
    assert all(witness.holds(ledger, seen_at(lines, seq)) for seq in range(1, 7))
    assert witness.holds(ledger, Seen(0, "0" * 64, 0))
    one_off = seen_at(lines, 3)
    assert not witness.holds(ledger, Seen(3, one_off.hash, (one_off.size or 0) + 1))
    assert not witness.holds(ledger, Seen(3, H5, one_off.size))


def test_a_cut_or_regrown_ledger_no_longer_holds_the_witnessed_record(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    lines = ledger_of(ledger, 6)
    seen = seen_at(lines, 5)
    ledger.write_bytes(b"".join(line + b"\n" for line in lines[:3]))
    assert not witness.holds(ledger, seen), "cut: the file is shorter"
    regrown = lines[:3] + [line.replace(b'"version":"t"', b'"version":"x"') for line in lines[3:]]
    ledger.write_bytes(b"".join(line + b"\n" for line in regrown))
    assert ledger.stat().st_size >= (seen.size or 0)
    assert not witness.holds(ledger, seen), "regrown past it: another record ends there"
    ledger.unlink()
    assert not witness.holds(ledger, seen), "a missing ledger holds nothing"


def test_holds_needs_a_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no size"):
        witness.holds(tmp_path / "ledger.jsonl", Seen(5, H5))


@pytest.mark.parametrize("length", [1, 100, 64 * 1024 - 1, 64 * 1024, 200_000])
def test_the_line_ending_at_a_size_is_found_across_blocks(length: int) -> None:
    line = b"x" * length
    data = b"first\n" + line + b"\nlast\n"
    f = io.BytesIO(data)
    assert witness.line_ending_at(f, 6 + length + 1) == line
    assert witness.line_ending_at(f, 6) == b"first"
    assert witness.line_ending_at(f, len(data)) == b"last"
    assert witness.line_ending_at(f, 5) is None, "not a line's end"
    assert witness.line_ending_at(f, len(data) + 10) is None, "past the end"
    assert witness.line_ending_at(f, 0) is None


def test_a_line_longer_than_any_record_is_not_looked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(witness, "MAX_LINE_BYTES", 1000)
    f = io.BytesIO(b"a" * 5000 + b"\n")
    assert witness.line_ending_at(f, 5001) is None
