"""gatewayd's subscriptions to `loop-events` and `broker-events` (SPEC §2.3): every message
handed on, and each (re)connect announced, so the current state is re-read before the stream
is trusted (PUB/SUB drops: what was published while nobody listened is gone).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from bxcore.router import tune
from bxcore.wire import codec as wire

log = logging.getLogger("gatewayd")

#: How long after a handshake to re-read: the subscription reaches the publisher just after.
SETTLE_S = 0.05


async def follow(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    *,
    on_message: Callable[[Any], None],
    on_connect: Callable[[], Awaitable[None]],
) -> None:
    """Subscribe to everything at `endpoint` until cancelled."""
    socket = ctx.socket(zmq.SUB)
    tune(socket)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    monitor = socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    socket.connect(endpoint)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_watch, monitor, endpoint, on_connect)
            while True:
                frame = await socket.recv()
                try:
                    message = wire.decode(frame)
                except wire.DecodeError as error:
                    log.warning("skipped a bad event from %s: %s", endpoint, error)
                    continue
                on_message(message)
    finally:
        socket.disable_monitor()
        monitor.close(linger=0)
        socket.close(linger=0)


async def _watch(
    monitor: zmq.asyncio.Socket, endpoint: str, on_connect: Callable[[], Awaitable[None]]
) -> None:
    while True:
        event = parse_monitor_message(await monitor.recv_multipart())
        if event["event"] == zmq.EVENT_DISCONNECTED:
            log.info("lost %s; will re-read its state when it is back", endpoint)
            continue
        log.info("subscribed to %s; re-reading the current state", endpoint)
        await anyio.sleep(SETTLE_S)
        try:
            await on_connect()
        except Exception:  # the next reconnect, or the periodic re-read, tries again
            log.exception("re-reading the state behind %s failed", endpoint)
