"""The one thing the supervisor's test daemons share: answer `ping` on `{run}/<name>.sock`
(and `wrong_socket` to anything else) until stopped."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import zmq.asyncio

from bxcore.home import Home
from bxcore.messages import Error, ErrorCode
from bxcore.router import Router


async def _serve(home: Home, name: str) -> None:
    ctx = zmq.asyncio.Context()

    async def handle(message: Any) -> Any:
        return Error(message.id, ErrorCode.WRONG_SOCKET, f"{name} only answers ping")

    try:
        await Router(ctx, home.endpoint(name), handle, service=name).serve()
    finally:
        ctx.destroy(linger=0)


def serve(home: Home, name: str) -> None:
    anyio.run(functools.partial(_serve, home, name))
