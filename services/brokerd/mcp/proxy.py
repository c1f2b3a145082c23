"""The egress of an MCP server with `hosts` (SPEC §18.1, §8.2): a CONNECT proxy on a Unix
socket, bound into that server's sandbox (where `inside/bridge.py` offers it on loopback as
HTTPS_PROXY), that opens tunnels to port 443 of exactly the entry's hosts, resolved here with
the DNS-rebinding guard of the fetch proxy. TLS runs end to end through it.

It lives as long as the runner and serves every process of its server; it never reads or
changes what flows through a tunnel.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from services.brokerd.sandbox.fetch_proxy import (
    Connector,
    Refused,
    Resolver,
    Stream,
    _answer,
    _read_head,
    _UnixEnd,
    address_of,
    host_allowed,
    requested_host,
    resolve,
    splice,
)

log = logging.getLogger(__name__)

HEAD_S = 10.0  # a client has this long to send its CONNECT line


class HostsProxy:
    """Tunnels for server `name` to its `hosts` only, for as long as `serve` runs."""

    def __init__(
        self,
        name: str,
        path: Path,
        hosts: tuple[str, ...],
        *,
        pins: Mapping[str, str],
        resolver: Resolver = resolve,
        connect: Connector = anyio.connect_tcp,
    ) -> None:
        self.name = name
        self.path = path
        self.hosts = hosts
        self._pins = pins
        self._resolver = resolver
        self._connect = connect
        self.opened = 0
        self.refused = 0

    def __repr__(self) -> str:
        return (
            f"HostsProxy({self.name} to {', '.join(self.hosts)}: "
            f"{self.opened} tunnels, {self.refused} refused)"
        )

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a socket a killed brokerd left
        listener = await anyio.create_unix_listener(self.path)
        self.path.chmod(0o666)  # the server's user connects to it (read-only bind inside)
        task_status.started()
        try:
            async with listener, anyio.create_task_group() as tasks:
                while True:
                    accepted = await listener.accept()
                    tasks.start_soon(self._one, accepted)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _one(self, accepted: anyio.abc.SocketStream) -> None:
        async with accepted:
            client = _UnixEnd(accepted.extra(SocketAttribute.raw_socket))
            await self._tunnel(client)

    async def _tunnel(self, client: Stream) -> None:
        try:
            with anyio.fail_after(HEAD_S):
                head, rest = await _read_head(client)
            host = requested_host(head)
            if not host_allowed(host, self.hosts):
                raise Refused(f"MCP server {self.name} may reach only {', '.join(self.hosts)}")
            address, port = await address_of(host, self._pins, self._resolver)
            upstream = await self._connect(address, port)
        except Refused as why:
            self.refused += 1
            log.info("MCP proxy %s: refused: %s", self.name, why)
            await _answer(client, b"403 Forbidden", str(why))
            return
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream) as error:
            await _answer(client, b"502 Bad Gateway", f"failed: {error or type(error).__name__}")
            return
        self.opened += 1
        log.info("MCP proxy %s: tunnel to %s (%s:%d)", self.name, host, address, port)
        await splice(client, upstream, rest)
