"""`bxctl restore` (docs/backup.md): an archive made by `bxctl backup` into an empty home.

Nothing reaches the home before the whole archive is checked: every member a regular file in
a place a backup takes (`backup_archive`), each one named by the manifest with its size and
SHA-256 and none missing; the ledger a whole chain ending exactly at the manifest's head,
holding every witnessed head and brokerd's confirmed one; every session label at least what
the ledger raised it to; the notes a sound SQLite file. The
members are written into a folder beside the home, checked there, and the folder is renamed
to the home; `bxctl init` then adds what the archive does not hold (new keys and console
token, unless it holds them; the run, logs and workspace folders), never a starter grant.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bxcore.errors import one_line
from bxcore.home import witness
from bxcore.home.layout import Home
from bxcore.labels import SESSION_DEFAULT
from bxctl.backup_archive import (
    ALL_FOLDERS,
    HEAD,
    LABELS,
    LEDGER,
    MANIFEST,
    MEMORY,
    ArchiveRefused,
    Manifest,
    member_name,
    member_problem,
    parse_manifest,
)
from bxctl.init import init_home
from services.brokerd.core.records import Head
from services.brokerd.face import (
    LedgerUnreadable,
    Mark,
    decode_label,
    held,
    reached,
    read_confirmed,
    verify_file,
)

MANIFEST_LIMIT = 64 * 1024 * 1024  # no manifest of a real home comes near it
SPARE = 64 * 1024 * 1024  # left free when the archive is unpacked
HEADER_LIMIT = 64 * 1024  # a pax or GNU long-name header; a backup's names are short
_EXTENDED = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)
BLOCK = 1024 * 1024


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    made: list[str]  # what `bxctl init` added (new keys, folders)


def restore_backup(archive: Path, home: Home) -> Restored:
    """Check `archive` whole and restore it into `home`, which must be missing or empty.
    `ArchiveRefused` (one line) when the archive is damaged or tampered with, or when the
    home is not empty; nothing is left behind then."""
    root = home.root
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ArchiveRefused(f"{root} is not empty: restore goes into a new or empty home")
    root.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{root.name}.restore-", dir=root.parent))
    try:
        manifest = _unpack(archive, stage)
        _check_ledger(stage, manifest)
        _check_labels(stage, manifest)
        _check_memory(stage)
        if root.exists():
            root.rmdir()  # empty, checked above
        os.replace(stage, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return Restored(manifest, init_home(home, starter_grants=False))


def _unpack(archive: Path, stage: Path) -> Manifest:
    """Every member written under `stage` as it comes, each checked against the manifest, which
    must come first (as `bxctl backup` writes it)."""
    manifest: Manifest | None = None
    seen: set[str] = set()
    try:
        with tarfile.open(archive, mode="r:*", tarinfo=_Header) as tar:
            for member in _members(tar):
                if _folder(member):
                    continue
                name = member_name(member.name)
                if name in seen:
                    raise ArchiveRefused(f"{archive}: a member is there twice")
                seen.add(name)
                if manifest is None:
                    if name != MANIFEST:
                        raise ArchiveRefused(
                            f"{archive} does not begin with {MANIFEST}: not a boxmaker backup"
                        )
                    manifest = parse_manifest(_read(tar, member, MANIFEST_LIMIT))
                    _room(stage, manifest)
                    continue
                problem = member_problem(name, manifest.secrets)
                if problem is not None:
                    raise ArchiveRefused(f"{archive}: {problem}")
                if not member.isreg():
                    raise ArchiveRefused(f"{archive}: {name!r} is not a plain file")
                if name not in manifest.files:
                    raise ArchiveRefused(f"{name} is not in the manifest: tampered")
                _extract(tar, member, name, stage, manifest)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveRefused(f"cannot read the archive {archive}: {error}") from None
    if manifest is None:
        raise ArchiveRefused(f"{archive} holds no {MANIFEST}: not a boxmaker backup")
    missing = sorted(set(manifest.files) - seen)
    if missing:
        raise ArchiveRefused(f"the manifest names {missing[0]}, which is not there")
    return manifest


def _room(stage: Path, manifest: Manifest) -> None:
    """The members' sizes, as the manifest says (each member is held to its size), must fit
    in the space free beside the home, with `SPARE` left over: an archive of a few megabytes
    may unpack to terabytes of zeros, and a full disk would stop the boxes writing there."""
    needed = sum(entry.size for entry in manifest.files.values())
    free = shutil.disk_usage(stage).free
    if needed + SPARE > free:
        raise ArchiveRefused(
            f"the archive unpacks to {needed} bytes, and {free} are free beside the home "
            f"({SPARE} kept spare)"
        )


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Each member in turn, none kept: tarfile's own list of those read is emptied as it goes,
    so an archive of millions of headers (a few megabytes gzipped) costs no memory."""
    while (member := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # its list of those read (3.11)
        yield member


class _Header(tarfile.TarInfo):
    """A member's header, bounded before tarfile reads it: a pax or GNU long-name header is
    read whole into memory, so one of gigabytes (kilobytes gzipped) is refused unread, and so
    is a sparse member, which no backup writes."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED and self.size > HEADER_LIMIT:
            raise ArchiveRefused(
                f"a member's header is {self.size} bytes, over {HEADER_LIMIT}: not an archive "
                "bxctl backup made"
            )
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise ArchiveRefused("a sparse member: not an archive bxctl backup made")
        return super()._proc_member(tar)  # type: ignore[misc, no-any-return]


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    if not member.isreg() or member.size > limit:
        raise ArchiveRefused(f"{member.name} is not a plain file of at most {limit} bytes")
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    return source.read()


def _folder(member: tarfile.TarInfo) -> bool:
    """A folder member of a place a backup takes (`tar` adds them): passed over."""
    name = member_name(member.name)
    return member.isdir() and (name in ("", ".") or name in ALL_FOLDERS)


def _extract(
    tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, stage: Path, manifest: Manifest
) -> None:
    entry = manifest.files[name]
    if member.size != entry.size:
        raise ArchiveRefused(
            f"{name} does not match its manifest ({member.size} bytes, it says {entry.size}): "
            "tampered"
        )
    path = stage / name
    _make_parents(path)
    source = tar.extractfile(member)
    assert source is not None
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        for block in iter(lambda: source.read(BLOCK), b""):
            digest.update(block)
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    if digest.hexdigest() != entry.sha256:
        raise ArchiveRefused(f"{name} does not match its manifest (sha256): tampered")


def _make_parents(path: Path) -> None:
    missing = [p for p in reversed(path.parents) if not p.exists()]
    for folder in missing:
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o700)


def _check_ledger(stage: Path, manifest: Manifest) -> None:
    """The ledger must be a whole chain ending at the manifest's head, and hold every head
    the archive's witnesses and head.json name."""
    head = manifest.head
    kept = []
    for name in manifest.files:
        if name.startswith("witness/"):
            try:
                seen = witness.read(stage / name)
            except witness.WitnessUnreadable as error:
                raise ArchiveRefused(str(error)) from None
            if seen is not None:
                kept.append(seen)
    newest = max(kept, key=lambda seen: seen.seq, default=None)
    if newest is not None and newest.seq > head.head.seq:
        raise ArchiveRefused(
            f"the archive's witness saw seq {newest.seq}, after its head (seq {head.head.seq}): "
            "tampered"
        )
    ledger = stage / LEDGER
    if head.head.seq == 0:
        return
    try:
        verified = verify_file(
            ledger, witness=None if newest is None else Head(newest.seq, newest.hash)
        )
        report = verified.report
        if not report.ok:
            raise ArchiveRefused(f"the archive's ledger does not verify: {report.why}: tampered")
        if report.head != head.head or verified.size != head.size:
            raise ArchiveRefused(
                f"the archive's ledger ends at seq {report.head.seq}, its manifest says "
                f"seq {head.head.seq}: tampered"
            )
        for seen in kept:
            if seen.size is not None and seen.seq > 0:
                mark_problem = held(ledger, _mark(seen), "the head the archive's witness saw")
                if mark_problem is not None:
                    raise ArchiveRefused(f"{mark_problem}: tampered")
        confirmed = read_confirmed(stage / HEAD) if (stage / HEAD).exists() else None
    except (LedgerUnreadable, ValueError) as error:
        raise ArchiveRefused(str(error)) from None
    if confirmed is not None and confirmed != head:
        raise ArchiveRefused("the archive's audit/head.json is not its manifest's head: tampered")


def _check_labels(stage: Path, manifest: Manifest) -> None:
    """Every session the ledger raised must have a label file at least that high: the files
    are not in the chain, so an archive whose ledger is the owner's (its head the one the
    owner kept) could otherwise bring a session back trusted that had read untrusted content
    (SPEC I3). A missing file reads as a new session's label, which is the lowest."""
    if manifest.head.head.seq == 0:
        return
    for session, label in sorted(reached(stage / LEDGER).items()):
        name = f"{LABELS}/{session}.json"
        restored = SESSION_DEFAULT
        if name in manifest.files:
            try:
                restored = decode_label((stage / name).read_bytes())
            except ValueError as error:
                raise ArchiveRefused(f"{name} is not a label: {one_line(error)}") from None
        if not label.at_most(restored):
            raise ArchiveRefused(
                f"the archive's label of session {session!r} ({restored!r}) is lower than its "
                f"ledger raised it to ({label!r}): tampered"
            )


def _mark(seen: witness.Seen) -> Mark:
    assert seen.size is not None
    return Mark(Head(seen.seq, seen.hash), seen.size)


def _check_memory(stage: Path) -> None:
    path = stage / MEMORY
    if not path.exists():
        return
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            answer = db.execute("PRAGMA quick_check").fetchone()
        finally:
            db.close()
    except sqlite3.Error as error:
        raise ArchiveRefused(f"the archive's notes are no sound SQLite file: {error}") from None
    if answer is None or answer[0] != "ok":
        raise ArchiveRefused(f"the archive's notes fail SQLite's check: {answer}")
