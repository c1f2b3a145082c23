"""`[[mcp]] hosts` (SPEC §18.1): a server reaches exactly its hosts, on port 443, through its
own CONNECT proxy outside the sandbox (HTTPS_PROXY inside, on the sandbox's loopback), and
nothing else. A local HTTPS server with a test CA stands for the hosts, through `[sandbox]
fetch_pins`, as in test_fetch.py; the server trusts the CA through its entry's env."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bxcore.wire.messages import Done
from tests.support import tls
from tests.support.brokerd import args, call
from tests.support.daemons import init_home, running
from tests.support.mcp import FAKES, SERVERS, entry, grant, reachable, trust

HOST = "test.example"
OTHER = "other.example"


def test_a_server_reaches_its_hosts_and_no_other(short_tmp: Path) -> None:
    authority = tls.make_authority(short_tmp / "ca", hosts=(HOST, OTHER, "api.test.example"))
    reachable(short_tmp / "ca")
    for each in (short_tmp / "ca").iterdir():
        each.chmod(0o644)
    routes = {"/page": tls.Reply(body=b"hello from the host")}
    with tls.HttpsServer(authority, routes) as server:
        pin = f"127.0.0.1:{server.port}"
        pins = {HOST: pin, OTHER: pin, "api.test.example": pin}
        config = "[sandbox]\nfetch_pins = " + toml_table(pins) + "\n\n"
        config += entry(
            "probe",
            [sys.executable, str(SERVERS), "prober"],
            ro_paths=[str(FAKES), str(short_tmp / "ca")],
            hosts=[HOST],
        )
        config += f"env = {toml_table({'SSL_CERT_FILE': str(authority.ca_file)})}\n"
        home = init_home(short_tmp / "h", config)
        # results trusted: a tool given an address runs unasked (§20 asks for it once the
        # session is untrusted), and only the proxy stands between it and another host
        grant(home, "probe", "mcp__probe__*", kind="source", untrusted=False)
        with running("brokerd", home) as brokerd:
            trust(home, "probe")
            got = call(brokerd, "s1", "c1", "mcp__probe__https_get", url(HOST))
            assert isinstance(got, Done) and got.ok, got
            assert got.output == "200 hello from the host"
            other = call(brokerd, "s1", "c2", "mcp__probe__https_get", url(OTHER))
            assert isinstance(other, Done) and not other.ok, other
            assert "403" in other.output, other.output
            under = call(brokerd, "s1", "c3", "mcp__probe__https_get", url("api.test.example"))
            assert isinstance(under, Done) and not under.ok and "403" in under.output
            port = call(brokerd, "s1", "c4", "mcp__probe__https_get", url(HOST, ":8443"))
            assert isinstance(port, Done) and not port.ok and "403" in port.output
            direct = call(
                brokerd, "s1", "c5", "mcp__probe__connect", args(host="1.1.1.1", port=443)
            )
            assert isinstance(direct, Done) and not direct.ok and "cannot connect" in direct.output
        assert [r.path for r in server.requests] == ["/page"]  # only the allowed host's


def url(host: str, port: str = "") -> str:
    return args(url=f"https://{host}{port}/page")


def toml_table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()) + " }"
