"""The console as an ASGI app (SPEC §12): the page's files, the JSON API, login and the live
stream, behind the `Guard`. Built once by gatewayd from its `Backend`, `Feed`, `Keys` and the
file of its logins.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from services.gatewayd.console.api import Backend, Refused, fail
from services.gatewayd.console.feed import Feed
from services.gatewayd.console.guard import Guard
from services.gatewayd.console.jobs_api import Jobs
from services.gatewayd.console.login_routes import LoginRoutes
from services.gatewayd.console.mcp_api import Mcp

log = logging.getLogger("gatewayd")

STATIC = Path(__file__).resolve().parent / "static"
KEEPALIVE_S = 15.0

Handler = Callable[[Request], Awaitable[Response]]


def refusals(handler: Handler) -> Handler:
    """A route whose `Refused` becomes its one-line JSON answer; nothing else is caught."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as refused:
            return fail(refused.status, str(refused))

    return answer


class Console:
    def __init__(
        self,
        backend: Backend,
        feed: Feed,
        logins: LoginRoutes,
        *,
        port: int,
        allowed_hosts: tuple[str, ...],
    ) -> None:
        self.backend = backend
        self.feed = feed
        self.logins = logins
        b = backend
        jobs = Jobs(backend)
        mcp = Mcp(backend)
        api = [
            ("/api/login", logins.login, ["POST"]),
            ("/api/logout", logins.logout, ["POST"]),
            ("/api/events", self.events, ["GET"]),
            ("/api/sessions", b.sessions, ["GET"]),
            ("/api/tokens", b.tokens, ["GET"]),
            ("/api/sessions/{session}/history", b.history, ["GET"]),
            ("/api/sessions/{session}/messages", b.message, ["POST"]),
            ("/api/sessions/{session}/cancel", b.cancel, ["POST"]),
            ("/api/pending", b.pending, ["GET"]),
            ("/api/approvals/{approval}", b.verdict, ["POST"]),
            ("/api/ledger", b.ledger, ["GET"]),
            ("/api/ledger/verify", b.verify, ["POST"]),
            ("/api/grants", b.grants, ["GET"]),
            ("/api/grants", b.add_grant, ["POST"]),
            ("/api/grants/{grant}", b.remove_grant, ["DELETE"]),
            ("/api/explain", b.explain, ["POST"]),
            ("/api/memory", b.memory, ["GET"]),
            ("/api/services", b.services, ["GET"]),
            ("/api/services/{name}/restart", b.restart, ["POST"]),
            ("/api/services/{name}/logs", b.logs, ["GET"]),
            ("/api/mcp/{name}", mcp.tools, ["GET"]),
            ("/api/mcp/{name}/trust", mcp.trust, ["POST"]),
            ("/api/jobs", jobs.jobs, ["GET"]),
            ("/api/jobs/{job}/run", jobs.run, ["POST"]),
            ("/api/jobs/{job}/enabled", jobs.enabled, ["POST"]),
        ]
        routes: list[BaseRoute] = [
            Route(path, refusals(handler), methods=methods) for path, handler, methods in api
        ]
        routes += [
            Route("/", self.page, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
        starlette = Starlette(routes=routes, exception_handlers={404: _missing, 405: _method})
        self.app = Guard(
            starlette,
            port=port,
            allowed_hosts=allowed_hosts,
            logins=logins.logins,
            now=logins.now,
        )

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def events(self, request: Request) -> Response:
        start = self.feed.resume_from(request.headers.get("last-event-id"))
        stream = self._stream(start)
        headers = {"X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def _stream(self, start: int | None) -> AsyncIterator[bytes]:
        """The live stream: `hello` (or `reset` when what was missed is gone), then every
        event as it comes, with a comment now and then so a dead connection is noticed."""
        feed = self.feed
        n = feed.last if start is None else start
        first = "reset" if start is None else "hello"
        hello = json.dumps({"boot": feed.boot, "last": feed.event_id(feed.last)})
        yield f"retry: 1000\nid: {feed.event_id(n)}\nevent: {first}\ndata: {hello}\n\n".encode()
        while True:
            items = feed.after(n)
            if items and items[0].n != n + 1:  # fell behind what is kept
                n = feed.last
                yield f"id: {feed.event_id(n)}\nevent: reset\ndata: {{}}\n\n".encode()
                continue
            if not items:
                await feed.wait(n, KEEPALIVE_S)
                if n == feed.last:
                    yield b": keepalive\n\n"
                continue
            chunk = bytearray()
            for item in items:
                chunk += f"id: {feed.event_id(item.n)}\nevent: {item.name}\ndata: ".encode()
                chunk += item.data + b"\n\n"
            n = items[-1].n
            yield bytes(chunk)


async def _missing(request: Request, exc: Exception) -> Response:
    return fail(404, f"nothing at {request.url.path[:80]}")


async def _method(request: Request, exc: Exception) -> Response:
    return fail(405, f"{request.method} is not taken at {request.url.path[:80]}")
