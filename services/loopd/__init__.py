"""loopd, the agent loop (SPEC §10).

httpx, loopd's HTTP client, imports its own command-line client whenever it can: rich, click
and pygments, 81 modules, ~5.7 MB of loopd's memory and ~40 ms of its start, none of it ever
used here. A None in `sys.modules` makes that one import fail, and httpx then goes without it
(its `__init__` expects exactly that ImportError). Set here, before any loopd module imports
httpx; a process that imported httpx before keeps it as it was.
"""

import sys

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
