"""gatewayd's shell (SPEC §2.3, §12): binds the `gateway` socket behind CURVE (the owner's key
only), follows `loop-events` and `broker-events`, and keeps the witness of the ledger's head;
serves the console on the port it could bind, and reports that port in `{run}/gatewayd.json`.

It is a CURVE client of brokerd's admin socket with its own key, never the owner's; that key
is on the admin allow-list (§3.6), so gatewayd could approve: it only relays the verdicts the
owner's authenticated client sends, and runs as its own user so loopd cannot use its key.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

import anyio
import zmq

from bxcore import curve
from bxcore.client import Client
from bxcore.console_link import Served, TokenError, ensure_token, read_token
from bxcore.daemon import Context
from bxcore.errors import SetupError
from bxcore.home.report import Report
from bxcore.router import Router
from services.gatewayd.console import server
from services.gatewayd.console.access import Keys
from services.gatewayd.console.api import Backend
from services.gatewayd.console.app import Console
from services.gatewayd.console.feed import Feed
from services.gatewayd.console.login_routes import LoginRoutes
from services.gatewayd.gateway import Gateway
from services.gatewayd.heads import HeadKeeper
from services.gatewayd.streams import follow

if TYPE_CHECKING:
    from services.gatewayd.matrix.channel import Channel

log = logging.getLogger("gatewayd")


async def serve(ctx: Context) -> None:
    home_keys = ctx.home.keys
    owner = curve.load_public(home_keys, "owner")
    brokerd = curve.load_public(home_keys, "brokerd")
    own = curve.load_pair(home_keys, "gatewayd")
    loop_endpoint, admin_endpoint = ctx.endpoint("loop"), ctx.endpoint("admin")

    def as_gatewayd(socket: zmq.Socket[Any]) -> None:
        curve.connect_curve(socket, own, brokerd)

    heads = HeadKeeper(ctx.home.witness("gatewayd"), ctx.home.ledger)
    console = ctx.config.console
    keys: Keys | None = None
    listener: socket.socket | None = None
    port = console.port
    if console.enabled:  # before anything else: a taken port is one line, and no start
        try:
            ensure_token(ctx.home.console_token)
            keys = Keys(read_token(ctx.home.console_token))
        except TokenError as error:
            raise SetupError(str(error)) from None
        listener = server.bind(console.host, console.port)
        port = listener.getsockname()[1]
        # what `bxctl up`, `console`, `restart` and `status` print: the port really bound
        served = Served(os.getpid(), console.host, port, console.port)
        Report(ctx.home, "gatewayd").set("console", served.json())
    auth = curve.start_zap(ctx.zmq, {"gateway": curve.AllowList({owner: "owner"})})
    try:
        async with (
            Client(ctx.zmq, loop_endpoint, socket="loop") as loop,
            Client(ctx.zmq, loop_endpoint, socket="loop") as history,
            Client(ctx.zmq, admin_endpoint, socket="admin", secure=as_gatewayd) as admin,
            # The console's own clients: a slow question (a whole ledger verified) there
            # never holds up `bxctl chat`'s long polls or the pending list.
            Client(ctx.zmq, loop_endpoint, socket="loop") as loop_q,
            Client(ctx.zmq, admin_endpoint, socket="admin", secure=as_gatewayd) as admin_q,
            Client(ctx.zmq, ctx.endpoint("supervisor"), socket="supervisor") as supervisor,
        ):  # fmt: skip
            gateway = Gateway(loop, history, admin, heads)
            router = Router(
                ctx.zmq,
                ctx.endpoint("gateway"),
                gateway.routes,
                service="gatewayd",
                secure=lambda socket: curve.serve_curve(socket, own, "gateway"),
            )
            feed = Feed()
            app = None
            if keys is not None and listener is not None:
                backend = Backend(ctx.home, gateway, heads, loop_q, admin_q, supervisor)
                logins = LoginRoutes(keys, ctx.home.console_logins)
                app = Console(
                    backend, feed, logins, port=port, allowed_hosts=console.allowed_hosts
                ).app
            channel = None
            matrix = ctx.config.matrix
            if matrix is not None:  # the phone (§21): its own clients, so nothing waits on it
                # matrix-nio (with aiohttp and vodozemac) is a third of gatewayd's start and
                # 30 MB of its memory: only a box with a [matrix] table pays for it
                from services.gatewayd.matrix.channel import Channel

                token = os.environ.get(matrix.token_env) or None
                channel = Channel(matrix, ctx.home, gateway, loop_q, admin_q, supervisor, token)
            log.info("serving: %r, %r, %r, %r", router, gateway, feed, channel)
            async with anyio.create_task_group() as tasks:
                if app is not None and listener is not None:
                    tasks.start_soon(server.serve, app, listener)
                if channel is not None:
                    tasks.start_soon(channel.run)
                await _serve(ctx, router, gateway, feed, channel)
    finally:
        if listener is not None:
            listener.close()
        auth.stop()


async def _serve(
    ctx: Context, router: Router, gateway: Gateway, feed: Feed, channel: Channel | None
) -> None:
    """The socket, the witness, the pending list and both event streams, until cancelled;
    every event is also handed to the console's live stream, and to the phone's channel."""

    def on_loop_event(message: object) -> None:
        gateway.on_loop_event(message)
        feed.take(message)
        if channel is not None:
            channel.take(message)

    def on_broker_event(message: object) -> None:
        gateway.on_broker_event(message)
        feed.take(message)
        if channel is not None:
            channel.take(message)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(router.serve)
        tasks.start_soon(gateway.heads.run)
        tasks.start_soon(gateway.run)
        for stream, on_message, on_connect in (
            ("loop-events", on_loop_event, gateway.on_loop_connect),
            ("broker-events", on_broker_event, gateway.on_broker_connect),
        ):
            tasks.start_soon(
                functools.partial(
                    follow,
                    ctx.zmq,
                    ctx.endpoint(stream),
                    on_message=on_message,
                    on_connect=on_connect,
                )
            )
