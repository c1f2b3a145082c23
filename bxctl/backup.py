"""`bxctl backup` (docs/backup.md): the home into one archive, consistent while the box runs.

Reads only; writes nothing in the home. The heads the owner's side saw and brokerd's confirmed
head are read first, and the ledger is taken up to the newest of them, checked as a chain; the
session labels after it (brokerd writes a label before the ledger record of its rise, so a
label taken later is never lower than the ledger says); the histories as whole lines (loopd
appends them); the notes through SQLite's backup API (a snapshot while memoryd writes); the
owner's files as they are. The console token and the keys only when asked (`secrets`).
Everything is gathered in a folder beside the archive, then packed, then renamed into place.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bxcore.clock import now_ms, rfc3339
from bxcore.home import witness
from bxcore.home.layout import Home
from bxctl.backup_archive import (
    FOLDERS,
    HEAD,
    LEDGER,
    MANIFEST,
    MEMORY,
    SECRETS,
    Entry,
    Manifest,
    member_problem,
)
from services.brokerd.core.records import Head
from services.brokerd.face import START, Mark, held, read_confirmed, verify_file, write_confirmed

WITNESSES = ("gatewayd", "bxctl")
COPY_BLOCK = 1024 * 1024


class BackupFailed(Exception):
    """The backup could not be made: one line saying why; nothing is left behind."""


@dataclass(frozen=True)
class Made:
    path: Path
    manifest: Manifest
    notes: int  # in the notes' snapshot


def make_backup(home: Home, archive: Path, *, secrets: bool = False) -> Made:
    """Write `archive` (which must not exist) from `home`; BackupFailed when it cannot."""
    if not home.config.exists() and not home.audit.exists():
        raise BackupFailed(f"{home.root} is no boxmaker home (no config.toml, no audit/)")
    if archive.exists() or archive.is_symlink():
        raise BackupFailed(f"{archive} exists already; name a new file")
    archive.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", dir=archive.parent))
    try:
        gathered = _Gathered(stage)
        seen = _witnesses(home)  # first: no head newer than the ledger taken below
        head = _ledger(home, gathered, list(seen.values()))
        for who, kept in seen.items():
            gathered.put(f"witness/{who}.json", _witness_bytes(kept))
        for name in _folder_files(home, "state/broker"):  # after the ledger: see above
            gathered.copy(name, home.root / name)
        for name in _folder_files(home, "sessions"):
            gathered.copy(name, home.root / name, whole_lines=name.endswith(".jsonl"))
        notes = _memory(home, gathered)
        for folder in ("grants", "jobs", "mcp"):
            for name in _folder_files(home, folder):
                gathered.copy(name, home.root / name)
        if home.config.exists():
            gathered.copy("config.toml", home.config)
        if secrets:
            for file in sorted(home.keys.iterdir()) if home.keys.is_dir() else []:
                name = f"{SECRETS}/{file.name}"
                if file.is_file() and member_problem(name, True) is None:
                    gathered.copy(name, file)
        made = rfc3339(now_ms())
        manifest = Manifest(made, str(home.root), head, secrets, gathered.entries)
        _pack(stage, manifest, archive)
    except OSError as error:
        raise BackupFailed(f"cannot back up {home.root}: {error}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return Made(archive, manifest, notes)


class _Gathered:
    """The archive's members as files in the staging folder, each with its size and hash."""

    def __init__(self, stage: Path) -> None:
        self.stage = stage
        self.entries: dict[str, Entry] = {}

    def path(self, name: str) -> Path:
        path = self.stage / "home" / name
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def put(self, name: str, data: bytes) -> None:
        self.path(name).write_bytes(data)
        self.entries[name] = Entry(len(data), hashlib.sha256(data).hexdigest())

    def copy(
        self, name: str, source: Path, *, limit: int | None = None, whole_lines: bool = False
    ) -> None:
        """`source`, its first `limit` bytes (all: None), cut after its last newline if
        `whole_lines`; a file gone meanwhile (a session label moved) is left out."""
        try:
            src = open(source, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return
        digest, size = hashlib.sha256(), 0
        with src, open(self.path(name), "wb") as dst:
            left = os.fstat(src.fileno()).st_size if limit is None else limit
            while left > 0:
                block = src.read(min(COPY_BLOCK, left))
                if not block:
                    break
                dst.write(block)
                digest.update(block)
                size += len(block)
                left -= len(block)
        if whole_lines:
            size = _cut_to_last_newline(self.path(name))
            digest = _sha256_of(self.path(name))
        self.entries[name] = Entry(size, digest.hexdigest())


def _cut_to_last_newline(path: Path) -> int:
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        keep = size
        while keep > 0:
            step = min(COPY_BLOCK, keep)
            f.seek(keep - step)
            at = f.read(step).rfind(b"\n")
            if at >= 0:
                keep = keep - step + at + 1
                break
            keep -= step
        f.truncate(keep)
        return keep


def _sha256_of(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(COPY_BLOCK), b""):
            digest.update(block)
    return digest


def _witnesses(home: Home) -> dict[str, witness.Seen]:
    """Each head the owner's side keeps, as read now: the archive holds these, never a newer
    head than the ledger taken after them."""
    found: dict[str, witness.Seen] = {}
    for who in WITNESSES:
        try:
            seen = witness.read(home.witness(who))
        except witness.WitnessUnreadable as error:
            raise BackupFailed(f"{error}; `bxctl audit verify` says more") from None
        if seen is not None:
            found[who] = seen
    return found


def _witness_bytes(seen: witness.Seen) -> bytes:
    value: dict[str, object] = {"seq": seen.seq, "hash": seen.hash}
    if seen.size is not None:
        value["size"] = seen.size
    return json.dumps(value).encode()


def _ledger(home: Home, gathered: _Gathered, seen: list[witness.Seen]) -> Mark:
    """The ledger up to the newest head confirmed (brokerd's head.json, or a head the owner's
    side saw), checked as a chain to it; with no head yet, its whole good records."""
    if not home.ledger.exists():
        if any(s.seq > 0 for s in seen):
            raise BackupFailed("the ledger is gone, but the owner saw it: `bxctl audit verify`")
        return START
    try:
        confirmed = read_confirmed(home.audit / "head.json")
    except ValueError as error:
        raise BackupFailed(str(error)) from None
    marks = [confirmed] if confirmed is not None else []
    marks += [Mark(Head(s.seq, s.hash), s.size) for s in seen if s.size is not None]
    target = max(marks, key=lambda mark: mark.head.seq, default=None)
    staged = gathered.path(LEDGER)
    if target is None:  # no head was ever confirmed: every whole record that chains
        gathered.copy(LEDGER, home.ledger, whole_lines=True)
        verified = verify_file(staged)
        if not verified.report.ok:
            raise BackupFailed(
                f"the ledger does not verify: {verified.report.why}; `bxctl audit verify` says more"
            )
        target = Mark(verified.report.head, verified.size)
    else:
        gathered.copy(LEDGER, home.ledger, limit=target.size)
    newest = max(seen, key=lambda s: s.seq, default=None)
    report = verify_file(staged, witness=_head_of(newest)).report
    problem = held(staged, target, "the confirmed head") if target.head.seq else None
    if not report.ok or report.head != target.head or problem is not None:
        why = problem or (report.why if not report.ok else f"it ends at seq {report.head.seq}")
        raise BackupFailed(
            f"the ledger does not hold its confirmed head (seq {target.head.seq}): {why}; "
            "`bxctl audit verify` says more"
        )
    if target.head.seq == 0:
        staged.unlink()
        del gathered.entries[LEDGER]
        return START
    gathered.entries[LEDGER] = Entry(target.size, _sha256_of(staged).hexdigest())
    write_confirmed(gathered.path(HEAD), target)
    gathered.entries[HEAD] = Entry(
        gathered.path(HEAD).stat().st_size, _sha256_of(gathered.path(HEAD)).hexdigest()
    )
    return target


def _head_of(seen: witness.Seen | None) -> Head | None:
    return None if seen is None else Head(seen.seq, seen.hash)


def _folder_files(home: Home, folder: str) -> list[str]:
    """The names (relative to the home) of the files of `folder` a backup takes."""
    pattern = FOLDERS[folder]
    try:
        names = sorted(os.listdir(home.root / folder))
    except FileNotFoundError:
        return []
    return [
        f"{folder}/{name}"
        for name in names
        if pattern.fullmatch(name) and (home.root / folder / name).is_file()
    ]


def _memory(home: Home, gathered: _Gathered) -> int:
    """The notes' store through SQLite's backup API: one consistent snapshot however memoryd
    writes meanwhile, made a single file (no -wal beside it). The number of notes in it."""
    if not home.memory_db.exists():
        return 0
    target = gathered.path(MEMORY)
    umask = os.umask(0o077)  # a -wal and -shm SQLite makes beside a store no one has open
    try:
        source = sqlite3.connect(f"file:{home.memory_db}?mode=ro", uri=True, timeout=10.0)
        try:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")
                notes = _count_notes(copy)
            finally:
                copy.close()
        finally:
            source.close()
    except sqlite3.Error as error:
        raise BackupFailed(f"cannot snapshot the notes {home.memory_db}: {error}") from None
    finally:
        os.umask(umask)
    gathered.entries[MEMORY] = Entry(target.stat().st_size, _sha256_of(target).hexdigest())
    return notes


def _count_notes(db: sqlite3.Connection) -> int:
    try:
        return int(db.execute("SELECT count(*) FROM notes").fetchone()[0])
    except sqlite3.Error:
        return 0


def _pack(stage: Path, manifest: Manifest, archive: Path) -> None:
    """The manifest and every gathered file into a gzipped tar, 0600, renamed into place."""
    partial = stage / "archive.tar.gz"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as raw:
        with tarfile.open(
            fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=6
        ) as tar:
            data = manifest.encode()
            tar.addfile(_info(MANIFEST, len(data)), io.BytesIO(data))
            for name in sorted(manifest.files):
                with open(stage / "home" / name, "rb") as f:
                    tar.addfile(_info(name, manifest.files[name].size), f)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, archive)
    directory = os.open(archive.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _info(name: str, size: int) -> tarfile.TarInfo:
    """A member with no owner, time or mode of the machine that made it (a restore makes
    every file 0600)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    return info
