"""`[[mcp]] hosts` (SPEC §18.1): which CONNECT targets a server's proxy accepts, and what its
sandbox gets when it has hosts (the proxy's socket, the bridge, HTTPS_PROXY) or has none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bxcore.config.mcp import McpServer
from services.brokerd.core.bwrap import Host
from services.brokerd.mcp import sandbox as mcp_sandbox
from services.brokerd.sandbox.fetch_proxy import Refused, host_allowed, requested_host

HOST = Host(
    bwrap="/usr/bin/bwrap",
    python="/opt/py/bin/python3.11",
    python_prefix="/opt/py",
    toolkit="/srv/bx/services/toolkit",
)
PATTERNS = ("api.example.com", "*.example.org")


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("api.example.com", True),
        ("API.Example.COM", True),
        ("example.com", False),
        ("evil-api.example.com", False),
        ("api.example.com.evil.net", False),
        ("www.example.org", True),
        ("a.b.example.org", True),
        ("example.org", False),  # *.base is what is under base, not base
        ("evilexample.org", False),
        ("api.example.com.", False),
        ("", False),
    ],
)
def test_a_host_is_allowed_only_when_a_pattern_names_it(host: str, allowed: bool) -> None:
    assert host_allowed(host, PATTERNS) is allowed


def test_nothing_is_allowed_without_hosts() -> None:
    assert not host_allowed("api.example.com", ())


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (b"GET https://api.example.com/ HTTP/1.1\r\n\r\n", "not a CONNECT request"),
        (b"CONNECT api.example.com:80 HTTP/1.1\r\n\r\n", "only port 443"),
        (b"CONNECT api.example.com HTTP/1.1\r\n\r\n", "only port 443"),
        (b"CONNECT :443 HTTP/1.1\r\n\r\n", "only port 443"),
        (b"CONNECT api.example.com:443 SPDY\r\n\r\n", "not a CONNECT request"),
    ],
)
def test_only_a_connect_to_port_443_names_a_host(head: bytes, why: str) -> None:
    with pytest.raises(Refused, match=why):
        requested_host(head)


def test_a_connect_names_its_host() -> None:
    assert requested_host(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n") == (
        "api.example.com"
    )


def test_a_server_with_hosts_gets_its_proxy_the_bridge_and_https_proxy() -> None:
    server = McpServer("web", ("/opt/srv/bin/web", "--flag"), hosts=("api.example.com",))
    argv = mcp_sandbox.command(HOST, server, "/opt/srv/bin/web", "/opt/srv", proxy="/h/p.sock")
    assert _after(argv, "/h/p.sock") == ["--ro-bind", "/h/p.sock", mcp_sandbox.PROXY_INSIDE]
    assert _after(argv, mcp_sandbox.BRIDGE) == [
        "--ro-bind",
        mcp_sandbox.BRIDGE,
        mcp_sandbox.BRIDGE_INSIDE,
    ]
    assert "--unshare-all" in argv and "--share-net" not in argv  # still no network of its own
    proxy = f"http://127.0.0.1:{mcp_sandbox.BRIDGE_PORT}"
    assert _env(argv)["HTTPS_PROXY"] == proxy and _env(argv)["https_proxy"] == proxy
    tail = argv[argv.index("--") + 1 :]
    assert tail == [
        HOST.python, "-I", "-S", mcp_sandbox.BRIDGE_INSIDE, "--proxy", mcp_sandbox.PROXY_INSIDE,
        str(mcp_sandbox.BRIDGE_PORT), "--", "/opt/srv/bin/web", "--flag",
    ]  # fmt: skip


def test_a_server_without_hosts_gets_no_proxy() -> None:
    server = McpServer("git", ("/opt/srv/bin/git",))
    argv = mcp_sandbox.command(HOST, server, "/opt/srv/bin/git", "/opt/srv")
    assert mcp_sandbox.PROXY_INSIDE not in argv and mcp_sandbox.BRIDGE_INSIDE not in argv
    assert "HTTPS_PROXY" not in _env(argv)
    assert argv[argv.index("--") + 1 :] == ["/opt/srv/bin/git"]


def test_a_root_brokerds_server_is_launched_mapped_and_becomes_the_tool_user() -> None:
    root = replace(HOST, drop_to=(65534, 65534))
    server = McpServer("git", ("/opt/srv/bin/git",))
    argv = mcp_sandbox.command(root, server, "/opt/srv/bin/git", "/opt/srv")
    assert "--uid" not in argv and "--disable-userns" not in argv  # the map is written for it
    caps = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--cap-add"]
    assert sorted(caps) == ["CAP_SETGID", "CAP_SETUID", "CAP_SYS_RESOURCE"]
    assert argv[argv.index("--") + 1 :] == [
        root.python, "-I", "-S", mcp_sandbox.BRIDGE_INSIDE, "--user", "65534:65534", "--",
        "/opt/srv/bin/git",
    ]  # fmt: skip
    launched = mcp_sandbox.launched(root, argv, "/h/run/f.bpf")
    assert launched[:10] == [
        root.python, "-I", "-S", mcp_sandbox.LAUNCH, "--map", "65534", "65534",
        "--seccomp", "/h/run/f.bpf", "--",
    ]  # fmt: skip
    assert launched[10:] == argv
    assert mcp_sandbox.launched(HOST, argv, None) == argv
    assert mcp_sandbox.launched(HOST, argv, "/f")[4:7] == ["--seccomp", "/f", "--"]


def _after(argv: list[str], source: str) -> list[str]:
    at = argv.index(source)
    return argv[at - 1 : at + 2]


def _env(argv: list[str]) -> dict[str, str]:
    return {argv[i + 1]: argv[i + 2] for i, arg in enumerate(argv) if arg == "--setenv"}
