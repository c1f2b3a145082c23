"""bxcore.home.layout: where the home's files live, and a run folder short enough for sockets."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs
import pytest

from bxcore.home.layout import (
    MAX_SOCKET_PATH,
    SERVICES,
    SOCKETS,
    Home,
    HomeError,
    resolve_home,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _home_of_length(base: Path, length: int) -> Path:
    """A path under `base` exactly `length` characters long, in parts of at most 100."""
    path = base
    while len(str(path)) < length:
        room = length - len(str(path)) - 1
        path = path / ("h" * max(1, min(100, room)))
    assert len(str(path)) == length, "cannot make a path of that length under this base"
    return path


@pytest.fixture
def homes() -> Iterator[Callable[[Path], Home]]:
    """Makes Homes and removes whatever short run folder they made under /tmp."""
    made: list[Home] = []

    def make(root: Path) -> Home:
        home = Home(root)
        made.append(home)
        return home

    yield make
    for home in made:
        if home.run_moved:
            shutil.rmtree(home.run_dir, ignore_errors=True)


# -- resolve_home ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        ("/opt/a", {"BX_HOME": "/opt/b"}, "/opt/a"),
        (Path("/opt/a"), {"BX_HOME": "/opt/b"}, "/opt/a"),
        (None, {"BX_HOME": "/opt/b"}, "/opt/b"),
        ("", {"BX_HOME": "/opt/b"}, "/opt/b"),
        (None, {}, platformdirs.user_data_dir("boxmaker")),
        (None, {"BX_HOME": ""}, platformdirs.user_data_dir("boxmaker")),
        ("/opt/a/../b/", {}, "/opt/b"),  # normalised, so grants under it are valid paths
    ],
)
def test_the_home_is_the_option_else_bx_home_else_the_platform_folder(
    option: str | Path | None, env: dict[str, str], expected: str
) -> None:
    assert resolve_home(option, env) == Path(expected)


def test_a_relative_home_is_made_absolute_against_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_home("bx", {}) == tmp_path / "bx"
    assert resolve_home(None, {"BX_HOME": "bx"}) == tmp_path / "bx"


def test_a_tilde_in_the_home_is_the_users_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/kyle")
    assert resolve_home("~/bx", {}) == Path("/home/kyle/bx")


def test_a_home_through_a_symlink_keeps_the_symlinks_name(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert resolve_home(tmp_path / "link", {}) == tmp_path / "link"


def test_a_home_with_a_nul_is_refused_in_one_line() -> None:
    with pytest.raises(HomeError, match="NUL") as caught:
        resolve_home("/tmp/a\x00b", {})
    assert "\n" not in str(caught.value)


def test_home_resolve_builds_a_home_from_the_same_rules() -> None:
    assert Home.resolve(None, {"BX_HOME": "/opt/b"}) == Home(Path("/opt/b"))


def test_a_relative_home_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        Home(Path("bx"))


# -- the paths -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path_of", "relative"),
    [
        (lambda h: h.root, ""),
        (lambda h: h.config, "config.toml"),
        (lambda h: h.grants, "grants"),
        (lambda h: h.grant("read-notes"), "grants/read-notes.toml"),
        (lambda h: h.workspace, "workspace"),
        (lambda h: h.keys, "keys"),
        (lambda h: h.audit, "audit"),
        (lambda h: h.ledger, "audit/ledger.jsonl"),
        (lambda h: h.state_broker, "state/broker"),
        (lambda h: h.session_state("chat-1"), "state/broker/chat-1.json"),
        (lambda h: h.sessions, "sessions"),
        (lambda h: h.session_history("chat-1"), "sessions/chat-1.jsonl"),
        (lambda h: h.memory_db, "memory/memory.sqlite3"),
        (lambda h: h.logs, "logs"),
        (lambda h: h.log("brokerd"), "logs/brokerd.log"),
        (lambda h: h.run, "run"),
        (lambda h: h.run_dir, "run"),
        (lambda h: h.lock("brokerd"), "run/brokerd.lock"),
        (lambda h: h.pidfile("supervisor"), "run/supervisor.pid"),
        (lambda h: h.console_token, "keys/console.token"),
        (lambda h: h.socket_path("broker-events"), "run/broker-events.sock"),
    ],
)
def test_every_path_is_where_the_layout_puts_it(
    path_of: Callable[[Home], Path], relative: str
) -> None:
    home = Home(Path("/srv/bx"))
    assert path_of(home) == Path("/srv/bx") / relative


def test_an_endpoint_is_ipc_in_the_run_folder() -> None:
    assert Home(Path("/srv/bx")).endpoint("broker") == "ipc:///srv/bx/run/broker.sock"


def test_the_sockets_and_services_are_the_specs() -> None:
    assert SOCKETS == (
        "broker",
        "admin",
        "broker-events",
        "loop",
        "loop-events",
        "memory",
        "gateway",
        "supervisor",
    )
    assert SERVICES == ("brokerd", "memoryd", "loopd", "gatewayd")


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.grant("../escape"),
        lambda h: h.grant("Upper"),
        lambda h: h.grant(""),
        lambda h: h.session_history("../escape"),
        lambda h: h.session_history("a/b"),
        lambda h: h.session_state(".hidden"),
        lambda h: h.log("../x"),
        lambda h: h.lock("a/b"),
        lambda h: h.pidfile(""),
        lambda h: h.socket_path("x" * 33),
        lambda h: h.endpoint("Broker"),
    ],
)
def test_a_name_that_could_leave_its_folder_is_refused(call: Callable[[Home], Path]) -> None:
    with pytest.raises(ValueError, match="not a valid"):
        call(Home(Path("/srv/bx")))


# -- the run folder --------------------------------------------------------------------------


def test_a_short_home_keeps_its_run_folder_and_ensure_run_makes_it_0700(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(short_tmp / "home")
    assert not home.run_moved
    assert home.run_note == ""
    assert home.ensure_run() == home.run == short_tmp / "home" / "run"
    assert home.run.is_dir() and not home.run.is_symlink()
    assert _mode(home.run) == 0o700


def test_a_300_character_home_gets_a_run_folder_in_tmp_through_a_symlink(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    assert home.run_moved
    real = home.ensure_run()
    assert real == home.run_dir
    assert real.parent == Path("/tmp")
    assert real.name.startswith(f"bx-{os.getuid()}-") and len(real.name.split("-")[-1]) == 16
    assert home.run.is_symlink() and os.readlink(home.run) == str(real)
    assert _mode(real) == 0o700
    assert str(real) in home.run_note and "107" in home.run_note
    for name in SOCKETS:
        assert len(os.fsencode(home.socket_path(name))) <= MAX_SOCKET_PATH
        assert home.endpoint(name) == f"ipc://{real}/{name}.sock"
    assert home.lock("brokerd").parent == home.run  # through the symlink, in the same folder


@pytest.mark.parametrize(("length", "moved"), [(MAX_SOCKET_PATH, False), (108, True)])
def test_the_run_folder_moves_exactly_when_the_longest_socket_path_passes_107_bytes(
    short_tmp: Path, length: int, moved: bool
) -> None:
    suffix = len("/run/broker-events.sock")
    home = Home(_home_of_length(short_tmp, length - suffix))
    assert len(os.fsencode(home.run / "broker-events.sock")) == length
    assert home.run_moved is moved


def test_two_homes_get_two_short_run_folders(short_tmp: Path) -> None:
    first = Home(_home_of_length(short_tmp / "a", 200))
    second = Home(_home_of_length(short_tmp / "b", 200))
    assert first.run_dir != second.run_dir


@pytest.mark.parametrize("length", [40, 300])
def test_ensure_run_is_idempotent(
    short_tmp: Path, homes: Callable[[Path], Home], length: int
) -> None:
    home = homes(_home_of_length(short_tmp, length))
    first = home.ensure_run()
    (first / "kept").write_text("x")
    assert home.ensure_run() == first
    assert (first / "kept").read_text() == "x"
    assert _mode(first) == 0o700


@pytest.mark.parametrize("length", [40, 300])
def test_ensure_run_makes_0700_whatever_the_umask(
    short_tmp: Path, homes: Callable[[Path], Home], length: int
) -> None:
    home = homes(_home_of_length(short_tmp, length))
    old = os.umask(0o277)
    try:
        real = home.ensure_run()
    finally:
        os.umask(old)
    assert _mode(real) == 0o700


def test_an_existing_run_folder_open_to_others_is_closed_to_0700(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(short_tmp / "home")
    home.run.mkdir(parents=True, mode=0o755)
    os.chmod(home.run, 0o755)
    home.ensure_run()
    assert _mode(home.run) == 0o700


def _refusal(home: Home) -> str:
    with pytest.raises(HomeError) as caught:
        home.ensure_run()
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message


def test_a_foreign_symlink_in_place_of_the_run_folder_is_refused_in_one_line(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    elsewhere = short_tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    home.root.mkdir(parents=True)
    home.run.symlink_to(elsewhere)
    message = _refusal(home)
    assert str(elsewhere) in message and "refusing" in message
    assert os.readlink(home.run) == str(elsewhere)  # left as it was


def test_a_symlink_as_the_run_folder_of_a_short_home_is_refused(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(short_tmp / "home")
    (short_tmp / "elsewhere").mkdir()
    home.root.mkdir()
    home.run.symlink_to(short_tmp / "elsewhere")
    assert "not a folder" in _refusal(home)


def test_a_plain_folder_where_the_symlink_belongs_is_refused(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    home.run.mkdir(parents=True)
    assert "must be a symlink" in _refusal(home)


def test_a_tmp_run_folder_open_to_others_is_refused(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    home.run_dir.mkdir(mode=0o700)
    os.chmod(home.run_dir, 0o755)
    assert "mode 755" in _refusal(home)
    assert not home.run.exists()


def test_a_tmp_run_folder_that_is_a_symlink_is_refused(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    os.symlink(short_tmp, home.run_dir)
    try:
        assert "not a folder" in _refusal(home)
    finally:
        os.unlink(home.run_dir)


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_tmp_run_folder_owned_by_someone_else_is_refused(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    home = homes(_home_of_length(short_tmp, 300))
    home.run_dir.mkdir(mode=0o700)
    os.chown(home.run_dir, 65534, 65534)
    assert "owned by uid 65534" in _refusal(home)


def test_a_run_folder_that_cannot_be_made_is_one_line(
    short_tmp: Path, homes: Callable[[Path], Home]
) -> None:
    (short_tmp / "file").write_text("x")
    home = homes(short_tmp / "file" / "home")
    assert "cannot create the run folder" in _refusal(home)
