"""gatewayd's shell (SPEC §2.3, §12): binds the `gateway` socket behind CURVE (the owner's key
only), follows `loop-events` and `broker-events`, and keeps the witness of the ledger's head.

It is a CURVE client of brokerd's admin socket with its own key, never the owner's; that key
is on the admin allow-list (§3.6), so gatewayd could approve: it only relays the verdicts the
owner's authenticated client sends, and runs as its own user so loopd cannot use its key.
"""

from __future__ import annotations

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

    loop = Client(ctx.zmq, loop_endpoint, name="loopd", timeout=10.0, tries=1)
    history = Client(ctx.zmq, loop_endpoint, name="loopd", timeout=5.0, tries=2)
    admin = Client(ctx.zmq, admin_endpoint, name="brokerd", secure=as_gatewayd)
    heads = HeadKeeper(ctx.home.witness("gatewayd"), ctx.home.ledger)
    gateway = Gateway(loop, history, admin, heads)
    auth = curve.start_zap(ctx.zmq, {"gateway": curve.AllowList({owner: "owner"})})
    router = Router(
        ctx.zmq,
        ctx.endpoint("gateway"),
        gateway.handle,
        service="gatewayd",
        secure=lambda socket: curve.serve_curve(socket, own, "gateway"),
    )
    log.info("serving: %r, %r", router, gateway)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(router.serve)
            tasks.start_soon(heads.run)
            tasks.start_soon(gateway.run)
            tasks.start_soon(
                lambda: follow(
                    ctx.zmq,
                    ctx.endpoint("loop-events"),
                    on_message=gateway.on_loop_event,
                    on_connect=gateway.on_loop_connect,
                )
            )
            tasks.start_soon(
                lambda: follow(
                    ctx.zmq,
                    ctx.endpoint("broker-events"),
                    on_message=gateway.on_broker_event,
                    on_connect=gateway.on_broker_connect,
                )
            )
    finally:
        with anyio.CancelScope(shield=True):
            for client in (loop, history, admin):
                client.close()
            auth.stop()
