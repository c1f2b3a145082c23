"""What the supervisor runs (SPEC §13): each service as `python -m <module> --home DIR`, ready
when its main socket answers `ping`; the four daemons in their order, and, for tests, any
other program named `NAME=MODULE:SOCKET`. Pure: no I/O.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bxcore.home.layout import SERVICES, Home


@dataclass(frozen=True)
class ServiceSpec:
    """A supervised program: `python -m <module> --home DIR`, ready when `socket` pongs."""

    name: str
    module: str
    socket: str
    curve_server: str | None = None  # the key pair that serves `socket` with CURVE

    def argv(self, home: Home) -> list[str]:
        return [sys.executable, "-m", self.module, "--home", str(home.root)]


STANDARD: dict[str, ServiceSpec] = {
    "brokerd": ServiceSpec("brokerd", "services.brokerd", "broker"),
    "memoryd": ServiceSpec("memoryd", "services.memoryd", "memory"),
    "loopd": ServiceSpec("loopd", "services.loopd", "loop"),
    "gatewayd": ServiceSpec("gatewayd", "services.gatewayd", "gateway", "gatewayd"),
}
assert tuple(STANDARD) == SERVICES

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_specs(texts: Sequence[str]) -> tuple[ServiceSpec, ...]:
    """The services to supervise: each a standard name, or `NAME=MODULE:SOCKET` (tests'
    own daemons); none given means the four, in order. ValueError (one line) otherwise."""
    if not texts:
        return tuple(STANDARD.values())
    specs: list[ServiceSpec] = []
    for text in texts:
        spec = STANDARD.get(text)
        if spec is None:
            name, _, rest = text.partition("=")
            module, _, socket = rest.rpartition(":")
            valid = _NAME.fullmatch(name) and _NAME.fullmatch(socket)
            if not (valid and _MODULE.fullmatch(module)):
                raise ValueError(
                    f"not a service: {text!r} (one of {', '.join(STANDARD)}, or NAME=MODULE:SOCKET)"
                )
            spec = ServiceSpec(name, module, socket)
        if spec.name in {s.name for s in specs}:
            raise ValueError(f"the service {spec.name} is named twice")
        specs.append(spec)
    return tuple(specs)
