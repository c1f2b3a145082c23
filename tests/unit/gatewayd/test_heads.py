"""gatewayd's witness (SPEC §7, issue 10): it follows the heads brokerd publishes, never goes
back, and is never overwritten by a chain cut and grown again: once it refuses a head it keeps
what it had, says so once, and takes nothing more until the owner resets the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bxcore.home import witness
from bxcore.home.witness import Seen
from bxcore.wire.messages import LedgerHead
from services.gatewayd.heads import HeadKeeper
from tests.support.ledger_file import GrowingLedger


@pytest.fixture
def ledger(tmp_path: Path) -> GrowingLedger:
    return GrowingLedger(tmp_path / "audit" / "ledger.jsonl")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "witness" / "gatewayd.json"


def kept(path: Path) -> Seen | None:
    return witness.read(path)


def as_seen(head: LedgerHead) -> Seen:
    return Seen(head.seq, head.hash, head.size)


def suspicious(caplog: pytest.LogCaptureFixture) -> int:
    return sum("SUSPICIOUS" in r.getMessage() for r in caplog.records)


def test_the_witness_follows_heads_and_keeps_where_each_ends(
    path: Path, ledger: GrowingLedger
) -> None:
    keeper = HeadKeeper(path, ledger.path)
    for n in (3, 1, 4):
        head = ledger.grow(n)
        assert keeper.saw(head)
        keeper.flush()
        assert kept(path) == as_seen(head)
    assert keeper.saw(ledger.head()), "the same head again is no news"
    assert "newest seq 8, 0 refused" in repr(keeper)


def test_a_head_that_goes_back_is_refused_once_and_then_every_head(
    path: Path, ledger: GrowingLedger, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = HeadKeeper(path, ledger.path)
    five = ledger.grow(5)
    assert keeper.saw(five)
    keeper.flush()
    ledger.cut(3)
    assert not keeper.saw(ledger.grow(0))
    assert not keeper.saw(LedgerHead(5, "f" * 64, five.size))
    assert not keeper.saw(ledger.grow(4)), "grown past the old length: still refused"
    keeper.flush()
    assert kept(path) == as_seen(five)
    assert suspicious(caplog) == 1 and keeper.refused == 3
    assert "seq 3" in caplog.text and "run `bxctl audit verify`" in caplog.text
    assert "refusing: brokerd published ledger head seq 3" in repr(keeper)


def test_a_chain_cut_and_grown_past_the_witness_is_refused(
    path: Path, ledger: GrowingLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """The regrown chain never publishes a smaller seq the witness sees (it was down), but
    the ledger no longer holds the witnessed record where it ended."""
    keeper = HeadKeeper(path, ledger.path)
    five = ledger.grow(5)
    keeper.saw(five)
    keeper.flush()
    ledger.cut(2)
    regrown = ledger.grow(6, version="regrown")
    assert regrown.seq > five.seq and (regrown.size or 0) > (five.size or 0)
    assert keeper.saw(regrown), "taken, to be checked when it is written"
    keeper.flush()
    assert kept(path) == as_seen(five), "the witness stays as it was"
    assert suspicious(caplog) == 1
    assert "no longer holds the record the witness kept (seq 5" in caplog.text
    assert not keeper.saw(ledger.grow(1, version="regrown"))
    keeper.flush()
    assert kept(path) == as_seen(five) and suspicious(caplog) == 1


def test_a_restarted_gatewayd_refuses_a_regrown_chain_too(
    path: Path, ledger: GrowingLedger, caplog: pytest.LogCaptureFixture
) -> None:
    first = HeadKeeper(path, ledger.path)
    five = ledger.grow(5)
    first.saw(five)
    first.flush()
    ledger.cut(2)
    again = HeadKeeper(path, ledger.path)
    again.saw(ledger.grow(9, version="regrown"))
    again.flush()
    assert kept(path) == as_seen(five) and suspicious(caplog) == 1


def test_the_owners_reset_makes_the_witness_follow_again(
    path: Path, ledger: GrowingLedger, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = HeadKeeper(path, ledger.path)
    keeper.saw(ledger.grow(5))
    keeper.flush()
    ledger.cut(2)
    keeper.saw(ledger.grow(0))
    assert keeper.refusing is not None
    accepted = ledger.head()  # the owner takes the cut ledger as it is
    witness.reset(path, as_seen(accepted))
    assert keeper.saw(ledger.grow(1))
    keeper.flush()
    assert kept(path) == as_seen(ledger.head()) and keeper.refusing is None
    assert "was changed outside gatewayd" in caplog.text


def test_a_damaged_witness_is_kept_as_it_is_until_the_owner_resets_it(
    path: Path, ledger: GrowingLedger, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir()
    path.write_bytes(b'{"seq": 9')
    keeper = HeadKeeper(path, ledger.path)
    assert "is damaged" in caplog.text and "until the owner resets it" in caplog.text
    assert not keeper.saw(ledger.grow(2))
    keeper.flush()
    assert path.read_bytes() == b'{"seq": 9'
    path.unlink()  # the owner's reset: no witness
    assert keeper.saw(ledger.grow(1))
    keeper.flush()
    assert kept(path) == as_seen(ledger.head())


def test_a_witness_without_a_size_follows_the_seq_rule(path: Path, ledger: GrowingLedger) -> None:
    old = ledger.grow(3)
    path.parent.mkdir()
    path.write_text(f'{{"seq": 3, "hash": "{old.hash}"}}')
    keeper = HeadKeeper(path, ledger.path)
    ledger.cut(1)
    head = ledger.grow(4, version="regrown")
    assert keeper.saw(head)
    keeper.flush()
    assert kept(path) == as_seen(head), "nothing says where seq 3 ended: only seq is checked"


def test_a_ledger_gatewayd_may_not_read_leaves_the_seq_rule_said_once(
    path: Path,
    ledger: GrowingLedger,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def denied(ledger: Path, seen: Seen) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(witness, "holds", denied)
    keeper = HeadKeeper(path, ledger.path)
    for n in (2, 2, 2):
        assert keeper.saw(ledger.grow(n))
        keeper.flush()
    assert kept(path) == as_seen(ledger.head())
    assert caplog.text.count("cannot read the ledger") == 1 and keeper.blind
    assert not keeper.saw(LedgerHead(1, "1" * 64, 10)), "a head that goes back still is refused"


def test_a_ledger_that_fails_to_read_for_now_holds_the_head_back(
    path: Path,
    ledger: GrowingLedger,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keeper = HeadKeeper(path, ledger.path)
    first = ledger.grow(2)
    keeper.saw(first)
    keeper.flush()
    real = witness.holds

    def failing(ledger: Path, seen: Seen) -> bool:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(witness, "holds", failing)
    for n in (1, 1):
        keeper.saw(ledger.grow(n))
        keeper.flush()
    assert kept(path) == as_seen(first) and caplog.text.count("Input/output error") == 1
    monkeypatch.setattr(witness, "holds", real)
    keeper.saw(ledger.grow(1))
    keeper.flush()
    assert kept(path) == as_seen(ledger.head()) and keeper.refusing is None
