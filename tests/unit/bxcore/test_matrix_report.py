"""The phone channel's report (SPEC §21.1): the backoff, and the line `bxctl status` and the
console show for each state."""

from __future__ import annotations

from pathlib import Path

import pytest

from bxcore.home.layout import Home
from bxcore.matrix_report import Link, LinkState, Report, backoff_s, read_line


@pytest.mark.parametrize(
    ("failures", "seconds"), [(0, 0.0), (1, 0.5), (2, 1.0), (3, 2.0), (7, 30.0), (500, 30.0)]
)
def test_the_backoff_doubles_from_half_a_second_to_thirty(failures: int, seconds: float) -> None:
    assert backoff_s(failures) == seconds


@pytest.mark.parametrize(
    ("state", "reason", "joined", "said", "style"),
    [
        (LinkState.SYNCING, "", True,
         "matrix: syncing as @box:x.org in !r (encrypted) since t", ""),
        (LinkState.AWAY, "the homeserver does not answer", True,
         "matrix: away as @box:x.org in !r (encrypted) since t: the homeserver does not answer",
         "yellow"),
        (LinkState.FAILED, "no token", False,
         "matrix: failed as @box:x.org in !r (not joined yet: invite the box from an owner's "
         "account) since t: no token", "red"),
    ],
)  # fmt: skip
def test_each_state_is_one_line(
    short_tmp: Path, state: LinkState, reason: str, joined: bool, said: str, style: str
) -> None:
    home = Home(short_tmp)
    home.ensure_run()
    assert read_line(home) is None
    Report(home).set(Link(state, "t", "@box:x.org", "!r", reason, joined, True))
    assert read_line(home) == (said, style)
