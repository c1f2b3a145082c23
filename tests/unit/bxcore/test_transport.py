"""The ROUTER loop, the Lazy Pirate clients, the run lock and CURVE, over real ipc sockets."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

from bxcore import curve
from bxcore.client import Client, ProtocolError, SyncClient, Unreachable
from bxcore.home import runlock
from bxcore.labels import SESSION_DEFAULT
from bxcore.router import Router
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire import codec as wire
from bxcore.wire.asking import Patience
from bxcore.wire.messages import Error, ErrorCode, Ping, Pong, State, StateQuery

pytestmark = pytest.mark.anyio


Handle = Callable[[StateQuery], Awaitable[State]]


async def echo_state(message: StateQuery) -> State:
    return State(message.id, message.session, SESSION_DEFAULT)


def table(handle: Handle = echo_state) -> Routes[State]:
    """A socket that takes `state_query` only."""
    return Routes(StateQuery, Refusal("testd does not take {type}"), Route(StateQuery, handle))


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    context = zmq.asyncio.Context()
    yield context
    context.destroy(linger=0)


def waits(tries: int, timeout_s: float) -> Patience:
    return Patience(tries, timeout_s, "a test's own")


class Served:
    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str) -> None:
        self.ctx = ctx
        self.endpoint = endpoint

    def client(self, **options: Any) -> Client:
        return Client(self.ctx, self.endpoint, socket="broker", name="test server", **options)

    def raw(self) -> zmq.asyncio.Socket:
        socket = self.ctx.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.endpoint)
        return socket


def serving(
    ctx: zmq.asyncio.Context,
    path: Path,
    handle: Handle = echo_state,
    **options: Any,
) -> Any:
    class Scope:
        async def __aenter__(self) -> Served:
            endpoint = f"ipc://{path}/t.sock"
            self.router = Router(ctx, endpoint, table(handle), service="testd", **options)
            self.tasks = anyio.create_task_group()
            await self.tasks.__aenter__()
            self.tasks.start_soon(self.router.serve)
            return Served(ctx, endpoint)

        async def __aexit__(self, *exc: object) -> None:
            self.tasks.cancel_scope.cancel()
            await self.tasks.__aexit__(None, None, None)

    return Scope()


async def test_ping_is_answered_with_a_pong_naming_the_service(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async with serving(ctx, short_tmp) as served:
        pong = await served.client().ask(Ping("p1"))
    assert isinstance(pong, Pong)
    assert (pong.id, pong.service, pong.pid) == ("p1", "testd", os.getpid())


async def test_garbage_is_answered_where_an_id_can_be_read_and_the_next_request_is_served(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async with serving(ctx, short_tmp) as served:
        raw = served.raw()
        for junk in (os.urandom(64), b"{", b"[]", b'{"type":"launch"}', b"\xff\xfe"):
            await raw.send(junk)
        await raw.send(b'{"type":"state_query","id":"g1","session":"no good"}')
        answer = wire.decode(await raw.recv())
        assert isinstance(answer, Error)
        assert (answer.id, answer.code) == ("g1", ErrorCode.BAD_MESSAGE)
        assert "session id" in answer.message
        await raw.send(b'{"type":"launch","id":"g2"}')
        answer = wire.decode(await raw.recv())
        assert (answer.id, answer.code) == ("g2", ErrorCode.BAD_MESSAGE)
        await raw.send_multipart([b"two", b"frames"])
        good = await served.client().ask(StateQuery("g3", "chat-1"))
        assert good == State("g3", "chat-1", SESSION_DEFAULT)
        raw.close()


async def test_a_frame_over_four_mebibytes_is_refused_and_serving_goes_on(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async with serving(ctx, short_tmp) as served:
        raw = served.raw()
        await raw.send(b"x" * (wire.MAX_MESSAGE + 1))
        good = await served.client().ask(StateQuery("h1", "chat-1"))
        assert isinstance(good, State)
        raw.close()


async def test_a_client_that_vanishes_mid_request_does_not_stop_the_server(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async def slow(message: StateQuery) -> State:
        await anyio.sleep(0.2)
        return await echo_state(message)

    async with serving(ctx, short_tmp, slow) as served:
        raw = served.raw()
        await raw.send(wire.encode(StateQuery("v1", "chat-1")))
        await anyio.sleep(0.05)
        raw.close()
        await anyio.sleep(0.3)  # the answer to the vanished client is dropped
        good = await served.client().ask(StateQuery("v2", "chat-1"))
        assert isinstance(good, State)


async def test_a_handler_that_fails_is_answered_internal_and_serving_goes_on(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async def broken(message: StateQuery) -> State:
        if message.session == "boom":
            raise RuntimeError("kaput")
        return await echo_state(message)

    async with serving(ctx, short_tmp, broken) as served:
        client = served.client()
        failed = await client.ask(StateQuery("f1", "boom"))
        assert isinstance(failed, Error) and failed.code == ErrorCode.INTERNAL
        assert isinstance(await client.ask(StateQuery("f2", "chat-1")), State)


async def test_the_client_retries_with_a_fresh_socket_until_the_server_answers(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    seen: list[str] = []

    async def forgetful(message: StateQuery) -> State:
        seen.append(message.id)
        if len(seen) == 1:
            await anyio.sleep(10)  # the first attempt is never answered in time
        return await echo_state(message)

    async with serving(ctx, short_tmp, forgetful) as served:
        client = served.client()
        answer = await client.ask(StateQuery("l1", "chat-1"), patience=waits(3, 0.2))
    assert answer == State("l1", "chat-1", SESSION_DEFAULT)
    assert seen == ["l1", "l1"]


async def test_a_server_that_never_answers_is_unreachable_after_the_tries(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    nobody = f"ipc://{short_tmp}/nobody.sock"
    async with Client(ctx, nobody, socket="broker", name="nobody") as client:
        with pytest.raises(Unreachable, match=r"nobody did not answer .*\(2 tries"):
            await client.ask(Ping("u1"), patience=waits(2, 0.1))
        assert not client.connected, "a socket that saw no answer is not kept"


def test_a_second_run_lock_on_the_same_file_is_refused(short_tmp: Path) -> None:
    first = runlock.take(short_tmp / "brokerd.lock", "brokerd")
    with pytest.raises(runlock.AlreadyRunning, match=f"pid {os.getpid()}"):
        runlock.take(short_tmp / "brokerd.lock", "brokerd")
    first.release()
    runlock.take(short_tmp / "brokerd.lock", "brokerd").release()


async def test_curve_lets_in_exactly_the_allowed_keys(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    keys = short_tmp / "keys"
    for name in ("brokerd", "owner", "stranger"):
        assert curve.generate(keys, name)
    assert not curve.generate(keys, "owner")  # never overwritten
    assert (keys / "owner.key_secret").stat().st_mode & 0o777 == 0o600
    server = curve.load_pair(keys, "brokerd")
    owner = curve.load_pair(keys, "owner")
    stranger = curve.load_pair(keys, "stranger")
    auth = curve.start_zap(ctx, {"admin": curve.AllowList({owner.public: "owner"})})
    try:
        secure = lambda socket: curve.serve_curve(socket, server, "admin")  # noqa: E731
        async with serving(ctx, short_tmp, secure=secure) as served:
            as_owner = served.client(secure=lambda s: curve.connect_curve(s, owner, server.public))
            assert isinstance(await as_owner.ask(Ping("c1"), patience=waits(3, 0.5)), Pong)
            as_stranger = served.client(
                secure=lambda s: curve.connect_curve(s, stranger, server.public)
            )
            with pytest.raises(Unreachable):
                await as_stranger.ask(Ping("c2"), patience=waits(1, 0.3))
            plain = served.client()
            with pytest.raises(Unreachable):
                await plain.ask(Ping("c3"), patience=waits(1, 0.3))
            for client in (as_owner, as_stranger, plain):
                client.close()
    finally:
        auth.stop()


async def test_a_request_that_arrives_while_the_server_stops_is_not_started(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    """At shutdown the tasks in flight are cancelled and waited for; one started meanwhile
    would outlive serve() (in brokerd: a call decided and run after the stop began)."""
    started: list[str] = []

    async def slow_to_stop(message: StateQuery) -> State:
        started.append(message.id)
        try:
            await anyio.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)  # like a sandbox being killed and waited for
        return await echo_state(message)

    endpoint = f"ipc://{short_tmp}/t.sock"
    router = Router(ctx, endpoint, table(slow_to_stop), service="testd")
    raw = Served(ctx, endpoint).raw()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(router.serve)
        await raw.send(wire.encode(StateQuery("first", "chat-1")))
        while not started:
            await anyio.sleep(0.01)
        tasks.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.1)  # serve() is now waiting for "first" to stop
            await raw.send(wire.encode(StateQuery("second", "chat-1")))
            await anyio.sleep(0.1)
    raw.close()
    assert started == ["first"]


async def test_a_message_the_socket_does_not_take_gets_the_tables_refusal(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    async with serving(ctx, short_tmp) as served:
        raw = served.raw()
        await raw.send(b'{"type":"ledger_head","seq":1,"hash":"' + b"0" * 64 + b'"}')
        await raw.send(wire.encode(Pong("n1", "x", 1, "0", "now")))
        answer = wire.decode(await raw.recv())
        assert answer == Error("n1", ErrorCode.BAD_MESSAGE, "testd does not take pong")
        raw.close()


async def test_a_socket_not_ready_answers_ping_at_once_and_holds_the_rest_until_ready(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    """brokerd's sockets while the ledger loads: alive to the supervisor, answering once loaded."""
    ready = anyio.Event()
    async with serving(ctx, short_tmp, ready=ready) as served, served.client() as client:
        assert isinstance(await client.ask(Ping("p1"), patience=waits(1, 1.0)), Pong)
        with pytest.raises(Unreachable):
            await client.ask(StateQuery("h1", "s"), patience=waits(1, 0.2))
        ready.set()
        assert await client.ask(StateQuery("h2", "s")) == State("h2", "s", SESSION_DEFAULT)


# --- the blocking client, against the same router ---------------------------------------------


def sync_client(served: Served, **options: Any) -> SyncClient:
    return SyncClient(served.endpoint, socket="broker", name="test server", **options)


async def test_the_sync_client_skips_an_answer_to_another_request_and_tries_again(
    ctx: zmq.asyncio.Context, short_tmp: Path
) -> None:
    seen: list[str] = []

    async def confused(message: StateQuery) -> State:
        seen.append(message.id)
        answer_id = "someone-else" if len(seen) == 1 else message.id
        return State(answer_id, message.session, SESSION_DEFAULT)

    async with serving(ctx, short_tmp, confused) as served:
        with sync_client(served) as client:
            ask = functools.partial(client.ask, patience=waits(3, 0.2))
            answer = await anyio.to_thread.run_sync(ask, StateQuery("s1", "chat-1"))
    assert answer == State("s1", "chat-1", SESSION_DEFAULT)
    assert seen == ["s1", "s1"]


def test_the_sync_client_is_unreachable_after_its_tries(short_tmp: Path) -> None:
    with SyncClient(f"ipc://{short_tmp}/nobody.sock", socket="broker", name="nobody") as c:
        with pytest.raises(Unreachable, match=r"nobody did not answer .*\(2 tries, 0.1 s each\)"):
            c.ask(Ping("u1"), patience=waits(2, 0.1))
        assert not c.connected


@pytest.fixture
def silent_server(short_tmp: Path) -> Iterator[str]:
    """A ROUTER that reads and never answers."""
    endpoint = f"ipc://{short_tmp}/silent.sock"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(endpoint)
    yield endpoint
    context.destroy(linger=0)


def test_on_silence_is_called_once_when_the_first_try_waited_that_long(silent_server: str) -> None:
    calls: list[float] = []
    client = SyncClient(silent_server, socket="broker", name="silent")
    with client, pytest.raises(Unreachable):
        silent = lambda: calls.append(1.0)  # noqa: E731
        client.ask(Ping("q1"), patience=waits(2, 0.2), on_silence=silent, silence_s=0.05)
    assert len(calls) == 1


def test_on_silence_may_give_up_at_once(silent_server: str) -> None:
    class Down(Exception):
        pass

    def down() -> None:
        raise Down

    started = time.monotonic()
    with SyncClient(silent_server, socket="broker", name="silent") as client:
        with pytest.raises(Down):
            client.ask(Ping("q1"), patience=waits(3, 5.0), on_silence=down, silence_s=0.05)
        assert not client.connected, "given up: the socket is closed"
    assert time.monotonic() - started < 2.0


def test_an_answer_that_does_not_decode_is_a_protocol_error(short_tmp: Path) -> None:
    endpoint = f"ipc://{short_tmp}/garbled.sock"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    server.bind(endpoint)

    def garble() -> None:
        identity, _ = server.recv_multipart()
        server.send_multipart([identity, b"\xff not json"])

    thread = threading.Thread(target=garble, daemon=True)
    thread.start()
    try:
        client = SyncClient(endpoint, socket="broker", name="garbled")
        with client, pytest.raises(ProtocolError, match=r"^garbled answered with a bad message: "):
            client.ask(Ping("b1"), patience=waits(1, 5.0))
    finally:
        thread.join(5)
        context.destroy(linger=0)
