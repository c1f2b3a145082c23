"""gatewayd's shell (SPEC §2.3, §12): binds the `gateway` socket behind CURVE (the owner's key
only), follows `loop-events` and `broker-events`, and keeps the witness of the ledger's head.

It is a CURVE client of brokerd's admin socket with its own key, never the owner's; that key
is on the admin allow-list (§3.6), so gatewayd could approve: it only relays the verdicts the
owner's authenticated client sends, and runs as its own user so loopd cannot use its key.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio
import zmq

from bxcore import curve
from bxcore.client import Client
from bxcore.daemon import Context
from bxcore.router import Router
from services.gatewayd.gateway import Gateway
from services.gatewayd.heads import HeadKeeper
from services.gatewayd.streams import follow

log = logging.getLogger("gatewayd")


async def serve(ctx: Context) -> None:
    keys = ctx.home.keys
    owner = curve.load_public(keys, "owner")
    brokerd = curve.load_public(keys, "brokerd")
    own = curve.load_pair(keys, "gatewayd")
    loop_endpoint, admin_endpoint = ctx.endpoint("loop"), ctx.endpoint("admin")

    def as_gatewayd(socket: zmq.Socket[Any]) -> None:
        curve.connect_curve(socket, own, brokerd)

    heads = HeadKeeper(ctx.home.witness("gatewayd"), ctx.home.ledger)
    auth = curve.start_zap(ctx.zmq, {"gateway": curve.AllowList({owner: "owner"})})
    try:
        async with (
            Client(ctx.zmq, loop_endpoint, name="loopd", timeout=10.0, tries=1) as loop,
            Client(ctx.zmq, loop_endpoint, name="loopd", timeout=5.0, tries=2) as history,
            Client(ctx.zmq, admin_endpoint, name="brokerd", secure=as_gatewayd) as admin,
        ):
            gateway = Gateway(loop, history, admin, heads)
            router = Router(
                ctx.zmq,
                ctx.endpoint("gateway"),
                gateway.routes,
                service="gatewayd",
                secure=lambda socket: curve.serve_curve(socket, own, "gateway"),
            )
            log.info("serving: %r, %r", router, gateway)
            await _serve(ctx, router, gateway)
    finally:
        auth.stop()


async def _serve(ctx: Context, router: Router, gateway: Gateway) -> None:
    """The socket, the witness, the pending list and both event streams, until cancelled."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(router.serve)
        tasks.start_soon(gateway.heads.run)
        tasks.start_soon(gateway.run)
        for stream, on_message, on_connect in (
            ("loop-events", gateway.on_loop_event, gateway.on_loop_connect),
            ("broker-events", gateway.on_broker_event, gateway.on_broker_connect),
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
