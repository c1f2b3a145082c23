"""The phone channel's state in `bxctl status` (SPEC §21.1), with a real supervisor and the
four daemons, and no homeserver at all: the box starts and serves as ever (nothing waits on
the homeserver), and status says the channel is away, or failed without its token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bxcore.config.file import load_config
from bxcore.home.layout import Home
from tests.support import cli
from tests.support.box import REPO, box_home, env, wait_until
from tests.support.daemons import free_port, init_home

pytestmark = pytest.mark.matrix
FOUR = ("brokerd", "memoryd", "loopd", "gatewayd")


@pytest.fixture
def home(short_tmp: Path) -> Iterator[Path]:
    with box_home(short_tmp) as home:
        yield home


def matrix_config(token_env: str) -> str:
    return (
        f'[matrix]\nhomeserver = "http://127.0.0.1:{free_port()}"\nuser = "@box:box.test"\n'
        f'owners = ["@me:box.test"]\nroom = "!room:box.test"\ntoken_env = "{token_env}"\n'
    )


def bxctl(home: Path, *args: str, token: str | None = None) -> cli.Completed:
    extra = {} if token is None else {"BX_TEST_MATRIX_TOKEN": token}
    return cli.bxctl(home, *args, env={**env(), **extra}, cwd=REPO, timeout=60)


def test_a_box_whose_homeserver_is_away_runs_and_says_so(home: Path) -> None:
    init_home(home, matrix_config("BX_TEST_MATRIX_TOKEN"))
    flags = [arg for name in FOUR for arg in ("--service", name)]
    started = bxctl(home, "up", *flags, token="syt_not_a_real_token")
    assert started.returncode == 0, started.stderr

    def away() -> dict[str, object] | None:
        result = bxctl(home, "status", "--json")
        data = json.loads(result.stdout)
        return data if (data.get("matrix") or {}).get("state") == "away" else None

    data = wait_until(away, 30, "the channel away")
    assert all(s["state"] == "running" for s in data["services"])
    text = bxctl(home, "status")
    assert text.returncode == 0, text.stdout  # the channel's state is no service's
    assert "matrix: away as @box:box.test in !room:box.test" in text.stdout
    assert "the homeserver does not answer" in text.stdout
    # the console's Services view reads the same line
    port = load_config(Home(home).config).console.port
    token = Home(home).console_token.read_text().strip()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        login = http.post("/api/login", json={"token": token})
        assert login.status_code == 200, login.text
        shown = http.get("/api/services", headers={"X-BX-Console": login.json()["key"]})
    assert shown.status_code == 200, shown.text
    matrix = shown.json()["matrix"]
    assert matrix["line"].startswith("matrix: away as @box:box.test") and matrix["style"]


def test_a_channel_without_its_token_is_failed_and_names_the_variable(home: Path) -> None:
    init_home(home, matrix_config("BX_TEST_MATRIX_NO_SUCH_TOKEN"))
    flags = [arg for name in FOUR for arg in ("--service", name)]
    assert bxctl(home, "up", *flags).returncode == 0

    def failed() -> str | None:
        result = bxctl(home, "status")
        return result.stdout if "matrix: failed" in result.stdout else None

    said = wait_until(failed, 30, "the channel failed")
    assert "BX_TEST_MATRIX_NO_SUCH_TOKEN" in said and "is not set" in said


def test_a_matrix_folder_others_can_read_fails_the_channel_not_the_box(home: Path) -> None:
    init_home(home, matrix_config("BX_TEST_MATRIX_TOKEN"))
    (home / "matrix").mkdir(mode=0o755)
    (home / "matrix").chmod(0o755)
    flags = [arg for name in FOUR for arg in ("--service", name)]
    assert bxctl(home, "up", *flags, token="syt_whatever").returncode == 0

    def failed() -> str | None:
        result = bxctl(home, "status")
        return result.stdout if "matrix: failed" in result.stdout else None

    said = wait_until(failed, 30, "the channel failed")
    assert "has mode 755, not 700" in said
    data = json.loads(bxctl(home, "status", "--json").stdout)
    assert all(s["state"] == "running" for s in data["services"])
