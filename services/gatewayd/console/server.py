"""The console's HTTP server (SPEC §12.1): uvicorn inside gatewayd's own event loop, on a socket
gatewayd binds itself: on the configured port, or the next free one when it is taken (issue
27, which stands over §12.1's "does not start"); when none is free, one line naming them, and
gatewayd does not start. uvicorn leaves signals, logging and the process to gatewayd: no
signal handlers, no log config of its own, no access log (a request line is nobody's business
but the owner's).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import Iterator

import anyio
import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from bxcore.errors import SetupError
from bxcore.visible import visible
from services.gatewayd.console.access import SECURITY_HEADERS

log = logging.getLogger("gatewayd")

GRACE_S = 1  # open streams are cut this long after gatewayd is told to stop
PORTS_TRIED = 20  # the configured port and the next 19, the first free one taken


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # gatewayd's daemon owns SIGTERM and SIGINT


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol, whose own answer to a request it cannot parse (no app code runs
    for it) carries the console's security headers too (§12.1: every response)."""

    def send_400_response(self, msg: str) -> None:
        send = self.conn.send

        def with_headers(event: h11.Event) -> bytes | None:
            if isinstance(event, h11.Response):
                headers = [*event.headers, *SECURITY_HEADERS]
                event = h11.Response(status_code=event.status_code, headers=headers)
            return send(event)

        self.conn.send = with_headers  # type: ignore[method-assign, assignment]
        super().send_400_response(msg)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port`, or on the first free one of the next ports
    (`PORTS_TRIED` in all) when that one is taken (issue 27: a second box, or another program,
    holding it); SetupError naming the host, the ports and what to do when none can be had."""
    last = min(port + PORTS_TRIED - 1, 65_535)
    for each in range(port, last + 1):
        listener = _listen(host, each)
        if listener is not None:
            if each != port:
                log.warning(
                    "the console's port %d on %s is taken (by another box or program): it "
                    "listens on port %d instead ([console] port in config.toml)",
                    port, visible(host), each,
                )  # fmt: skip
            return listener
    ports = f"{port} to {last}" if last > port else str(port)
    raise SetupError(
        f"the console's ports {ports} on {host} are all taken by other programs; "
        "stop one, or set [console] port in config.toml"
    )


def _listen(host: str, port: int) -> socket.socket | None:
    """A listening socket on `host`:`port`; None when the port is taken; else SetupError."""
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICSERV
        )[0]
    except OSError as error:
        raise SetupError(f"the console cannot listen on {where}: {error.strerror}") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)  # EADDRINUSE here too: another bound it at the same moment
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            return None
        raise SetupError(f"the console cannot listen on {where}: {error.strerror}") from None
    listener.set_inheritable(False)
    return listener


async def serve(app: object, listener: socket.socket) -> None:
    """Serve `app` on `listener` until cancelled."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        http=_Protocol,
        ws="none",
        timeout_graceful_shutdown=GRACE_S,
    )
    server = _Server(config)
    host, port = listener.getsockname()[:2]
    log.info("the console listens on %s port %d", visible(str(host)), port)
    try:
        await server.serve(sockets=[listener])
    finally:
        if server.started:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE_S + 1):
                await server.shutdown(sockets=[listener])
        listener.close()
