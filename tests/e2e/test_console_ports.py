"""The console's port (issue 27 item 2, which stands over SPEC §12.1's "a taken port does not
start"): a port already taken moves the console to the next free one, and says so in `bxctl
up` and gatewayd's log; every link `up`, `console`, `restart` and `status` print is the one
gatewayd serves (its report, never config.toml's number); a gatewayd that cannot have any of
its ports is failed, and no link is printed for it. Each test starts real boxes with `bxctl
up`, on ports of its own.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from services.gatewayd.console.server import PORTS_TRIED
from tests.support.box import box_home, bxctl
from tests.support.daemons import free_port, init_home
from tests.support.e2e import UpBox, box_up

CHANGE = {"X-BX-Console": "1"}
LINK = re.compile(r"^console: (http://127\.0\.0\.1:(\d+)/#token=(\S+))$", re.M)


@contextlib.contextmanager
def held_ports(count: int) -> Iterator[int]:
    """`count` ports in a row on 127.0.0.1, each listened on by this test; the first."""
    while True:
        base = free_port()
        holders: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                holder = socket.socket()
                holders.append(holder)
                holder.bind(("127.0.0.1", port))
                holder.listen()
        except OSError:
            for holder in holders:
                holder.close()
            continue
        try:
            yield base
        finally:
            for holder in holders:
                holder.close()
        return


def link_of(output: str) -> tuple[str, int, str]:
    """The one console link an output prints: the link, its port, its token."""
    links = LINK.findall(output)
    assert len(links) == 1, output
    link, port, token = links[0]
    return link, int(port), token


def served_port(box: UpBox) -> int:
    """The port `bxctl status --json` says the console is served on."""
    port = urlsplit(box.status()["console"]).port
    assert port is not None
    return port


def logs_in(port: int, token: str) -> bool:
    """Whether the console on `port` takes `token` (the Host check names the port too)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        login = client.post("/api/login", json={"token": token}, headers=CHANGE)
        if login.status_code != 200:
            return False
        key = login.json().get("key", "1")  # the page's key, once the console hands one out
        return client.get("/api/services", headers={"X-BX-Console": key}).status_code == 200


def set_port(home: Path, port: int) -> None:
    config = (home / "config.toml").read_text()
    (home / "config.toml").write_text(re.sub(r"(?m)^port = \d+$", f"port = {port}", config))


def test_a_taken_port_moves_the_console_to_the_next_free_one_and_every_link_says_where() -> None:
    with held_ports(1) as taken, box_up(before_up=lambda home: set_port(home, taken)) as box:
        assert box.started is not None
        up = box.started.stdout
        link, port, token = link_of(up)
        assert taken < port < taken + PORTS_TRIED
        assert f"console: port {taken} was taken, so the console took {port}" in up
        assert token == (box.home / "keys" / "console.token").read_text().strip()
        log = (box.home / "logs" / "gatewayd.log").read_text()
        assert f"the console's port {taken} on 127.0.0.1 is taken" in log
        assert f"listens on port {port} instead" in log
        assert logs_in(port, token)
        assert served_port(box) == port
        shown = box.bxctl("console")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == link
        status = box.bxctl("status")
        assert f"console: http://127.0.0.1:{port}/  (" in status.stdout, status.stdout
        assert f"port {taken} was taken" in status.stdout


def test_after_a_port_change_restart_and_status_print_the_new_port() -> None:
    with box_up() as box:
        assert box.started is not None
        _, before, token = link_of(box.started.stdout)
        after = free_port()
        set_port(box.home, after)
        assert served_port(box) == before  # config.toml's new number is not served yet
        assert box.bxctl("console").stdout.startswith(f"http://127.0.0.1:{before}/#token=")
        restarted = box.bxctl("restart", "gatewayd")
        assert restarted.returncode == 0, restarted.stderr
        link, port, _ = link_of(restarted.stdout)
        assert port == after and "was taken" not in restarted.stdout
        assert box.bxctl("console").stdout.strip() == link
        assert served_port(box) == after
        assert f"console: http://127.0.0.1:{after}/  (" in box.bxctl("status").stdout
        assert logs_in(after, token)


def test_a_second_homes_box_on_the_same_port_serves_its_own_console_at_its_own_link() -> None:
    with box_up() as first:
        port = served_port(first)
        with box_up(before_up=lambda home: set_port(home, port)) as second:
            assert second.started is not None
            link, moved, token = link_of(second.started.stdout)
            assert first.started is not None
            assert moved != port and token != link_of(first.started.stdout)[2]
            assert f"port {port} was taken" in second.started.stdout
            assert logs_in(moved, token)
            assert not logs_in(port, token)  # the first box's console refuses the second's token
            assert second.bxctl("console").stdout.strip() == link
            assert served_port(first) == port


def test_with_every_port_it_tries_taken_gatewayd_fails_in_one_line_and_no_link_is_printed(
    short_tmp: Path,
) -> None:
    with held_ports(PORTS_TRIED) as taken, box_home(short_tmp) as home:
        init_home(home, f"[console]\nport = {taken}\n")
        result = bxctl(home, "up")
        assert result.returncode == 1
        assert "gatewayd failed to start" in result.stderr.splitlines()[-1]
        assert "console:" not in result.stdout
        log = (home / "logs" / "gatewayd.log").read_text()
        said = [line for line in log.splitlines() if line.startswith("gatewayd: ")]
        assert len(said) == 1, log
        last = taken + PORTS_TRIED - 1
        assert f"ports {taken} to {last} on 127.0.0.1 are all taken" in said[0]
        assert said[0] in result.stderr  # `up` shows it
        assert "Traceback" not in log
        assert log.count("started gatewayd") == 1  # exit 78: no restart can mend it
        status = bxctl(home, "status", "--json")
        assert status.returncode == 3
        data = json.loads(status.stdout)
        states = {service["name"]: service["state"] for service in data["services"]}
        assert states["gatewayd"] == "failed" and data["console"] is None
        plain = bxctl(home, "status").stdout
        assert re.search(r"(?m)^gatewayd\s+failed", plain) and "console:" not in plain
        shown = bxctl(home, "console")
        assert shown.returncode == 1
        assert shown.stderr.strip().splitlines() == [
            "bxctl: gatewayd is not running (failed: cannot start: exit 78), so nothing serves "
            "the console; see `bxctl logs gatewayd`"
        ]
