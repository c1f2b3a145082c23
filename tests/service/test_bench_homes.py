"""The benches' homes (issue 28 item 5): none takes the console's default port 8420, which
another box on the machine may hold, and a soak whose `bxctl up` fails stops what it started
(here: gatewayd finds no console token it can read, the other three services had started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.box import fresh_home, with_free_console
from bench.soak import Box
from bxcore.config.file import load_config
from tests.support.box import processes_of


def test_a_bench_home_has_a_console_port_of_its_own_unless_its_config_names_one(
    tmp_path: Path,
) -> None:
    home = fresh_home(tmp_path, '[model]\nbase_url = "http://127.0.0.1:9/v1"\n')
    config = load_config(home.config)
    assert config.console.port != 8420
    assert config.model.base_url == "http://127.0.0.1:9/v1"
    named = "[console]\nport = 9999\n"
    assert with_free_console(named) == named


def test_a_soak_whose_bxctl_up_fails_leaves_no_process_behind(short_tmp: Path) -> None:
    box = Box(short_tmp)
    box.prepare()
    token = box.home.console_token
    token.write_text("not a token\n")  # a taken port no longer stops gatewayd (issue 27)
    with pytest.raises(SystemExit, match="bxctl up failed"):
        box.up()
    assert processes_of(box.home.root) == []
