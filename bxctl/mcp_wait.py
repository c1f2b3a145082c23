"""`bxctl mcp show | trust` right after `bxctl up` (issue 27): brokerd lists each server's
tools once it has started (5 to 12 s under load), so these wait for the listing, saying so,
for a bounded time, while brokerd runs and has not said the server failed to start.

Time is read and slept through seams (`now`, `sleep`), so a test waits for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bxcore import mcp_state
from bxcore.config.mcp import McpServer
from bxcore.home.layout import Home
from bxcore.home.runlock import holder
from bxcore.mcp_tools import ToolDef

MARGIN_S = 20.0  # beyond the server's own start_s: brokerd's start, and the box's load
POLL_S = 0.2
PROGRESS_S = 5.0  # a line this often while waiting


def listing(
    home: Home,
    server: McpServer,
    progress: Callable[[str], None],
    *,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[ToolDef, ...]:
    """What brokerd listed of `server`, waited for at most its `start_s` + MARGIN_S while
    brokerd runs (`progress` is told as time passes); `mcp_state.NotListed` (its
    `StartError` when brokerd said why) when there is none by then, or brokerd is not up."""
    bound = server.start_s + MARGIN_S
    began = now()
    said: float | None = None  # when the last progress line was said
    while True:
        try:
            return mcp_state.listing(home, server.name)
        except mcp_state.StartError:
            raise
        except mcp_state.NotListed:
            waited = now() - began
            if holder(home.lock("brokerd")) is None or waited >= bound:
                raise
        if said is None:
            progress(
                f"waiting for brokerd to list the tools of {server.name} (at most {bound:g} s)…"
            )
            said = waited
        elif waited - said >= PROGRESS_S:
            progress(f"… still waiting ({waited:.0f} s)")
            said = waited
        sleep(POLL_S)
