"""`bxctl.backup_archive`: an archive holds only the places a backup takes, keys only when its
manifest says so, and a manifest is read strictly; `bxctl backup` and `restore` offline: a
home with no box running backs up and restores, never over a file or into a home in use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bxctl.backup_archive import ArchiveRefused, member_name, member_problem, parse_manifest
from tests.support.cli import bxctl

GOOD = {
    "format": "boxmaker-backup 1",
    "made": "2026-12-04T01:00:00.000Z",
    "home": "/home/me/box",
    "head": {"seq": 0, "hash": "0" * 64, "size": 0},
    "secrets": False,
    "files": {"config.toml": {"size": 3, "sha256": "a" * 64}},
}


@pytest.mark.parametrize(
    ("name", "secrets", "taken"),
    [
        ("config.toml", False, True),
        ("grants/workspace-read.toml", False, True),
        ("grants/notes.toml~", False, False),
        ("grants/sub/x.toml", False, False),
        ("sessions/chat.jsonl", False, True),
        ("sessions/.jobs.json", False, True),
        ("sessions/../config.toml", False, False),
        ("state/broker/chat.json", False, True),
        ("mcp/git.pins.json", False, True),
        ("witness/bxctl.json", False, True),
        ("audit/ledger.jsonl", False, True),
        ("audit/index.sqlite3", False, False),
        ("memory/memory.sqlite3-wal", False, False),
        ("keys/owner.key_secret", False, False),
        ("keys/owner.key_secret", True, True),
        ("keys/console.token", True, True),
        ("/etc/passwd", False, False),
        ("run/brokerd.lock", False, False),
        ("workspace/a.md", False, False),
    ],
)
def test_a_member_is_taken_only_in_the_places_a_backup_takes(
    name: str, secrets: bool, taken: bool
) -> None:
    assert (member_problem(name, secrets) is None) is taken


def test_names_as_tar_writes_them_are_paths_in_the_home() -> None:
    assert member_name("./grants/a.toml") == "grants/a.toml"
    assert member_name("grants/") == "grants"


def test_a_good_manifest_is_read() -> None:
    manifest = parse_manifest(json.dumps(GOOD).encode())
    assert manifest.head.head.seq == 0 and list(manifest.files) == ["config.toml"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"format": "boxmaker-backup 2"}, "format"),
        ({"extra": 1}, "not a boxmaker backup's manifest"),
        ({"secrets": "no"}, "'secrets'"),
        ({"head": {"seq": -1, "hash": "0" * 64, "size": 0}}, "not a count"),
        ({"head": {"seq": 3, "hash": "0" * 64, "size": 10}}, "disagree"),
        ({"files": {"keys/owner.key_secret": {"size": 1, "sha256": "a" * 64}}}, "keys in"),
        ({"files": {"config.toml": {"size": 1, "sha256": "A" * 64}}}, "64 hex digits"),
        ({"files": {"config.toml": {"size": True, "sha256": "a" * 64}}}, "wrong type"),
    ],
)
def test_a_manifest_that_is_off_in_anything_is_refused(change: dict[str, Any], said: str) -> None:
    with pytest.raises(ArchiveRefused, match=said):
        parse_manifest(json.dumps({**GOOD, **change}).encode())


def test_offline_a_home_backs_up_and_restores_never_over_a_file_or_a_home_in_use(
    short_tmp: Path,
) -> None:
    home, archive = short_tmp / "h", short_tmp / "a.tar.gz"
    assert bxctl(home, "init").returncode == 0
    assert bxctl(home, "grant", "add", "notes", "--tool", "memory").returncode == 0
    made = bxctl(home, "backup", "--with-secrets", str(archive))
    assert made.returncode == 0, made.stderr
    assert "keys and console token left out" not in made.stdout
    again = bxctl(home, "backup", str(archive))
    assert (again.returncode, again.stderr) == (
        1,
        f"bxctl: {archive} exists already; name a new file\n",
    )
    into_used = bxctl(home, "restore", str(archive))
    assert into_used.returncode == 1 and "is not empty" in into_used.stderr
    other = short_tmp / "o"
    restored = bxctl(other, "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    for name in ("keys/owner.key_secret", "keys/console.token", "grants/notes.toml"):
        assert (other / name).read_bytes() == (home / name).read_bytes(), name
        assert (other / name).stat().st_mode & 0o777 == 0o600
    assert "grants naming the home it was made of" in restored.stdout
    assert not list(short_tmp.glob(".*"))  # no staging folder left


def test_a_ledger_that_does_not_verify_is_never_backed_up(short_tmp: Path) -> None:
    from services.brokerd.core import records
    from services.brokerd.ledger.file import Ledger

    home = short_tmp / "h"
    assert bxctl(home, "init").returncode == 0
    path = home / "audit" / "ledger.jsonl"
    ledger = Ledger.open(path, now_ms=lambda: 0)
    for n in range(5):
        ledger.append(*records.started(pid=n, version="t"))
    ledger.close()
    assert bxctl(home, "backup", str(short_tmp / "good.tar.gz")).returncode == 0
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"pid":2', b'"pid":9')
    path.write_bytes(b"\n".join(lines))
    refused = bxctl(home, "backup", str(short_tmp / "bad.tar.gz"))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "line 4: prev does not match the hash of line 3" in refused.stderr, refused.stderr
    assert not (short_tmp / "bad.tar.gz").exists()
    assert sorted(p.name for p in short_tmp.iterdir()) == ["good.tar.gz", "h"]


def test_a_label_lower_than_its_ledger_raised_it_is_refused(short_tmp: Path) -> None:
    """The labels are not in the chain: an archive whose ledger (and head) are the owner's,
    with a label file dropped or lowered and the manifest sealed again, would bring back
    trusted a session that read untrusted content."""
    import hashlib
    import io
    import tarfile

    from bxcore.labels import DataClass, Label
    from services.brokerd.core import records
    from services.brokerd.ledger.file import Ledger
    from services.brokerd.state import StateStore

    home, archive = short_tmp / "h", short_tmp / "a.tar.gz"
    assert bxctl(home, "init").returncode == 0
    trusted, tainted = Label(DataClass.PRIVATE, False), Label(DataClass.PRIVATE, True)
    StateStore(home / "state" / "broker").raise_("chat-1", trusted, tainted)
    ledger = Ledger.open(home / "audit" / "ledger.jsonl", now_ms=lambda: 0)
    ledger.append(*records.started(pid=1, version="t"))
    ledger.append(*records.raised(session="chat-1", from_=trusted, to=tainted))
    ledger.close()
    assert bxctl(home, "backup", str(archive)).returncode == 0
    assert bxctl(short_tmp / "good", "restore", str(archive)).returncode == 0

    label = "state/broker/chat-1.json"
    lowered = json.dumps({"class": "private", "untrusted": False}).encode()
    for n, change in enumerate([{label: lowered}, {label: None}]):
        with tarfile.open(archive) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        manifest = json.loads(members["backup.json"])
        for name, data in change.items():
            if data is None:
                del members[name], manifest["files"][name]
            else:
                members[name] = data
                digest = hashlib.sha256(data).hexdigest()
                manifest["files"][name] = {"size": len(data), "sha256": digest}
        members["backup.json"] = json.dumps(manifest).encode()
        forged = short_tmp / f"forged-{n}.tar.gz"
        with tarfile.open(forged, "w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        refused = bxctl(short_tmp / f"bad-{n}", "restore", str(forged))
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "the archive's label of session 'chat-1'" in refused.stderr, refused.stderr
        assert "lower than its ledger raised it to (Label(private, untrusted)): tampered" in (
            refused.stderr
        )
        assert not (short_tmp / f"bad-{n}").exists()


def hostile(path: Path, *blocks: bytes) -> Path:
    """A gzipped tar of `bxctl backup`'s manifest, then `blocks` as they are (headers and
    data, each a multiple of 512 bytes), then the end of the archive."""
    import gzip
    import tarfile

    manifest = json.dumps({**GOOD, "files": {}}).encode()
    info = tarfile.TarInfo("backup.json")
    info.size = len(manifest)
    with gzip.open(path, "wb") as out:
        out.write(info.tobuf(tarfile.USTAR_FORMAT) + manifest.ljust(512, b"\0"))
        for block in blocks:
            out.write(block)
        out.write(b"\0" * 1024)
    return path


def test_a_header_bomb_is_refused_before_it_is_read(short_tmp: Path) -> None:
    """tarfile reads a pax header whole: 1 MiB of one (a gigabyte would gzip as small) is
    refused unread; so is a sparse member, and an archive that does not begin with its
    manifest."""
    import tarfile

    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 1024 * 1024
    sparse = tarfile.TarInfo("config.toml")
    sparse.type = tarfile.GNUTYPE_SPARSE
    config = tarfile.TarInfo("config.toml")
    cases = [
        (hostile(short_tmp / "pax.tar.gz", pax.tobuf(), b"\0" * pax.size),
         "a member's header is 1048576 bytes, over 65536"),
        (hostile(short_tmp / "sparse.tar.gz", sparse.tobuf(tarfile.GNU_FORMAT)),
         "a sparse member"),
    ]  # fmt: skip
    late = short_tmp / "late.tar.gz"
    with tarfile.open(late, "w:gz") as tar:
        tar.addfile(config, None)
    cases.append((late, "does not begin with backup.json"))
    for n, (archive, said) in enumerate(cases):
        refused = bxctl(short_tmp / f"h{n}", "restore", str(archive))
        assert refused.returncode == 1 and said in refused.stderr, (archive, refused)
        assert not (short_tmp / f"h{n}").exists()


def test_a_flood_of_headers_costs_no_memory(short_tmp: Path) -> None:
    """300 000 folder headers (under a megabyte gzipped) after the manifest: restore reads them
    as they come and keeps none (tarfile's list of them held over 130 MB)."""
    import subprocess
    import sys
    import tarfile

    folder = tarfile.TarInfo("grants")
    folder.type = tarfile.DIRTYPE
    archive = hostile(short_tmp / "flood.tar.gz", folder.tobuf() * 300_000)
    # VmHWM, the peak of this process's memory since its exec (not of the test's, forked)
    peak = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print(open('/proc/self/status').read(), file=sys.stderr))\n"
        f"sys.argv = ['bxctl', '--home', {str(short_tmp / 'h')!r}, 'restore', {str(archive)!r}]\n"
        "runpy.run_module('bxctl', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", peak], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # a manifest naming nothing: an empty home
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("VmHWM:")]
    assert int(line.split()[1]) < 100 * 1024, line


def test_an_archive_larger_than_the_free_space_is_refused_before_it_is_unpacked(
    short_tmp: Path,
) -> None:
    """A member of a petabyte (zeros gzip a thousand to one): refused on the manifest's word,
    before a byte of it is written."""
    import io
    import tarfile

    huge = {**GOOD, "files": {"config.toml": {"size": 2**50, "sha256": "a" * 64}}}
    manifest = json.dumps(huge).encode()
    archive = short_tmp / "huge.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("backup.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    refused = bxctl(short_tmp / "h", "restore", str(archive))
    assert refused.returncode == 1, refused
    assert f"the archive unpacks to {2**50} bytes, and " in refused.stderr, refused.stderr
    assert sorted(p.name for p in short_tmp.iterdir()) == ["huge.tar.gz"]
