"""A broken `config.toml` stops `bxctl up` before anything starts (SPEC §14, I7): one line
naming the key, exit 1, and no process, pid file or socket of the box. (A broken grant file is
in test_conversation.py: the box starts without it.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.box import box_home, bxctl, processes_of
from tests.support.daemons import init_home

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def home(short_tmp: Path) -> Iterator[Path]:
    with box_home(short_tmp) as home:
        yield home


def test_an_api_key_written_into_the_config_stops_up_with_one_line_that_hides_it(
    home: Path,
) -> None:
    init_home(home, f'[model]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{SECRET}"\n')
    result = bxctl(home, "up")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"bxctl: {home}/config.toml: [model] api_key: unknown key; nothing was started\n"
    )
    assert SECRET not in result.stderr
    assert processes_of(home) == []
    assert not (home / "run" / "supervisor.pid").exists()
    assert list((home / "run").iterdir()) == []
    assert list((home / "logs").iterdir()) == []
    status = bxctl(home, "status")
    assert (status.returncode, status.stdout) == (3, "not running; start it with `bxctl up`\n")
