"""`http_fetch`: GET an https URL through the fetch proxy's CONNECT tunnel (SPEC §8.2, §8.3).

The toolkit has no network: it reaches only the proxy's Unix socket, asks it for a tunnel to
`{host}:443`, and runs TLS end to end through it, checking the certificate for `host`.
Failures are `http_fetch: {url}: {why}` (exit 1); an unusable proxy is misuse (exit 2).
The only module that imports `socket` and `ssl`, and only `http_fetch` imports it.
"""

from __future__ import annotations

import socket
import ssl
import time

from .http1 import Recv, ResponseError, Truncated, read_response, request
from .http_view import render
from .outcome import Outcome

MAX_BODY = 1024 * 1024
MAX_PROXY_HEAD = 8 * 1024
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


class FetchError(Exception):
    """The fetch failed; `str()` is what the model reads after `http_fetch: {url}: `."""


def split_url(url: str) -> tuple[str, str] | None:
    """(host, request target) of `https://host[:443][/path]`, the shape brokerd's `url_host`
    already checked (SPEC §4.4), or None. The target never holds a space or a control."""
    prefix = "https://"
    if not url.startswith(prefix):
        return None
    rest = url[len(prefix) :]
    end = 0
    while end < len(rest) and rest[end] in _HOST_CHARS:
        end += 1
    host, rest = rest[:end], rest[end:]
    rest = rest.removeprefix(":443")
    if not host or not (rest == "" or rest.startswith("/")):
        return None
    if any(not 0x21 <= ord(c) <= 0x7E for c in rest):
        return None
    return host, rest or "/"


def http_fetch(url: str, proxy: str, timeout_s: float) -> Outcome:
    """GET `url` through the proxy at Unix socket `proxy`, all of it within `timeout_s`."""
    parts = split_url(url)
    if parts is None:
        import json

        shown = json.dumps(url)
        shown = shown if len(shown) <= 300 else shown[:299] + "…"
        return Outcome.misuse(
            f"toolkit: http_fetch: the arguments do not parse: invalid url: {shown}"
        )
    host, target = parts
    deadline = time.monotonic() + timeout_s
    try:
        raw = _connect_proxy(proxy, timeout_s)
    except OSError as error:
        return Outcome.misuse(
            f"toolkit: http_fetch: cannot connect to the fetch proxy {proxy}: {_why(error)}"
        )
    try:
        with raw:
            text = _fetch(raw, url, host, target, deadline)
    except TimeoutError:
        return _failed(url, f"timed out after {timeout_s:g} s")
    except FetchError as error:
        return _failed(url, str(error))
    except ssl.SSLCertVerificationError as error:
        return _failed(url, f"TLS failed: certificate verify failed: {error.verify_message}")
    except ssl.SSLError as error:
        return _failed(url, f"TLS failed: {error.reason or error}")
    except Truncated as error:
        return _failed(url, f"the response is incomplete: {error}")
    except ResponseError as error:
        return _failed(url, f"bad response: {error}")
    except OSError as error:
        return _failed(url, f"connection failed: {_why(error)}")
    return Outcome.done(text)


def _fetch(raw: socket.socket, url: str, host: str, target: str, deadline: float) -> str:
    _open_tunnel(raw, host, deadline)
    context = ssl.create_default_context()  # honours SSL_CERT_FILE
    _set_timeout(raw, deadline)
    with context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(request(host, target))
        response = read_response(_receiver(tls, deadline), MAX_BODY)
    return render(url, response, MAX_BODY)


def _connect_proxy(path: str, timeout_s: float) -> socket.socket:
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        raw.settimeout(timeout_s)
        raw.connect(path)
    except BaseException:
        raw.close()
        raise
    return raw


def _open_tunnel(raw: socket.socket, host: str, deadline: float) -> None:
    """Ask for a tunnel to `host:443`; FetchError unless the proxy answers 200."""
    _set_timeout(raw, deadline)
    raw.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode("ascii"))
    head = bytearray()
    # One byte at a time, so that not a byte of the tunnel (TLS) is read here.
    while not head.endswith(b"\r\n\r\n") and not head.endswith(b"\n\n"):
        if len(head) > MAX_PROXY_HEAD:
            raise FetchError("the proxy's answer is too long")
        _set_timeout(raw, deadline)
        byte = raw.recv(1)
        if not byte:
            if not head:
                raise FetchError("the proxy closed the connection")
            break
        head += byte
    status_line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or fields[1] != "200":
        shown = "".join(c if 0x20 <= ord(c) < 0x7F else " " for c in status_line)[:200]
        raise FetchError(f"the proxy refused: {shown}")
    if not head.endswith(b"\n\n") and not head.endswith(b"\r\n\r\n"):
        raise FetchError("the proxy closed the connection")


def _receiver(tls: ssl.SSLSocket, deadline: float) -> Recv:
    def recv(n: int) -> bytes:
        _set_timeout(tls, deadline)
        try:
            return tls.recv(n)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            # Many servers end a response without TLS's close_notify. A Content-Length or
            # chunked body still shows truncation; a close-delimited one cannot anyway.
            return b""

    return recv


def _set_timeout(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


def _failed(url: str, why: str) -> Outcome:
    return Outcome.tool_error(f"http_fetch: {url}: {why}")


def _why(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__
