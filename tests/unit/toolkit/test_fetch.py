"""`http_fetch` through a CONNECT proxy on a Unix socket to a local HTTPS server (SPEC §8.3).

The proxy and server come from `tests.support.tls`; the toolkit trusts the test CA through
SSL_CERT_FILE, as brokerd's tests will arrange.
"""

from __future__ import annotations

import pytest

from tests.support import tls
from tests.support.tls import Reply

MIB = 1024 * 1024
TEXT = (("Content-Type", "text/plain; charset=utf-8"),)


def _env(authority: tls.Authority, proxy: tls.ConnectProxy, timeout_s: str = "10"):
    return {
        "SSL_CERT_FILE": str(authority.ca_file),
        "BX_FETCH_PROXY": proxy.path,
        "BX_TIMEOUT_S": timeout_s,
    }


@pytest.fixture
def fetch(toolkit, authority, https, proxy):
    """`fetch(url, reply=None, path="/")`: serve `reply` at `path`, then run http_fetch."""

    def run(url: str, reply: Reply | None = None, path: str = "/", timeout_s: str = "10"):
        if reply is not None:
            https.routes[path] = reply
        return toolkit("http_fetch", {"url": url}, env=_env(authority, proxy, timeout_s))

    return run


def test_a_text_page_shows_status_type_blank_line_and_body(fetch, https, proxy) -> None:
    ran = fetch("https://example.test/hello", Reply(headers=TEXT, body=b"hello, world\n"), "/hello")
    assert (ran.exit, ran.stderr) == (0, "")
    assert ran.stdout == (
        "HTTP/1.1 200 OK\nContent-Type: text/plain; charset=utf-8\n\nhello, world\n"
    )
    assert proxy.connects == ["CONNECT example.test:443 HTTP/1.1"]
    [request] = https.requests
    assert (request.method, request.path, request.version) == ("GET", "/hello", "HTTP/1.1")
    assert request.header("Host") == "example.test"
    assert request.header("User-Agent") == "boxmaker-toolkit"
    assert request.header("Accept-Encoding") == "identity"
    assert request.header("Connection") == "close"


def test_the_port_443_and_the_query_reach_the_server_as_written(fetch, https, proxy) -> None:
    ran = fetch(
        "https://www.example.test:443/search?q=a%20b&x=1",
        Reply(headers=TEXT, body=b"ok"),
        "/search",
    )
    assert ran.stdout.endswith("\n\nok")
    assert proxy.connects == ["CONNECT www.example.test:443 HTTP/1.1"]
    assert https.requests[0].path == "/search?q=a%20b&x=1"
    assert https.requests[0].header("Host") == "www.example.test"


def test_a_url_without_a_path_asks_for_slash(fetch, https) -> None:
    fetch("https://example.test", Reply(headers=TEXT, body=b"root"))
    assert https.requests[0].path == "/"


def test_the_body_is_decoded_with_the_charset_it_declares(fetch) -> None:
    reply = Reply(headers=(("Content-Type", "text/html; charset=ISO-8859-1"),), body=b"caf\xe9")
    ran = fetch("https://example.test/", reply)
    assert ran.stdout == "HTTP/1.1 200 OK\nContent-Type: text/html; charset=ISO-8859-1\n\ncafé"


def test_text_without_a_charset_is_utf8_with_replacement(fetch) -> None:
    reply = Reply(headers=(("Content-Type", "application/json"),), body=b'{"a":"\xe2\x98\x83\xff"}')
    assert fetch("https://example.test/", reply).stdout.endswith('\n\n{"a":"☃\ufffd"}')


def test_a_binary_body_is_described_not_shown(fetch) -> None:
    reply = Reply(headers=(("Content-Type", "image/png"),), body=b"\x89PNG" + bytes(12341))
    ran = fetch("https://example.test/logo.png", reply, "/logo.png")
    assert (ran.exit, ran.stdout) == (
        0,
        "HTTP/1.1 200 OK\nContent-Type: image/png\n\n[binary body: 12345 bytes of image/png]",
    )


def test_a_body_without_a_type_is_shown_only_if_it_is_plain_utf8(fetch, https) -> None:
    assert fetch("https://example.test/", Reply(headers=(), body=b"plain")).stdout == (
        "HTTP/1.1 200 OK\nContent-Type: (none)\n\nplain"
    )
    https.routes["/bin"] = Reply(headers=(), body=b"\x00\x01\x02")
    assert fetch("https://example.test/bin").stdout.endswith(
        "\n\n[binary body: 3 bytes of unknown type]"
    )


def test_a_redirect_is_reported_with_its_target_and_not_followed(fetch, https, proxy) -> None:
    reply = Reply(301, (("Location", "https://www.example.test/new"), *TEXT), b"moved")
    ran = fetch("https://example.test/old", reply, "/old")
    assert (ran.exit, ran.stdout) == (
        0,
        "HTTP/1.1 301 Moved Permanently\nContent-Type: text/plain; charset=utf-8\n\n"
        "redirect (301) to https://www.example.test/new: fetch that URL to follow it",
    )
    assert [r.path for r in https.requests] == ["/old"]
    assert len(proxy.connects) == 1


def test_a_relative_redirect_is_shown_as_an_absolute_url(fetch) -> None:
    ran = fetch("https://example.test/a/b", Reply(302, (("Location", "../c?d=1"),)), "/a/b")
    assert ran.stdout.endswith(
        "\n\nredirect (302) to https://example.test/c?d=1: fetch that URL to follow it"
    )


def test_an_error_status_is_shown_to_the_model(fetch) -> None:
    ran = fetch("https://example.test/nothing-here")
    assert (ran.exit, ran.stdout) == (
        0,
        "HTTP/1.1 404 Not Found\nContent-Type: text/plain; charset=utf-8\n\nnot found\n",
    )


def test_an_empty_body_says_so(fetch) -> None:
    ran = fetch("https://example.test/", Reply(204, ()))
    assert ran.stdout == "HTTP/1.1 204 No Content\nContent-Type: (none)\n\n[empty body]"


def test_a_chunked_body_is_put_together(fetch) -> None:
    body = bytes(range(32, 127)) * 3000  # 285000 bytes in chunks of 7000
    ran = fetch(
        "https://example.test/", Reply(headers=TEXT, body=body, framing="chunked", chunk=7000)
    )
    assert (
        ran.stdout == "HTTP/1.1 200 OK\nContent-Type: text/plain; charset=utf-8\n\n" + body.decode()
    )


def test_a_body_that_ends_with_the_connection_is_read_to_the_end(fetch) -> None:
    body = b"x" * 100_000
    ran = fetch("https://example.test/", Reply(headers=TEXT, body=body, framing="close"))
    assert ran.stdout.endswith("\n\n" + body.decode())


def test_a_body_over_1_mib_is_cut_and_says_how_long_it_was(fetch) -> None:
    reply = Reply(headers=TEXT, body=b"a" * (MIB + MIB // 2))
    ran = fetch("https://example.test/big", reply, "/big")
    assert ran.exit == 0
    assert ran.stdout == (
        "HTTP/1.1 200 OK\nContent-Type: text/plain; charset=utf-8\n\n"
        + "a" * MIB
        + "\n[body cut at 1048576 bytes; the body has 1572864 bytes]"
    )


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_body_over_1_mib_of_unknown_length_is_cut(fetch, framing) -> None:
    reply = Reply(headers=TEXT, body=b"z" * (3 * MIB), framing=framing)
    ran = fetch("https://example.test/", reply)
    assert ran.stdout.endswith(
        "\n\n" + "z" * MIB + "\n[body cut at 1048576 bytes; the body is longer]"
    )


def test_a_big_binary_body_is_described_with_its_length(fetch) -> None:
    reply = Reply(headers=(("Content-Type", "application/zip"),), body=bytes(2 * MIB))
    ran = fetch("https://example.test/", reply)
    assert ran.stdout.endswith("\n\n[binary body: 2097152 bytes of application/zip]")


def test_a_proxy_that_refuses_is_reported(toolkit, authority, https) -> None:
    with tls.ConnectProxy(
        https.address, refuse={"blocked.test": "HTTP/1.1 403 Forbidden"}
    ) as proxy:
        ran = toolkit("http_fetch", {"url": "https://blocked.test/x"}, env=_env(authority, proxy))
    assert (ran.exit, ran.stdout, ran.stderr) == (
        1,
        "http_fetch: https://blocked.test/x: the proxy refused: HTTP/1.1 403 Forbidden",
        "",
    )
    assert https.requests == []


def test_a_proxy_that_hangs_up_is_reported(toolkit, authority, https) -> None:
    with tls.ConnectProxy(https.address, refuse={"example.test": ""}) as proxy:
        ran = toolkit("http_fetch", {"url": "https://example.test/"}, env=_env(authority, proxy))
    assert (ran.exit, ran.stdout) == (
        1,
        "http_fetch: https://example.test/: the proxy closed the connection",
    )


def test_a_certificate_for_another_host_fails_tls(fetch, https) -> None:
    ran = fetch("https://other.test/")
    assert ran.exit == 1
    assert ran.stdout == (
        "http_fetch: https://other.test/: TLS failed: certificate verify failed: "
        "Hostname mismatch, certificate is not valid for 'other.test'."
    )
    assert https.requests == []


def test_a_certificate_from_an_unknown_ca_fails_tls(toolkit, authority, proxy) -> None:
    env = _env(authority, proxy)
    del env["SSL_CERT_FILE"]
    ran = toolkit("http_fetch", {"url": "https://example.test/"}, env=env)
    assert ran.exit == 1
    assert ran.stdout.startswith(
        "http_fetch: https://example.test/: TLS failed: certificate verify failed: "
    )


def test_a_server_slower_than_the_timeout_is_reported(fetch) -> None:
    ran = fetch("https://example.test/slow", Reply(headers=TEXT, delay_s=30), "/slow", "0.5")
    assert (ran.exit, ran.stdout) == (
        1,
        "http_fetch: https://example.test/slow: timed out after 0.5 s",
    )


def test_a_fetch_without_a_proxy_is_misuse(toolkit) -> None:
    ran = toolkit("http_fetch", {"url": "https://example.test/"})
    assert (ran.exit, ran.stdout, ran.stderr) == (
        2,
        "",
        "toolkit: http_fetch: BX_FETCH_PROXY is not set\n",
    )


def test_a_proxy_socket_that_is_not_there_is_misuse(toolkit, tmp_path) -> None:
    env = {"BX_FETCH_PROXY": str(tmp_path / "none.sock")}
    ran = toolkit("http_fetch", {"url": "https://example.test/"}, env=env)
    assert (ran.exit, ran.stdout, ran.stderr) == (
        2,
        "",
        f"toolkit: http_fetch: cannot connect to the fetch proxy {tmp_path}/none.sock: "
        "No such file or directory\n",
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://example.test/",
        "https://example.test:8443/",
        "https://user@example.test/",
        "https://example.test/a b",
        "https://example.test/\r\nX: y",
        "https://Example.test/",
        "https:///x",
        "https://example.test?q",
    ],
)
def test_a_url_brokerd_would_have_refused_is_misuse(toolkit, tmp_path, url) -> None:
    ran = toolkit("http_fetch", {"url": url}, env={"BX_FETCH_PROXY": str(tmp_path / "p")})
    assert ran.exit == 2 and ran.stdout == ""
    assert ran.stderr.startswith("toolkit: http_fetch: the arguments do not parse: invalid url: ")
    assert ran.stderr.count("\n") == 1


def test_a_body_shorter_than_its_content_length_is_a_failure(fetch) -> None:
    reply = Reply(headers=(*TEXT, ("Content-Length", "100")), body=b"short", framing="close")
    ran = fetch("https://example.test/", reply)
    assert (ran.exit, ran.stdout) == (
        1,
        "http_fetch: https://example.test/: the response is incomplete: "
        "the connection closed in the body",
    )
