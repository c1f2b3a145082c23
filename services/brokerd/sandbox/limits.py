"""A shell's rlimits (SPEC §8.2), set by brokerd on the sandbox's first process while bwrap
holds it, so that the toolkit and everything the command starts inherit them.

The toolkit set them itself before, which cost it `import resource` (0.3 ms of each shell
call, issue 15). bwrap makes that process, reports its pid (`--info-fd`) and waits for a
byte (`--userns-block-fd` or `--block-fd`) before it starts anything in the sandbox; brokerd
sets the limits in between (`child.Hold.ready`). Unconfined (`[sandbox] mode = "none"`) the
toolkit still sets them on itself (`BX_MEMORY_MB`, `BX_MAX_PROCESSES`).
"""

from __future__ import annotations

import resource

MIB = 1024 * 1024


def set_on(pid: int, memory_mb: int | None, processes: int | None) -> None:
    """No core dump, `RLIMIT_AS` of `memory_mb` MiB and `RLIMIT_NPROC` of `processes` (None:
    left as they are) for process `pid` (0: this one). OSError if the kernel says no."""
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    if memory_mb is not None:
        size = memory_mb * MIB
        resource.prlimit(pid, resource.RLIMIT_AS, (size, size))
    if processes is not None:
        resource.prlimit(pid, resource.RLIMIT_NPROC, (processes, processes))
