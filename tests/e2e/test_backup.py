"""`bxctl backup` and `bxctl restore` through the real box (issue 27): a backup taken while
turns keep the ledger, the histories and memoryd busy restores into another home whose chain
verifies, whose grants are the same files and whose notes memoryd serves as they were; and an
archive changed in any way is refused, with nothing written.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bxcore.wire.messages import Accepted, Notes, NotesQuery, OwnerMessage
from tests.fakes.model_server import Answer
from tests.support.box import box_home, bxctl
from tests.support.brokerd import args, ledger_records, short_folder
from tests.support.daemons import sync_request
from tests.support.e2e import UpBox, box_up


@dataclass(frozen=True)
class Taken:
    """An archive of a box under load, and what the box held when it was down."""

    archive: Path
    head: dict[str, Any]
    ledger: bytes
    grants: dict[str, bytes]
    notes: list[tuple[Any, ...]]


def notes_of(home: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{home / 'memory' / 'memory.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT id, session, text, class, untrusted, created FROM notes")
        return sorted(rows)


def grants_of(home: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((home / "grants").iterdir())}


def load(box: UpBox, stop: threading.Event, worker: int) -> None:
    """Turns, one after another, each reading a file and searching the notes."""
    turn = 0
    while not stop.is_set():
        text = f"busy {worker} {turn}"
        box.model.script(
            text,
            box.model.calls(
                ("read_file", args(path=str(box.home / "workspace" / "a.md"))),
                ("memory", args(action="recall", query="plumber")),
            ),
            Answer(text="done"),
        )
        answer = box.ask(OwnerMessage(f"load-{worker}-{turn}", f"load-{worker}", text))
        assert isinstance(answer, Accepted), answer
        box.turn(f"load-{worker}", answer.turn, after=answer.seq - 1)
        turn += 1


@pytest.fixture(scope="module")
def taken() -> Iterator[Taken]:
    with short_folder() as keep:
        archive = keep / "box.tar.gz"
        with box_up() as box:
            (box.home / "workspace" / "a.md").write_text("the plumber comes on Tuesday\n")
            box.model.script(
                "remember these",
                box.model.calls(
                    ("memory", args(action="note", text="the plumber comes on Tuesday")),
                    ("memory", args(action="note", text="the key is under the mat")),
                ),
                Answer(text="noted"),
            )
            assert box.bxctl("chat", "--session", "notes", "remember these").returncode == 0
            before = len(ledger_records(box.home))
            stop = threading.Event()
            workers = [threading.Thread(target=load, args=(box, stop, n)) for n in range(2)]
            for worker in workers:
                worker.start()
            try:
                while len(ledger_records(box.home)) < before + 12:  # the load is running
                    stop.wait(0.05)
                made = box.bxctl("backup", "--json", str(archive))
                during = len(ledger_records(box.home))
                while len(ledger_records(box.home)) < during + 6:  # and went on after it
                    stop.wait(0.05)
            finally:
                stop.set()
                for worker in workers:
                    worker.join(30)
            assert made.returncode == 0, made.stderr
            assert box.bxctl("down").returncode == 0  # what it holds is still now
            home = box.home
            found = Taken(
                archive,
                json.loads(made.stdout)["head"],
                (home / "audit" / "ledger.jsonl").read_bytes(),
                grants_of(home),
                notes_of(home),
            )
        yield found


def test_a_backup_under_load_restores_elsewhere_verified_with_the_same_grants_and_notes(
    taken: Taken,
) -> None:
    assert taken.archive.stat().st_mode & 0o777 == 0o600
    with tarfile.open(taken.archive) as tar:
        names = set(tar.getnames())
    assert not any(name.startswith("keys/") for name in names), "never the keys unasked"
    assert {"audit/ledger.jsonl", "memory/memory.sqlite3", "witness/gatewayd.json"} <= names
    with short_folder() as root, box_home(root) as home:
        restored = bxctl(home, "restore", str(taken.archive))
        assert restored.returncode == 0, restored.stderr
        seq = taken.head["seq"]
        assert f"the ledger to seq {seq}, head {taken.head['hash']}, the chain checked to it" in (
            restored.stdout
        )
        ledger = (home / "audit" / "ledger.jsonl").read_bytes()
        assert taken.ledger.startswith(ledger) and len(ledger) < len(taken.ledger)
        assert hashlib.sha256(ledger.splitlines()[-1]).hexdigest() == taken.head["hash"]
        verified = bxctl(home, "audit", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert verified.stdout.startswith(f"ok: {seq} records")
        assert grants_of(home) == taken.grants
        assert notes_of(home) == taken.notes and len(taken.notes) == 2
        assert (home / "keys" / "owner.key_secret").exists()  # new ones, made by init

        assert bxctl(home, "up").returncode == 0
        status = json.loads(bxctl(home, "status", "--json").stdout)
        assert status["ledger"]["state"] == "ok", status["ledger"]
        served = sync_request(home, "admin", NotesQuery("n"))
        assert isinstance(served, Notes)
        assert sorted(n.text for n in served.notes) == sorted(n[2] for n in taken.notes)


def repack(archive: Path, out: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    change(members)
    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def reseal(members: dict[str, bytes], *names: str) -> None:
    """The manifest made to agree with the changed members, as a careful forger would."""
    manifest = json.loads(members["backup.json"])
    for name in names:
        data = members[name]
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if "audit/ledger.jsonl" in names:
        manifest["head"]["size"] = len(members["audit/ledger.jsonl"])
    members["backup.json"] = json.dumps(manifest).encode()


def change_a_record(members: dict[str, bytes]) -> None:
    """A read the ledger recorded made a write, its line otherwise as it was."""
    lines = members["audit/ledger.jsonl"].split(b"\n")
    at = next(n for n, line in enumerate(lines) if b'"tool":"read_file"' in line)
    lines[at] = lines[at].replace(b'"tool":"read_file"', b'"tool":"write_file"')
    members["audit/ledger.jsonl"] = b"\n".join(lines)


def drop_the_last_record(members: dict[str, bytes]) -> None:
    ledger = members["audit/ledger.jsonl"]
    members["audit/ledger.jsonl"] = ledger[: ledger.rstrip(b"\n").rfind(b"\n") + 1]


def change_a_grant(members: dict[str, bytes]) -> None:
    members["grants/workspace-shell.toml"] = members["grants/workspace-shell.toml"].replace(
        b'mode = "ask"', b'mode = "allow"'
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (change_a_record, "audit/ledger.jsonl does not match its manifest"),
        (
            lambda m: (change_a_record(m), reseal(m, "audit/ledger.jsonl")),
            "the archive's ledger does not verify: line ",
        ),
        (
            lambda m: (drop_the_last_record(m), reseal(m, "audit/ledger.jsonl")),
            "tampered",
        ),
        (change_a_grant, "grants/workspace-shell.toml does not match its manifest"),
        (lambda m: m.update({"keys/owner.key_secret": b"x"}), "keys in an archive whose"),
        (lambda m: m.pop("grants/memory.toml"), "the manifest names grants/memory.toml"),
    ],
    ids=["record", "record-resealed", "cut-resealed", "grant", "keys", "missing"],
)
def test_a_changed_archive_is_refused_and_nothing_is_written(
    taken: Taken, change: Callable[[dict[str, bytes]], None], said: str
) -> None:
    with short_folder() as root:
        bad = root / "bad.tar.gz"
        repack(taken.archive, bad, change)
        home = root / "h"
        refused = bxctl(home, "restore", str(bad))
        assert refused.returncode == 1
        assert refused.stderr.startswith("bxctl: refused: ") and refused.stderr.count("\n") == 1
        assert said in refused.stderr, refused.stderr
        assert sorted(p.name for p in root.iterdir()) == ["bad.tar.gz"]  # no home, no stage
