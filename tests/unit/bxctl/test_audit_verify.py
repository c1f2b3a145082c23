"""`bxctl audit verify` as the owner runs it (SPEC §7, §13, issue 10): 100,000 records (how
fast is `python -m bench scale`'s to say), a bar on a terminal and nothing else when piped,
`--since-witness` walking only what is new, every witness checked, and a witness that cannot
be read a failure, never "none"."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.ledger_builder import build
from bxcore.home import witness
from bxcore.home.layout import Home
from tests.support.cli import bxctl
from tests.support.ledger_file import GrowingLedger


def on_a_terminal(home: Path, *args: str) -> tuple[int, str]:
    """Run bxctl with a pseudo-terminal as its standard output: its exit code and output."""
    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "bxctl", "--home", str(home), *args],
        stdout=child,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(parent)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    return home


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home whose ledger holds 100,000 records (~39 MB), built with the record builder."""
    home = tmp_path_factory.mktemp("big") / "home"
    assert bxctl(home, "init").returncode == 0
    build(Home(home).ledger, 100_000)
    yield home


def kept(home: Path, who: str) -> witness.Seen | None:
    return witness.read(Home(home).witness(who))


# --- at scale, on a terminal and piped --------------------------------------------------------


def test_a_hundred_thousand_records_verify_piped_as_one_line(big: Path) -> None:
    Home(big).witness("bxctl").unlink(missing_ok=True)
    result = bxctl(big, "audit", "verify")
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok: 100000 records\n", "")
    seen = kept(big, "bxctl")
    assert seen is not None and seen.seq == 100_000
    assert seen.size == Home(big).ledger.stat().st_size


def test_json_output_is_unchanged_and_says_where_the_check_began(big: Path) -> None:
    result = bxctl(big, "audit", "verify", "--json")
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["records"] == 100_000 and data["since"] == 0
    assert data["size"] == Home(big).ledger.stat().st_size
    assert {"head", "witness", "bad_line", "problem", "torn"} <= set(data)


def test_on_a_terminal_a_progress_bar_shows_and_goes(big: Path) -> None:
    assert bxctl(big, "audit", "verify").returncode == 0  # a head the owner saw, to reach
    code, output = on_a_terminal(big, "audit", "verify")
    assert code == 0
    assert "checking the ledger" in output and "100,000 records" in output, "the bar was drawn"
    after_the_bar = output.rsplit("\x1b[2K", 1)[-1]  # the bar's last line, erased
    assert "ok: 100000 records, including the head the owner saw" in after_the_bar
    assert "checking" not in after_the_bar


# --- since the last verify ----------------------------------------------------------------------


def test_since_witness_walks_only_the_records_added_since_the_last_verify(home: Path) -> None:
    ledger = GrowingLedger(Home(home).ledger)
    ledger.grow(20)
    assert bxctl(home, "audit", "verify").stdout == "ok: 20 records\n"
    ledger.grow(5)
    result = bxctl(home, "audit", "verify", "--since-witness")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == (
        "ok: 25 records (5 new since the last verify, at seq 20), including the head the "
        "owner saw (seq 20)\n"
    )
    assert kept(home, "bxctl") == witness.Seen(25, ledger.head().hash, ledger.head().size)
    as_json = json.loads(bxctl(home, "audit", "verify", "--since-witness", "--json").stdout)
    assert (as_json["ok"], as_json["since"], as_json["records"]) == (True, 25, 25)


def test_since_witness_without_an_earlier_verify_says_so_and_checks_everything(
    home: Path,
) -> None:
    GrowingLedger(Home(home).ledger).grow(4)
    result = bxctl(home, "audit", "verify", "--since-witness")
    assert (result.returncode, result.stdout) == (0, "ok: 4 records\n")
    assert result.stderr == (
        "bxctl: no earlier verify said where its head ends (witness/bxctl.json): checked every "
        "record\n"
    )


def test_since_witness_still_reaches_the_newer_head_gatewayd_saw(home: Path) -> None:
    ledger = GrowingLedger(Home(home).ledger)
    ledger.grow(10)
    assert bxctl(home, "audit", "verify").returncode == 0
    ledger.grow(5)
    witness.keep(Home(home).witness("gatewayd"), witness.Seen(15, "f" * 64, 1))  # not this chain
    result = bxctl(home, "audit", "verify", "--since-witness")
    assert (result.returncode, result.stdout) == (
        1,
        "bad: line 15: does not match the head seen (seq 15): tampered\n",
    )


def test_since_witness_over_a_rewritten_ledger_checks_everything_and_fails(home: Path) -> None:
    ledger = GrowingLedger(Home(home).ledger)
    ledger.grow(10)
    assert bxctl(home, "audit", "verify").returncode == 0
    ledger.cut(3)
    ledger.grow(9, version="regrown")
    result = bxctl(home, "audit", "verify", "--since-witness")
    assert result.stderr == (
        "bxctl: the ledger no longer holds the head the last verify checked (seq 10): "
        "rewritten: checked every record\n"
    )
    assert (result.returncode, result.stdout) == (
        1,
        "bad: line 10: does not match the head seen (seq 10): tampered\n",
    )


# --- every witness, and one that cannot be read -----------------------------------------------


def test_an_older_witness_the_ledger_no_longer_holds_fails_even_when_the_newest_is_reached(
    home: Path,
) -> None:
    """gatewayd, unable to read the ledger in the deploy layout, may follow a regrown chain
    by its seq alone: bxctl's older head, with where it ended, still catches it."""
    ledger = GrowingLedger(Home(home).ledger)
    ledger.grow(6)
    assert bxctl(home, "audit", "verify").returncode == 0
    ledger.cut(2)
    head = ledger.grow(8, version="regrown")
    witness.keep(Home(home).witness("gatewayd"), witness.Seen(head.seq, head.hash, head.size))
    result = bxctl(home, "audit", "verify")
    assert (result.returncode, result.stdout) == (
        1,
        "bad: the ledger no longer holds the head bxctl saw (seq 6): rewritten\n",
    )


@pytest.mark.parametrize("who", ["gatewayd", "bxctl"])
def test_a_damaged_witness_fails_verify_in_one_line_never_as_no_witness(
    home: Path, who: str
) -> None:
    GrowingLedger(Home(home).ledger).grow(3)
    path = Home(home).witness(who)
    path.parent.mkdir(exist_ok=True)
    path.write_text('{"seq": 7, "hash": "cut sho')
    result = bxctl(home, "audit", "verify")
    assert result.returncode == 1
    assert result.stdout == (
        f"bad: the witness {path} is damaged: it holds no ledger head: the ledger cannot be "
        "checked against it until the owner resets it\n"
    )
    assert path.read_text() == '{"seq": 7, "hash": "cut sho', "left as it is"
    data = json.loads(bxctl(home, "audit", "verify", "--json").stdout)
    assert data["ok"] is False and "is damaged" in data["problem"]


def test_a_witness_that_cannot_be_read_fails_verify(home: Path) -> None:
    GrowingLedger(Home(home).ledger).grow(3)
    path = Home(home).witness("gatewayd")
    path.mkdir(parents=True)
    result = bxctl(home, "audit", "verify")
    assert result.returncode == 1 and result.stdout.count("\n") == 1
    assert result.stdout.startswith(f"bad: cannot read the witness {path}: Is a directory")
