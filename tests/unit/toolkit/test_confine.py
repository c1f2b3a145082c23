"""What the toolkit checks before it reads a byte (`toolkit.confine`): each bound folder is the
one brokerd checked, and BX_USER is a user other than root. Becoming that user needs a
sandbox; tests/service/test_confinement.py shows it done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.toolkit.confine import ConfineError, confine


def bound(*entries: tuple[Path, int, int]) -> dict[bytes, bytes]:
    value = ";".join(f"{dev}:{ino}:{str(path).encode().hex()}" for path, dev, ino in entries)
    return {b"BX_BOUND": value.encode()}


def test_folders_that_are_what_brokerd_checked_pass(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first, second = os.stat(tmp_path), os.stat(tmp_path / "a")
    confine(
        bound(
            (tmp_path, first.st_dev, first.st_ino), (tmp_path / "a", second.st_dev, second.st_ino)
        )
    )
    confine({})  # nothing asked, nothing done


def test_a_folder_that_is_another_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    other = os.stat(tmp_path / "b")
    with pytest.raises(ConfineError, match="a is not the folder brokerd checked"):
        confine(bound((tmp_path / "a", other.st_dev, other.st_ino)))


def test_a_folder_swapped_for_a_link_to_the_one_checked_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    real = os.stat(tmp_path / "real")
    with pytest.raises(ConfineError):
        confine(bound((tmp_path / "link", real.st_dev, real.st_ino)))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfineError, match="not the folder brokerd checked"):
        confine(bound((tmp_path / "gone", 1, 2)))


@pytest.mark.parametrize(
    "environ, why",
    [
        ({b"BX_BOUND": b"nonsense"}, "BX_BOUND is malformed"),
        ({b"BX_BOUND": b"1:2:zz"}, "BX_BOUND is malformed"),
        ({b"BX_USER": b"65534"}, "BX_USER is not uid:gid"),
        ({b"BX_USER": b"a:b"}, "BX_USER is not uid:gid"),
        ({b"BX_USER": b"0:65534"}, "BX_USER may not be root"),
        ({b"BX_USER": b"65534:0"}, "BX_USER may not be root"),
    ],
)
def test_what_brokerd_would_never_send_is_refused_before_anything_changes(
    environ: dict[bytes, bytes], why: str
) -> None:
    before = (os.getuid(), os.getgid(), os.getgroups())
    with pytest.raises(ConfineError, match=why):
        confine(environ)
    assert (os.getuid(), os.getgid(), os.getgroups()) == before
