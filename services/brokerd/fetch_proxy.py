"""The fetch proxy (SPEC §8.2): one CONNECT tunnel, for one `http_fetch` call, to one host.

brokerd listens on a fresh Unix socket that only that call's sandbox can see. It accepts one
connection, which must ask `CONNECT <the checked host>:443`; it resolves the name itself and
refuses loopback, private, link-local, multicast and other non-public addresses (the
DNS-rebinding guard), connects, answers 200 and relays bytes until either side closes. TLS
runs end to end through it. `fetch_pins` (config, for tests) names an address for a host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
from anyio.abc import ByteStream, SocketStream

log = logging.getLogger(__name__)

MAX_HEAD = 8192
Resolver = Callable[[str, int], Awaitable[list[str]]]


def public(address: str) -> bool:
    """True for an address a fetch may reach: not loopback, private, link-local, multicast,
    unspecified or reserved (an IPv4-mapped IPv6 address is judged as its IPv4 address)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_unspecified
        or ip.is_reserved
        or not ip.is_global
    )


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of `host`, by the system's resolver."""
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in found]


def parse_pin(pin: str) -> tuple[str, int]:
    """`"127.0.0.1:8443"` or `"[::1]:8443"` as (address, port); config has checked it."""
    address, _, port = pin.rpartition(":")
    return address.strip("[]"), int(port)


class Refused(Exception):
    """Why the tunnel was not opened; answered to the sandbox as a 403 with this text."""


async def _read_head(stream: ByteStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await stream.receive(MAX_HEAD)
        head += chunk
        if len(head) > MAX_HEAD:
            raise Refused("the request head is too long")
    return head


def target_of(head: bytes, host: str) -> None:
    """Check the request line is exactly `CONNECT host:443 HTTP/1.x`; Refused otherwise."""
    line = head.split(b"\r\n", 1)[0].decode("ascii", "replace")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise Refused(f"not a CONNECT request: {line[:80]!r}")
    if parts[1] != f"{host}:443":
        raise Refused(f"this call may reach only {host}:443, not {parts[1][:80]}")


class OneTunnel:
    """A listener that opens at most one tunnel, to `host`, and then stops."""

    def __init__(
        self,
        path: Path,
        host: str,
        *,
        pins: Mapping[str, str],
        timeout_s: float,
        resolver: Resolver = resolve,
    ) -> None:
        self.path = path
        self.host = host
        self._pins = pins
        self._timeout = timeout_s
        self._resolver = resolver
        self.outcome = "no connection"

    def __repr__(self) -> str:
        return f"OneTunnel({self.host} at {self.path}: {self.outcome})"

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = await anyio.create_unix_listener(self.path)
        task_status.started()
        async with listener:  # one connection, then the socket is closed
            client = await listener.accept()
        async with client:
            await self._tunnel(client)

    async def _tunnel(self, client: SocketStream) -> None:
        try:
            with anyio.fail_after(self._timeout):
                head = await _read_head(client)
                target_of(head, self.host)
                address, port = await self._address()
                upstream = await anyio.connect_tcp(address, port)
        except Refused as why:
            self.outcome = f"refused: {why}"
            log.info("fetch proxy: %s", self.outcome)
            await _answer(client, b"403 Forbidden", str(why))
            return
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream) as error:
            self.outcome = f"failed: {error or type(error).__name__}"
            await _answer(client, b"502 Bad Gateway", self.outcome)
            return
        self.outcome = f"tunnel to {address}:{port}"
        async with upstream:
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with anyio.move_on_after(self._timeout):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_pump, client, upstream, tasks.cancel_scope)
                    tasks.start_soon(_pump, upstream, client, tasks.cancel_scope)

    async def _address(self) -> tuple[str, int]:
        pin = self._pins.get(self.host)
        if pin is not None:
            return parse_pin(pin)
        try:
            addresses = await self._resolver(self.host, 443)
        except OSError as error:
            raise Refused(f"{self.host} does not resolve: {error}") from None
        usable = [a for a in addresses if public(a)]
        if not usable:
            shown = ", ".join(addresses[:3]) or "nothing"
            raise Refused(f"{self.host} resolves to {shown}, which is not a public address")
        return usable[0], 443


async def _answer(client: ByteStream, status: bytes, why: str) -> None:
    body = why.encode("utf-8", "replace")[:500]
    head = b"HTTP/1.1 %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(body))
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(head + body)


async def _pump(source: ByteStream, sink: ByteStream, scope: anyio.CancelScope) -> None:
    try:
        while True:
            await sink.send(await source.receive(65536))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()
