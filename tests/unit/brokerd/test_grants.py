"""Grant files: strict parsing, invalid grants with why, and a folder seen at the next read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.labels import DataClass
from services.brokerd.core.grants import Grant, InvalidGrant, Mode, parse_grant
from services.brokerd.grants_folder import GrantsFolder, read_folder

NOTES = b'tool = "read_file"\nmode = "allow"\npath = "/home/kyle/notes"\nnote = "my notes"\n'


def test_a_valid_grant_carries_every_field_and_the_sha256_of_its_bytes() -> None:
    grant = parse_grant("notes", NOTES)
    assert grant == Grant(
        "notes",
        "read_file",
        Mode.ALLOW,
        "/home/kyle/notes",
        None,
        DataClass.PRIVATE,
        False,
        "my notes",
        hashlib.sha256(NOTES).hexdigest(),
    )


def test_a_fetch_grant_is_untrusted_unless_it_says_otherwise() -> None:
    wiki = parse_grant("wiki", b'tool = "http_fetch"\nmode = "allow"\nhost = "*.wikipedia.org"\n')
    assert isinstance(wiki, Grant) and wiki.untrusted and wiki.host == "*.wikipedia.org"
    own = parse_grant(
        "own", b'tool = "http_fetch"\nmode = "allow"\nhost = "me.example.org"\nuntrusted = false\n'
    )
    assert isinstance(own, Grant) and not own.untrusted


def test_a_memory_grant_names_no_place() -> None:
    grant = parse_grant("memory", b'tool = "memory"\nmode = "allow"\n')
    assert isinstance(grant, Grant) and grant.path is None and grant.host is None


@pytest.mark.parametrize(
    "grant_id, content, why",
    [
        ("Notes", NOTES, "not a grant id"),
        ("-notes", NOTES, "not a grant id"),
        ("n" * 65, NOTES, "not a grant id"),
        ("x", NOTES + b'colour = "blue"\n', "unknown key 'colour'"),
        ("x", b'mode = "allow"\npath = "/a"\n', "tool: missing"),
        ("x", b'tool = "read_file"\npath = "/a"\n', "mode: missing"),
        ("x", b'tool = "launch"\nmode = "allow"\n', "tool: 'launch' is not one of"),
        ("x", b'tool = "spawn"\nmode = "allow"\n', "tool: 'spawn' is not one of"),
        ("x", b'tool = "read_file"\nmode = "maybe"\npath = "/a"\n', "mode: expected"),
        ("x", b'tool = "read_file"\nmode = "allow"\n', "path: missing"),
        ("x", b'tool = "read_file"\nmode = "allow"\npath = "/a/"\n', "not a valid path"),
        ("x", b'tool = "read_file"\nmode = "allow"\npath = "a"\n', "not a valid path"),
        ("x", b'tool = "read_file"\nmode = "allow"\npath = "/a/../b"\n', "not a valid path"),
        ("x", b'tool = "read_file"\nmode = "allow"\npath = "/a\\u0000"\n', "not a valid path"),
        ("x", b'tool = "read_file"\nmode = "allow"\npath = "/dev"\n', "/dev is every sandbox"),
        ("x", b'tool = "shell"\nmode = "allow"\npath = "/dev/shm"\n', "/dev is every sandbox"),
        ("x", b'tool = "write_file"\nmode = "deny"\npath = "/proc/1"\n', "/proc is every"),
        (
            "x",
            b'tool = "read_file"\nmode = "allow"\npath = "/a"\nhost = "a.com"\n',
            "takes no host",
        ),
        ("x", b'tool = "http_fetch"\nmode = "allow"\n', "host: missing"),
        ("x", b'tool = "http_fetch"\nmode = "allow"\nhost = "*.com"\n', "not a host name"),
        ("x", b'tool = "http_fetch"\nmode = "allow"\nhost = "127.0.0.1"\n', "not a host name"),
        (
            "x",
            b'tool = "http_fetch"\nmode = "allow"\nhost = "a.com"\npath = "/"\n',
            "takes no path",
        ),
        ("x", b'tool = "memory"\nmode = "allow"\npath = "/"\n', "takes no path"),
        ("x", NOTES + b'class = "top"\n', "class: expected"),
        ("x", NOTES + b"class = 2\n", "class: expected a string"),
        ("x", NOTES + b'untrusted = "yes"\n', "untrusted: expected true or false"),
        ("x", NOTES + b"untrusted = 1\n", "untrusted: expected true or false"),
        ("x", b"tool = 3\nmode = 'allow'\n", "tool: expected a string"),
        ("x", b'tool = ["read_file"]\nmode = "allow"\n', "tool: expected a string"),
        ("x", NOTES + b'tool = "shell"\n', "not TOML"),
        ("x", b"tool = \n", "not TOML"),
        ("x", b'tool = "read_file"\x00\n', "not TOML"),
        ("x", b'tool = "read\xff"\n', "not UTF-8"),
        ("x", b"# " + b"x" * 70_000, "larger than"),
        ("x", b"[section]\ntool = 'memory'\n", "unknown key 'section'"),
    ],
)
def test_an_invalid_grant_says_why_in_one_line(grant_id: str, content: bytes, why: str) -> None:
    grant = parse_grant(grant_id, content)
    assert isinstance(grant, InvalidGrant)
    assert why in grant.problem
    assert "\n" not in grant.problem
    assert grant.sha256 == hashlib.sha256(content).hexdigest()


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_any_bytes_give_a_grant_or_an_invalid_grant(content: bytes) -> None:
    assert isinstance(parse_grant("x", content), Grant | InvalidGrant)


def test_a_folder_is_read_with_its_invalid_grants_and_other_files_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.toml").write_bytes(NOTES)
    (tmp_path / "bad.toml").write_bytes(b"tool = 1")
    (tmp_path / "notes.toml~").write_bytes(b"junk")
    (tmp_path / ".hidden.toml").write_bytes(b"junk")
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "dir.toml").mkdir()
    grants = read_folder(tmp_path)
    assert [g.id for g in grants.valid] == ["notes"]
    problems = {g.id: g.problem for g in grants.invalid}
    assert set(problems) == {"bad", "dir", "fifo"}
    assert "not a regular file" in problems["fifo"]


def test_a_missing_folder_is_no_grants(tmp_path: Path) -> None:
    assert read_folder(tmp_path / "nowhere").valid == ()


def test_a_changed_folder_is_seen_at_the_next_read(tmp_path: Path) -> None:
    folder = GrantsFolder(tmp_path)
    assert folder.current().valid == ()
    (tmp_path / "notes.toml").write_bytes(NOTES)
    assert [g.id for g in folder.current().valid] == ["notes"]
    (tmp_path / "notes.toml").write_bytes(NOTES.replace(b"allow", b"deny"))
    assert folder.current().valid[0].mode is Mode.DENY
    (tmp_path / "notes.toml").unlink()
    assert folder.current().valid == ()


def test_an_unchanged_folder_is_not_read_again(tmp_path: Path) -> None:
    (tmp_path / "notes.toml").write_bytes(NOTES)
    folder = GrantsFolder(tmp_path)
    first = folder.current()
    assert folder.current() is first


def test_a_folder_made_after_the_watch_began_is_seen(tmp_path: Path) -> None:
    folder = GrantsFolder(tmp_path / "grants")
    assert folder.current().valid == ()
    (tmp_path / "grants").mkdir()
    (tmp_path / "grants" / "notes.toml").write_bytes(NOTES)
    assert [g.id for g in folder.current().valid] == ["notes"]


def test_a_folder_removed_and_made_again_is_seen(tmp_path: Path) -> None:
    grants = tmp_path / "grants"
    grants.mkdir()
    (grants / "notes.toml").write_bytes(NOTES)
    folder = GrantsFolder(grants)
    assert len(folder.current().valid) == 1
    (grants / "notes.toml").unlink()
    grants.rmdir()
    assert folder.current().valid == ()
    grants.mkdir()
    (grants / "other.toml").write_bytes(NOTES)
    assert [g.id for g in folder.current().valid] == ["other"]


def test_a_grant_renamed_into_place_is_seen(tmp_path: Path) -> None:
    folder = GrantsFolder(tmp_path)
    folder.current()
    (tmp_path / ".notes.toml.new").write_bytes(NOTES)
    assert folder.current().valid == ()
    os.rename(tmp_path / ".notes.toml.new", tmp_path / "notes.toml")
    assert [g.id for g in folder.current().valid] == ["notes"]


def test_a_grant_edited_in_place_to_the_same_size_is_seen(tmp_path: Path) -> None:
    (tmp_path / "notes.toml").write_bytes(NOTES)
    folder = GrantsFolder(tmp_path)
    assert folder.current().valid[0].mode is Mode.ALLOW
    with open(tmp_path / "notes.toml", "r+b") as file:
        file.write(NOTES.replace(b'mode = "allow"', b'mode = "ask!!"'))
    assert folder.current().invalid[0].id == "notes"
