"""The fetch proxy (SPEC §8.2), in process over real Unix and TCP sockets: one tunnel, to the
checked host only, never to a non-public address unless a test pin says so, within its time.

Upstreams are local: a TCP echo server, and the test HTTPS server of tests/support/tls.py.
A public address is never dialled: a test that needs one injects a connector that records
the address and connects to the echo server instead.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSStream

from services.brokerd.sandbox.fetch_proxy import OneTunnel, public
from tests.support import tls

pytestmark = pytest.mark.anyio

HOST = "test.example"
CONNECT = b"CONNECT test.example:443 HTTP/1.1\r\nHost: test.example:443\r\n\r\n"


# --- public() -----------------------------------------------------------------------------

NOT_PUBLIC = [
    # loopback
    "127.0.0.1",
    "127.1.2.3",
    "::1",
    # private
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
    "192.168.255.255",
    "fc00::1",
    "fd12:3456::1",
    # link-local, cloud metadata included
    "169.254.0.1",
    "169.254.169.254",
    "fe80::1",
    "febf::1",
    # multicast
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    # unspecified, broadcast, reserved, shared, documentation
    "0.0.0.0",
    "::",
    "255.255.255.255",
    "240.0.0.1",
    "100.64.0.1",
    "192.0.2.1",
    "2001:db8::1",
    # IPv4-mapped IPv6 of the above
    "::ffff:127.0.0.1",
    "::ffff:10.1.2.3",
    "::ffff:169.254.169.254",
    "::ffff:192.168.1.1",
    # IPv6 that carries a non-public IPv4 address (6to4, NAT64, IPv4-compatible)
    "2002:7f00:1::1",
    "2002:a00:1::1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "::127.0.0.1",
    # not an address at all
    "",
    "test.example",
    "127.0.0.1:443",
    "fe80::1%eth0",
]
PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "93.184.216.34",
    "172.32.0.1",  # just past 172.16.0.0/12
    "11.0.0.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "2002:808:808::1",  # 6to4 of a public address
]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_loopback_private_link_local_multicast_or_special_address_is_not_public(
    address: str,
) -> None:
    assert not public(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_a_global_unicast_address_is_public(address: str) -> None:
    assert public(address)


# --- plumbing -----------------------------------------------------------------------------


@dataclass
class Echo:
    """A TCP echo server on 127.0.0.1 that counts the connections it accepted."""

    port: int
    accepted: int = 0

    @property
    def pin(self) -> str:
        return f"127.0.0.1:{self.port}"


@asynccontextmanager
async def echo_server() -> AsyncIterator[Echo]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    echo = Echo(listener.extra(SocketAttribute.local_port))

    async def handle(stream: ByteStream) -> None:
        echo.accepted += 1
        async with stream:
            try:
                while True:
                    await stream.send(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, handle)
        yield echo
        tasks.cancel_scope.cancel()


@asynccontextmanager
async def serving(tunnel: OneTunnel) -> AsyncIterator[OneTunnel]:
    async with anyio.create_task_group() as tasks:
        await tasks.start(tunnel.serve)
        yield tunnel
        tasks.cancel_scope.cancel()


@dataclass
class Resolver:
    """An injected resolver: answers `addresses` (or raises `error`) and records each ask."""

    addresses: Sequence[str] = ()
    error: OSError | None = None
    asked: list[tuple[str, int]] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if self.error is not None:
            raise self.error
        return list(self.addresses)


@dataclass
class Connector:
    """An injected connector: records the address asked for and connects to `echo`."""

    echo: Echo
    dialled: list[tuple[str, int]] = field(default_factory=list)

    async def __call__(self, address: str, port: int) -> ByteStream:
        self.dialled.append((address, port))
        return await anyio.connect_tcp("127.0.0.1", self.echo.port)


def tunnel_at(folder: Path, **options: object) -> OneTunnel:
    settings: dict[str, object] = {"pins": {}, "timeout_s": 5.0, **options}
    return OneTunnel(folder / "p.sock", HOST, **settings)  # type: ignore[arg-type]


async def read_head(stream: ByteStream) -> tuple[bytes, bytes]:
    """The proxy's answer head, and any bytes that came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


async def read_all(stream: ByteStream) -> bytes:
    data = b""
    try:
        while True:
            data += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return data


async def ask(tunnel: OneTunnel, request: bytes) -> bytes:
    """Send `request` and read the answer to the end."""
    with anyio.fail_after(5):
        async with await anyio.connect_unix(tunnel.path) as client:
            await client.send(request)
            return await read_all(client)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> tls.Authority:
    return tls.make_authority(tmp_path_factory.mktemp("ca"), hosts=(HOST,))


@pytest.fixture
def https(authority: tls.Authority) -> Iterator[tls.HttpsServer]:
    routes = {"/page": tls.Reply(body=b"through the tunnel\n")}
    with tls.HttpsServer(authority, routes) as server:
        yield server


# --- the one tunnel -----------------------------------------------------------------------


async def test_a_connect_to_the_checked_host_tunnels_to_its_pinned_address(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin})
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(CONNECT)
                    head, rest = await read_head(client)
                    assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
                    assert rest == b""
                    await client.send(b"ping")
                    assert await client.receive() == b"ping"
        assert echo.accepted == 1
    assert tunnel.outcome == f"tunnel to 127.0.0.1:{echo.port}"


async def test_tls_runs_end_to_end_through_the_tunnel_to_the_checked_host(
    short_tmp: Path, authority: tls.Authority, https: tls.HttpsServer
) -> None:
    tunnel = tunnel_at(short_tmp, pins={HOST: f"127.0.0.1:{https.port}"})
    async with serving(tunnel):
        with anyio.fail_after(5):
            client = await anyio.connect_unix(tunnel.path)
            await client.send(CONNECT)
            head, _ = await read_head(client)
            assert head.startswith(b"HTTP/1.1 200 ")
            secure = await TLSStream.wrap(
                client,
                hostname=HOST,
                ssl_context=authority.client_context(),
                standard_compatible=False,  # the server closes without close_notify
            )
            async with secure:
                await secure.send(b"GET /page HTTP/1.1\r\nHost: test.example\r\n\r\n")
                answer = await read_all(secure)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\nthrough the tunnel\n")
    assert [r.path for r in https.requests] == ["/page"]


async def test_bytes_sent_right_after_the_request_head_are_relayed_not_dropped(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin})
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(CONNECT + b"early bytes")
                    head, rest = await read_head(client)
                    assert head.startswith(b"HTTP/1.1 200 ")
                    while len(rest) < len(b"early bytes"):
                        rest += await client.receive()
                    assert rest == b"early bytes"


@pytest.mark.parametrize(
    ("request_head", "why"),
    [
        (b"CONNECT other.example:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT test.example:8443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT test.example:80 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT test.example.:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT TEST.EXAMPLE:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT sub.test.example:443 HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"CONNECT test.example HTTP/1.1\r\n\r\n", b"may reach only test.example:443"),
        (b"GET https://test.example/ HTTP/1.1\r\nHost: test.example\r\n\r\n", b"not a CONNECT"),
        (b"GET / HTTP/1.1\r\nHost: test.example\r\n\r\n", b"not a CONNECT"),
        (b"connect test.example:443 HTTP/1.1\r\n\r\n", b"not a CONNECT"),
        (b"CONNECT test.example:443\r\n\r\n", b"not a CONNECT"),
        (b"CONNECT test.example:443 HTTP/2\r\n\r\n", b"not a CONNECT"),
        (b"CONNECT  test.example:443 HTTP/1.1\r\n\r\n", b"not a CONNECT"),
        (b"CONNECT test.example:443 HTTP/1.1 x\r\n\r\n", b"not a CONNECT"),
        (b"X" * 9000 + b"\r\n\r\n", b"too long"),
    ],
)
async def test_anything_but_a_connect_to_the_checked_host_on_443_is_refused_unconnected(
    short_tmp: Path, request_head: bytes, why: bytes
) -> None:
    async with echo_server() as echo:
        resolver = Resolver(["127.0.0.1"])
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin}, resolver=resolver)
        async with serving(tunnel):
            answer = await ask(tunnel, request_head)
        assert echo.accepted == 0
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert why in answer
    assert tunnel.outcome.startswith("refused: ")
    assert resolver.asked == []


async def test_a_connection_that_closes_before_a_whole_head_opens_nothing(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin})
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(b"CONNECT test.example:443 HTTP/1.1\r\n")
                    await client.send_eof()
                    answer = await read_all(client)
        assert echo.accepted == 0
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert tunnel.outcome == "refused: the connection closed before a whole request head"


# --- resolution and the DNS-rebinding guard -----------------------------------------------


@pytest.mark.parametrize(
    "addresses",
    [
        ["127.0.0.1"],
        ["::1"],
        ["10.0.0.7", "192.168.1.1"],
        ["169.254.169.254"],
        ["::ffff:127.0.0.1"],
        ["fe80::1", "fc00::1"],
        ["0.0.0.0"],
        [],
    ],
)
async def test_a_name_that_resolves_only_to_non_public_addresses_is_refused_without_a_pin(
    short_tmp: Path, addresses: list[str]
) -> None:
    async with echo_server() as echo:
        resolver = Resolver(addresses)
        connector = Connector(echo)
        tunnel = tunnel_at(short_tmp, resolver=resolver, connect=connector)
        async with serving(tunnel):
            answer = await ask(tunnel, CONNECT)
        assert echo.accepted == 0
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"which is not a public address" in answer
    assert resolver.asked == [(HOST, 443)]
    assert connector.dialled == []


async def test_a_name_that_resolves_to_loopback_is_allowed_when_a_test_pin_names_it(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        resolver = Resolver(["127.0.0.1"])
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin}, resolver=resolver)
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(CONNECT)
                    head, _ = await read_head(client)
        assert echo.accepted == 1
    assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert resolver.asked == []  # a pin is used as it is: the name is not looked up


async def test_the_proxy_dials_the_public_address_it_checked_on_port_443(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        resolver = Resolver(["10.0.0.1", "93.184.216.34", "127.0.0.1"])
        connector = Connector(echo)
        tunnel = tunnel_at(short_tmp, resolver=resolver, connect=connector)
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(CONNECT)
                    head, _ = await read_head(client)
                    assert head.startswith(b"HTTP/1.1 200 ")
    assert resolver.asked == [(HOST, 443)]  # once: what is dialled is what was checked
    assert connector.dialled == [("93.184.216.34", 443)]
    assert tunnel.outcome == "tunnel to 93.184.216.34:443"


async def test_a_name_that_does_not_resolve_is_refused(short_tmp: Path) -> None:
    resolver = Resolver(error=socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    tunnel = tunnel_at(short_tmp, resolver=resolver)
    async with serving(tunnel):
        answer = await ask(tunnel, CONNECT)
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"test.example does not resolve" in answer


async def test_an_upstream_that_refuses_the_connection_is_a_bad_gateway(short_tmp: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    tunnel = tunnel_at(short_tmp, pins={HOST: f"127.0.0.1:{port}"})
    async with serving(tunnel):
        answer = await ask(tunnel, CONNECT)
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert tunnel.outcome.startswith("failed: ")


# --- one connection, within the time -----------------------------------------------------


async def test_a_second_connection_is_never_served(short_tmp: Path) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin})
        async with serving(tunnel):
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as first:
                    await first.send(CONNECT)
                    head, _ = await read_head(first)
                    assert head.startswith(b"HTTP/1.1 200 ")
                    with pytest.raises(ConnectionRefusedError):
                        await anyio.connect_unix(tunnel.path)
                    await first.send(b"still one")
                    assert await first.receive() == b"still one"
        assert echo.accepted == 1


async def test_of_two_connections_made_at_once_only_one_is_served(short_tmp: Path) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin})
        answers: list[bytes] = []

        async def client() -> None:
            try:
                async with await anyio.connect_unix(tunnel.path) as stream:
                    await stream.send(CONNECT)
                    with anyio.move_on_after(1):
                        answers.append((await read_head(stream))[0])
                        return
                    answers.append(b"no answer")
            except (ConnectionRefusedError, ConnectionResetError, anyio.EndOfStream):
                answers.append(b"refused")
            except anyio.BrokenResourceError:
                answers.append(b"refused")

        async with serving(tunnel), anyio.create_task_group() as tasks:
            for _ in range(2):
                tasks.start_soon(client)
        assert echo.accepted == 1
    served = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert answers.count(served) == 1
    assert [a for a in answers if a != served] in ([b"refused"], [b"no answer"])


async def test_a_client_that_never_asks_is_answered_at_the_timeout_and_dropped(
    short_tmp: Path,
) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin}, timeout_s=0.5)
        async with serving(tunnel):
            started = time.monotonic()
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    answer = await read_all(client)
            took = time.monotonic() - started
        assert echo.accepted == 0
    assert answer.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
    assert 0.4 < took < 2.0
    assert tunnel.outcome == "timed out after 0.5 s before a tunnel opened"


async def test_an_open_tunnel_is_cut_at_the_timeout(short_tmp: Path) -> None:
    async with echo_server() as echo:
        tunnel = tunnel_at(short_tmp, pins={HOST: echo.pin}, timeout_s=0.5)
        async with serving(tunnel):
            started = time.monotonic()
            with anyio.fail_after(5):
                async with await anyio.connect_unix(tunnel.path) as client:
                    await client.send(CONNECT)
                    head, _ = await read_head(client)
                    assert head.startswith(b"HTTP/1.1 200 ")
                    await client.send(b"ping")
                    assert await client.receive() == b"ping"
                    assert await read_all(client) == b""  # and then it ends
            took = time.monotonic() - started
    assert 0.4 < took < 2.0
    assert tunnel.outcome == f"tunnel to 127.0.0.1:{echo.port}, cut at 0.5 s"
