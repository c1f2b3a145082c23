"""Test-only TLS plumbing: a throwaway CA, an HTTPS server that plays scripted replies, and a
CONNECT proxy on a Unix socket that tunnels to it (SPEC §8.2's fetch proxy, as a stand-in).

Keys are made with the `openssl` command (`cryptography` is not a dependency). Every server
runs in threads of the test process and is a context manager that stops them all on exit.
Used by the toolkit's tests and by brokerd's service tests; never by production code.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

DEFAULT_HOSTS = ("example.test", "www.example.test")


@dataclass(frozen=True)
class Authority:
    """A CA and one server certificate it signed for `hosts`. Point SSL_CERT_FILE at
    `ca_file` so that a client trusts it."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    hosts: tuple[str, ...]

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


def make_authority(folder: Path, hosts: Sequence[str] = DEFAULT_HOSTS) -> Authority:
    """A new CA in `folder` (P-256 keys, valid two days) and a server certificate for `hosts`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_file = folder / "ca.key", folder / "ca.pem"
    key_file, csr_file, cert_file = (
        folder / "server.key",
        folder / "server.csr",
        folder / "server.pem",
    )
    extensions = folder / "server.ext"
    extensions.write_text(
        "subjectAltName=" + ",".join(f"DNS:{host}" for host in hosts) + "\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", "-new", *new_key, "-keyout", ca_key, "-out", ca_file, "-days", "2",
             "-subj", "/CN=boxmaker test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", "-new", *new_key, "-keyout", key_file, "-out", csr_file,
             "-subj", f"/CN={hosts[0]}")  # fmt: skip
    _openssl("x509", "-req", "-in", csr_file, "-CA", ca_file, "-CAkey", ca_key,
             "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
             "-days", "2", "-extfile", extensions, "-out", cert_file)  # fmt: skip
    return Authority(ca_file, cert_file, key_file, tuple(hosts))


def _openssl(*args: str | Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make a test CA")
    subprocess.run([openssl, *map(str, args)], check=True, capture_output=True, timeout=30)


# --- the HTTPS server --------------------------------------------------------------------

Framing = Literal["length", "chunked", "close"]


@dataclass(frozen=True)
class Reply:
    """What the server answers to a GET of one path. `framing`: a Content-Length, a chunked
    body (in `chunk`-byte chunks), or a body that ends when the connection closes.
    `delay_s` waits before answering (cut short when the server stops)."""

    status: int = 200
    headers: Sequence[tuple[str, str]] = (("Content-Type", "text/plain; charset=utf-8"),)
    body: bytes = b""
    framing: Framing = "length"
    chunk: int = 64 * 1024
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """A request as the server saw it."""

    method: str
    path: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


Route = Reply | Callable[[Received], Reply]


class HttpsServer:
    """An HTTPS server on 127.0.0.1 (a free port) answering GETs from `routes` (path → Reply,
    or a function of the request); other paths get 404. `requests` records what came in."""

    def __init__(self, authority: Authority, routes: Mapping[str, Route] | None = None) -> None:
        self.authority = authority
        self.routes: dict[str, Route] = dict(routes or {})
        self.requests: list[Received] = []
        self.stopping = threading.Event()
        self._server = _TLSServer(self, authority.server_context())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "stopped" if self.stopping.is_set() else "serving"
        return f"<HttpsServer 127.0.0.1:{self.port} {state}, {len(self.requests)} requests>"

    def _answer(self, handler: _Handler) -> None:
        received = Received(
            handler.command, handler.path, handler.request_version, list(handler.headers.items())
        )
        self.requests.append(received)
        route = self.routes.get(handler.path.split("?", 1)[0])
        if route is None:
            reply = Reply(404, body=b"not found\n")
        elif isinstance(route, Reply):
            reply = route
        else:
            reply = route(received)
        if reply.delay_s and self.stopping.wait(reply.delay_s):
            return
        _write_reply(handler, reply)


def _write_reply(handler: _Handler, reply: Reply) -> None:
    handler.close_connection = True
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Whatever"
    head = [f"HTTP/1.1 {reply.status} {reason}", *(f"{k}: {v}" for k, v in reply.headers)]
    if reply.framing == "length":
        head.append(f"Content-Length: {len(reply.body)}")
    elif reply.framing == "chunked":
        head.append("Transfer-Encoding: chunked")
    head.append("Connection: close")
    out = handler.wfile
    try:
        out.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if reply.framing == "chunked":
            for start in range(0, len(reply.body), reply.chunk):
                piece = reply.body[start : start + reply.chunk]
                out.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            out.write(b"0\r\n\r\n")
        else:
            out.write(reply.body)
        out.flush()
    except OSError:  # the client stopped reading (a cut body): nothing to do
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TLSServer

    def do_GET(self) -> None:
        self.server.owner._answer(self)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TLSServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Accepts TCP and does the TLS handshake in the connection's own thread."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: HttpsServer, context: ssl.SSLContext) -> None:
        self.owner = owner
        self.context = context
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        request.settimeout(10)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):  # a client that refused our certificate, say
            return
        with tls:
            _Handler(tls, client_address, self)

    def handle_error(self, request: object, client_address: object) -> None:
        pass


# --- the CONNECT proxy -------------------------------------------------------------------


class ConnectProxy:
    """A CONNECT proxy on a Unix socket (`path`) that tunnels every `host:443` to `upstream`.
    `refuse` maps a host to the status line answered instead (`""`: close without a word).
    `connects` records each request line it read."""

    def __init__(self, upstream: tuple[str, int], refuse: Mapping[str, str] | None = None) -> None:
        self.upstream = upstream
        self.refuse = dict(refuse or {})
        self.connects: list[str] = []
        self._folder = tempfile.mkdtemp(prefix="bx-proxy-")  # short: a socket path is ≤ 107 bytes
        self.path = os.path.join(self._folder, "proxy.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop)

    def close(self) -> None:
        self._stopping.set()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=5)
        self._listener.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "stopped" if self._stopping.is_set() else "listening"
        return f"<ConnectProxy {self.path} → {self.upstream} {state}, {len(self.connects)} tunnels>"

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._open.add(sock)
        return sock

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._start(self._serve, self._track(client))

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                try:
                    chunk = client.recv(1)
                except OSError:
                    return
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.connects.append(line)
            method, _, rest = line.partition(" ")
            target = rest.split(" ", 1)[0]
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or port != "443":
                client.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                return
            if host in self.refuse:
                if self.refuse[host]:
                    client.sendall(self.refuse[host].encode("latin-1") + b"\r\n\r\n")
                return
            try:
                upstream = self._track(socket.create_connection(self.upstream, timeout=5))
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            with upstream:
                upstream.settimeout(None)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._relay(client, upstream)

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        """Copy both ways until both directions have ended."""
        import selectors

        with selectors.DefaultSelector() as selector:
            peers = {a: b, b: a}
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            live = 2
            while live and not self._stopping.is_set():
                for key, _ in selector.select(timeout=0.1):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                        if data:
                            peers[source].sendall(data)
                            continue
                        peers[source].shutdown(socket.SHUT_WR)
                    except OSError:
                        return
                    selector.unregister(source)
                    live -= 1
