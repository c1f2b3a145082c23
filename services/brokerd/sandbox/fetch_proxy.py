"""The fetch proxy (SPEC §8.2): one CONNECT tunnel, for one `http_fetch` call, to one host.

brokerd listens on a fresh Unix socket that only that call's sandbox can see. It accepts one
connection, which must ask `CONNECT <the checked host>:443`; it resolves the name itself and
refuses loopback, private, link-local, multicast and other non-public addresses (the
DNS-rebinding guard), connects to the address it checked, answers 200 and relays bytes until
either side closes or the deadline passes. TLS runs end to end through it. `fetch_pins`
(config, for tests) names an address for a host. It never connects anywhere else.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import ByteStream, SocketAttribute

from bxcore import aio

log = logging.getLogger(__name__)

MAX_HEAD = 8192
Resolver = Callable[[str, int], Awaitable[list[str]]]
Connector = Callable[[str, int], Awaitable[ByteStream]]
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def public(address: str) -> bool:
    """True for an address a fetch may reach: not loopback, private, link-local, multicast,
    unspecified or reserved. An IPv4-mapped IPv6 address is judged as its IPv4 address; a
    6to4 or NAT64 one must pass both as itself and as the IPv4 address it carries."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _global(ip.ipv4_mapped)
        carried = ip.sixtofour
        if ip in NAT64:
            carried = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if carried is not None and not _global(carried):
            return False
    return _global(ip)


def _global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
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


class Stream(Protocol):
    """What the relay needs of either end."""

    async def receive(self, max_bytes: int = 65536, /) -> bytes: ...
    async def send(self, item: bytes, /) -> None: ...
    async def send_eof(self) -> None: ...


class _UnixEnd:
    """The accepted connection, read and written with asyncio's own socket calls. anyio's
    Unix streams (4.16) can fail a read cancelled just as data arrives with InvalidStateError
    in a loop callback, and a tunnel is cancelled whenever its call ends; asyncio's
    `sock_recv` and `sock_sendall` check for that. The socket stays owned by anyio's stream."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = aio.loop()

    async def receive(self, max_bytes: int = 65536, /) -> bytes:
        data = await self._loop.sock_recv(self._sock, max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes, /) -> None:
        await self._loop.sock_sendall(self._sock, item)

    async def send_eof(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)


async def _read_head(stream: Stream) -> tuple[bytes, bytes]:
    """The request head (through its blank line), and what came after it in the same reads:
    the start of the tunnel, which is relayed, not dropped."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0 and end + 4 <= MAX_HEAD:
            return data[: end + 4], data[end + 4 :]
        if len(data) >= MAX_HEAD:
            raise Refused("the request head is too long")
        try:
            data += await stream.receive(MAX_HEAD)
        except anyio.EndOfStream:
            raise Refused("the connection closed before a whole request head") from None


def requested_host(head: bytes) -> str:
    """The host of a request line that is exactly `CONNECT host:443 HTTP/1.x`; Refused
    otherwise."""
    line = head.split(b"\r\n", 1)[0].decode("ascii", "replace")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise Refused(f"not a CONNECT request: {line[:80]!r}")
    host, colon, port = parts[1].rpartition(":")
    if not colon or port != "443" or not host:
        raise Refused(f"only port 443 may be reached, not {parts[1][:80]}")
    return host


def target_of(head: bytes, host: str) -> None:
    """Check the request line is exactly `CONNECT host:443 HTTP/1.x`; Refused otherwise."""
    line = head.split(b"\r\n", 1)[0].decode("ascii", "replace")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise Refused(f"not a CONNECT request: {line[:80]!r}")
    if parts[1] != f"{host}:443":
        raise Refused(f"this call may reach only {host}:443, not {parts[1][:80]}")


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether `host` is one of `patterns` (`[[mcp]] hosts`): a name exactly, or `*.base`
    for any name under base (not base itself). Case does not matter; a trailing dot does."""
    name = host.lower()
    for pattern in patterns:
        wanted = pattern.lower()
        if wanted.startswith("*."):
            if name.endswith(wanted[1:]) and len(name) > len(wanted) - 1:
                return True
        elif name == wanted:
            return True
    return False


async def address_of(host: str, pins: Mapping[str, str], resolver: Resolver) -> tuple[str, int]:
    """Where a tunnel to `host`:443 goes: its pin, else its first public address."""
    pin = pins.get(host)
    if pin is not None:
        return parse_pin(pin)
    try:
        addresses = await resolver(host, 443)
    except OSError as error:
        raise Refused(f"{host} does not resolve: {error}") from None
    usable = [a for a in addresses if public(a)]
    if not usable:
        shown = ", ".join(addresses[:3]) or "nothing"
        raise Refused(f"{host} resolves to {shown}, which is not a public address")
    return usable[0], 443


class OneTunnel:
    """A listener that opens at most one tunnel, to `host`, and then stops. Everything, from
    the accepted connection to the last relayed byte, happens within `timeout_s`."""

    def __init__(
        self,
        path: Path,
        host: str,
        *,
        pins: Mapping[str, str],
        timeout_s: float,
        resolver: Resolver = resolve,
        connect: Connector = anyio.connect_tcp,
    ) -> None:
        self.path = path
        self.host = host
        self._pins = pins
        self._timeout = timeout_s
        self._resolver = resolver
        self._connect = connect
        self.outcome = "no connection"

    def __repr__(self) -> str:
        return f"OneTunnel({self.host} at {self.path}: {self.outcome})"

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = await anyio.create_unix_listener(self.path)
        task_status.started()
        async with listener:  # one connection, then the socket is closed
            accepted = await listener.accept()
        async with accepted:
            client = _UnixEnd(accepted.extra(SocketAttribute.raw_socket))
            with anyio.move_on_after(self._timeout) as scope:
                await self._tunnel(client)
            if not scope.cancelled_caught:
                return
            if self.outcome.startswith("tunnel"):
                self.outcome += f", cut at {self._timeout:g} s"
            else:
                self.outcome = f"timed out after {self._timeout:g} s before a tunnel opened"
                with anyio.move_on_after(1):
                    await _answer(client, b"504 Gateway Timeout", self.outcome)
            log.info("fetch proxy: %s", self.outcome)

    async def _tunnel(self, client: Stream) -> None:
        try:
            head, rest = await _read_head(client)
            target_of(head, self.host)
            address, port = await self._address()
            upstream = await self._connect(address, port)
        except Refused as why:
            self.outcome = f"refused: {why}"
            log.info("fetch proxy: %s", self.outcome)
            await _answer(client, b"403 Forbidden", str(why))
            return
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as error:
            self.outcome = f"failed: {error or type(error).__name__}"
            await _answer(client, b"502 Bad Gateway", self.outcome)
            return
        self.outcome = f"tunnel to {address}:{port}"
        await splice(client, upstream, rest)

    async def _address(self) -> tuple[str, int]:
        return await address_of(self.host, self._pins, self._resolver)


async def _answer(client: Stream, status: bytes, why: str) -> None:
    body = why.encode("utf-8", "replace")[:500]
    head = b"HTTP/1.1 %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(body))
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(head + body)


async def splice(client: Stream, upstream: ByteStream, rest: bytes) -> None:
    """The tunnel, once allowed and connected: `200` to the client, what it sent after its
    CONNECT head passed on, then both ways copied until they end; `upstream` closed after."""
    async with upstream:
        try:
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                await upstream.send(rest)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_pump, client, upstream, tasks.cancel_scope)
            tasks.start_soon(_pump, upstream, client, tasks.cancel_scope)


async def _pump(source: Stream, sink: Stream, scope: anyio.CancelScope) -> None:
    """Copy `source` to `sink`. At its end, pass the end on and let the other way finish (a
    half-closed tunnel still carries the answer); on a broken end, stop both ways."""
    try:
        while True:
            await sink.send(await source.receive(65536))
    except anyio.EndOfStream:
        try:
            await sink.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            scope.cancel()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        scope.cancel()
