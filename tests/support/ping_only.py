"""The one thing the supervisor's test daemons share: answer `ping` on `{run}/<name>.sock`
(and `wrong_socket` to anything else) until stopped."""

from __future__ import annotations

import functools

import anyio
import zmq.asyncio

from bxcore.home.layout import Home
from bxcore.router import Router
from bxcore.routes import Refusal, Routes
from bxcore.wire.messages import Error, ErrorCode


async def _serve(home: Home, name: str) -> None:
    ctx = zmq.asyncio.Context()
    refusal = Refusal(f"{name} only answers ping", ErrorCode.WRONG_SOCKET)
    nothing: Routes[Error] = Routes((), refusal)
    try:
        await Router(ctx, home.endpoint(name), nothing, service=name).serve()
    finally:
        ctx.destroy(linger=0)


def serve(home: Home, name: str) -> None:
    anyio.run(functools.partial(_serve, home, name))
