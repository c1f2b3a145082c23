"""The supervisor socket's messages (SPEC §13): each supervised service's state, and the
owner's status, restart and stop of one service or of the whole box. Pure: no I/O.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from bxcore.frozen import frozen
from bxcore.wire.common import Asks, Count, RequestId, Short


class ServiceState(enum.StrEnum):
    """A supervised service's life (§13): the supervisor's table says how it moves."""

    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@frozen
class ServiceInfo:
    """One supervised service: its state, process, restarts and how it last ended."""

    name: Short
    state: ServiceState
    restarts: Count
    since: Short  # when it entered its state
    pid: Count | None = None
    last_exit: Short | None = None  # "exit 1", "signal 9"


@frozen
class SupervisorStatus(Asks["SupervisorReport"]):
    TYPE: ClassVar[str] = "supervisor_status"
    id: RequestId


@frozen
class SupervisorRestart(Asks["SupervisorReport"]):
    """Restart one service, or all of them in order when `service` is absent."""

    TYPE: ClassVar[str] = "supervisor_restart"
    id: RequestId
    service: Short | None = None


@frozen
class SupervisorStop(Asks["SupervisorReport"]):
    """Stop one service (it stays stopped), or the whole box when `service` is absent."""

    TYPE: ClassVar[str] = "supervisor_stop"
    id: RequestId
    service: Short | None = None


@frozen
class SupervisorReport:
    TYPE: ClassVar[str] = "supervisor_report"
    id: RequestId
    pid: Count
    sandbox: Short  # the [sandbox] mode: "bwrap" or "none" (UNSANDBOXED)
    services: tuple[ServiceInfo, ...]
    console: Short | None = None  # the console's URL, when gatewayd serves one
