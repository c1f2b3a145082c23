"""A box without a phone channel never loads matrix-nio (SPEC §17's startup and memory).

matrix-nio, with aiohttp and vodozemac, was a third of gatewayd's start and 30 MB of its
memory, and the four services' idle RSS missed its 160 MB target: only a `[matrix]` table
may load it (`services.gatewayd.daemon` imports the channel where it builds one)."""

from __future__ import annotations

import subprocess
import sys

from bxcore.home.layout import SERVICES

HEAVY = ("nio", "aiohttp", "vodozemac")


def test_no_service_imports_matrix_nio_until_a_matrix_table_asks_for_it() -> None:
    daemons = "; ".join(f"import services.{name}.daemon" for name in SERVICES)
    probe = f"{daemons}; import sys; print(sorted(set({HEAVY!r}) & set(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
