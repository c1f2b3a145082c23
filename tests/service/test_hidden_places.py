"""What a narrower grant denies or labels higher is hidden in every sandbox of a wider one.

Grants: read_file, write_file and shell allow `/…/home` (private); read_file allows
`/…/home/vault` as secret; read_file denies `/…/home/closed`. A link, a shell, or a rename
inside `home` must never show the vault's or the closed folder's content under `home`'s
private label.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.labels import DataClass
from bxcore.wire.messages import Done, ToolRequest, ToolResponse
from tests.support.daemons import Daemon, init_home, running

_calls = itertools.count()


def grant(home: Path, name: str, tool: str, path: Path, *extra: str) -> None:
    lines = [f'tool = "{tool}"', f'mode = "{extra[0] if extra else "allow"}"', f'path = "{path}"']
    lines += list(extra[1:])
    (home / "grants" / f"{name}.toml").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def box() -> Iterator[tuple[Daemon, Path]]:
    root = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    home = init_home(root / "h")
    place = root / "home"
    (place / "vault").mkdir(parents=True)
    (place / "closed").mkdir()
    (place / "vault" / "s.txt").write_text("the secret")
    (place / "closed" / "c.txt").write_text("closed content")
    (place / "open.txt").write_text("open content")
    (place / "to-vault").symlink_to("vault/s.txt")
    (place / "to-closed").symlink_to("closed/c.txt")
    for tool in ("read_file", "write_file", "shell"):
        grant(home, f"home-{tool.replace('_', '-')}", tool, place)
    grant(home, "vault", "read_file", place / "vault", "allow", 'class = "secret"')
    grant(home, "closed", "read_file", place / "closed", "deny")
    try:
        with running("brokerd", home) as brokerd:
            yield brokerd, place
    finally:
        shutil.rmtree(root, ignore_errors=True)


def call(brokerd: Daemon, tool: str, **arguments: str) -> ToolResponse:
    n = next(_calls)
    answer = brokerd.ask(ToolRequest(f"r{n}", f"s{n}", f"c{n}", tool, json.dumps(arguments)))
    assert isinstance(answer, ToolResponse)
    return answer


def output(answer: ToolResponse) -> str:
    assert isinstance(answer.outcome, Done), answer
    return answer.outcome.output


def test_an_open_file_is_read_under_the_wide_grant(box: tuple[Daemon, Path]) -> None:
    brokerd, place = box
    assert output(call(brokerd, "read_file", path=f"{place}/open.txt")) == "open content"


def test_the_vault_is_still_read_under_its_own_secret_grant(box: tuple[Daemon, Path]) -> None:
    brokerd, place = box
    answer = call(brokerd, "read_file", path=f"{place}/vault/s.txt")
    assert output(answer) == "the secret"
    assert isinstance(answer.outcome, Done) and answer.outcome.label.class_ is DataClass.SECRET


@pytest.mark.parametrize("link", ["to-vault", "to-closed"])
def test_a_link_into_a_narrower_grant_reads_nothing_under_the_wide_one(
    box: tuple[Daemon, Path], link: str
) -> None:
    brokerd, place = box
    answer = call(brokerd, "read_file", path=f"{place}/{link}")
    assert isinstance(answer.outcome, Done) and not answer.outcome.ok
    assert "no such file" in answer.outcome.output


def test_a_shell_under_the_wide_grant_sees_the_hidden_folders_empty(
    box: tuple[Daemon, Path],
) -> None:
    brokerd, place = box
    text = output(
        call(
            brokerd,
            "shell",
            command="cat vault/s.txt closed/c.txt; ls -A vault closed; cat open.txt",
            cwd=str(place),
        )
    )
    assert "the secret" not in text and "closed content" not in text
    assert "open content" in text


def test_a_shell_cannot_move_a_hidden_folder_out_from_under_its_cover(
    box: tuple[Daemon, Path],
) -> None:
    brokerd, place = box
    text = output(
        call(brokerd, "shell", command="mv vault moved; rm -rf closed; ls", cwd=str(place))
    )
    assert "moved" not in text.split()
    assert (place / "vault" / "s.txt").read_text() == "the secret"
    assert (place / "closed" / "c.txt").read_text() == "closed content"
    assert not (place / "moved").exists()


def test_a_write_through_a_link_into_the_vault_changes_nothing(box: tuple[Daemon, Path]) -> None:
    brokerd, place = box
    call(brokerd, "write_file", path=f"{place}/to-vault", content="overwritten")
    assert (place / "vault" / "s.txt").read_text() == "the secret"
