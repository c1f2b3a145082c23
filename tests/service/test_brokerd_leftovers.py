"""A sandbox setup that a killed brokerd left waiting is ended by the next brokerd's start
(`services.brokerd.sandbox.leftovers`): bwrap's setup process, held by `--userns-block-fd`, waits
for ever once bwrap dies before releasing it. The test makes one with real bwrap, as a
brokerd killed at that moment leaves it, under the home's mark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from services.brokerd.sandbox.leftovers import mark, sweep
from tests.support.daemons import init_home, running

BWRAP = shutil.which("bwrap")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def left_waiting(home: Path) -> int:
    """bwrap started under `home`'s mark and killed while it holds its setup process: that
    process's pid, waiting for ever."""
    assert BWRAP is not None
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    argv = [mark(home), "--unshare-all", "--unshare-user", "--die-with-parent"]
    argv += ["--info-fd", str(info_w), "--userns-block-fd", str(block_r)]
    argv += ["--ro-bind", "/", "/", "true"]
    outer = subprocess.Popen(
        argv, executable=BWRAP, pass_fds=(info_w, block_r), start_new_session=True
    )
    os.close(info_w)
    os.close(block_r)
    with os.fdopen(info_r, "rb") as info:
        setup = int(json.loads(info.read())["child-pid"])
    outer.kill()
    outer.wait()
    os.close(block_w)
    time.sleep(0.2)
    return setup


@pytest.mark.skipif(BWRAP is None, reason="bwrap is not installed")
def test_a_setup_left_waiting_is_ended_by_the_next_brokerd_of_its_home(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    other = init_home(short_tmp / "o")
    setup, elsewhere = left_waiting(home), left_waiting(other)
    assert alive(setup) and alive(elsewhere), "bwrap's setup waits on after bwrap died"
    try:
        with running("brokerd", home) as brokerd:
            assert not alive(setup)
            assert alive(elsewhere), "another home's is not this brokerd's to end"
            assert "ended 1 sandbox setups a killed brokerd left waiting" in brokerd.output()
    finally:
        assert sweep(mark(other)) == [elsewhere]
