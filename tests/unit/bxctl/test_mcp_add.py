"""`bxctl mcp add NAME -- COMMAND` (issue 27) for commands that need no install: the entry is
appended to config.toml with the program brokerd will run and the paths its arguments name,
and nothing is written when the entry would not read."""

from __future__ import annotations

import sys
from pathlib import Path

from bxcore.config.file import load_config, parse_config
from bxctl.mcp_add import render_entry
from tests.support.cli import bxctl
from tests.support.daemons import init_home

VENV_BIN = Path(sys.executable).parent


def test_a_bare_name_is_written_as_the_program_brokerd_will_run(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    added = bxctl(home, "mcp", "add", "time", "--", "mcp-server-time", "--local-timezone=UTC")
    assert added.returncode == 0, added.stderr
    (server,) = load_config(home / "config.toml").mcp
    assert server.command == (str(VENV_BIN / "mcp-server-time"), "--local-timezone=UTC")
    assert "next: `bxctl restart brokerd` (or `bxctl up`), then `bxctl mcp trust time`" in (
        added.stdout
    )
    text = (home / "config.toml").read_text()
    assert "# bxctl mcp add time -- mcp-server-time --local-timezone=UTC\n[[mcp]]" in text


def test_the_paths_its_arguments_name_are_bound_read_write_unless_given_read_only(
    short_tmp: Path,
) -> None:
    repo, ref = short_tmp / "repo", short_tmp / "ref"
    repo.mkdir()
    ref.mkdir()
    home = init_home(short_tmp / "h")
    argv = ["mcp-server-git", "--repository", str(repo), str(ref), "/no/such/path"]
    added = bxctl(home, "mcp", "add", "git", "--ro-path", str(ref), "--env", "A=b=c", "--", *argv)
    assert added.returncode == 0, added.stderr
    (server,) = load_config(home / "config.toml").mcp
    assert (server.paths, server.ro_paths) == ((str(repo),), (str(ref),))
    assert dict(server.env) == {"A": "b=c"}


def test_an_entry_that_would_not_read_writes_nothing(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    before = (home / "config.toml").read_bytes()
    cases = [
        (["Time", "--", "mcp-server-time"], "a server's name is 1 to 24 of a-z 0-9 -"),
        (["t", "--", "mcp-server-nowhere"], "'mcp-server-nowhere' is not an executable program in"),
        (["t", "--path", "/", "--", "mcp-server-time"], 'paths: "/": a server may not see'),
        (["t", "--env", "PATH=/x", "--", "mcp-server-time"], "brokerd sets PATH"),
        (["t", "--env", "oops", "--", "mcp-server-time"], "--env 'oops': expected NAME=VALUE"),
        (["t", "--", "npx", "--registry", "x", "srv"], "npx option '--registry'"),
    ]
    for args, said in cases:
        done = bxctl(home, "mcp", "add", *args)
        assert done.returncode == 1 and said in done.stderr, (args, done)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (home / "config.toml").read_bytes() == before


def test_a_name_taken_or_a_broken_config_is_refused(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    assert bxctl(home, "mcp", "add", "time", "--", "mcp-server-time").returncode == 0
    again = bxctl(home, "mcp", "add", "time", "--", "mcp-server-time")
    assert again.returncode == 1 and "has an [[mcp]] entry named 'time' already" in again.stderr
    (home / "config.toml").write_text("[model\n")
    broken = bxctl(home, "mcp", "add", "other", "--", "mcp-server-time")
    assert broken.returncode == 1 and "config.toml must be mended first" in broken.stderr


def test_an_entry_reads_back_as_written() -> None:
    text = render_entry(
        "fs",
        ["/usr/bin/node", "/h/mcp/npm/fs/node_modules/x/dist/index.js", 'a "quoted" arg'],
        paths=["/data"],
        ro_paths=["/h/mcp/npm/fs/node_modules"],
        hosts=["api.example.com"],
        env={"TOKEN_FILE": "/data/t"},
        note="x 1.0, installed by `bxctl mcp add`",
    )
    (server,) = parse_config(text.encode()).mcp
    assert server.command[2] == 'a "quoted" arg' and server.hosts == ("api.example.com",)
    assert text.startswith("# x 1.0, installed by `bxctl mcp add`\n[[mcp]]\n")


#: An argument (or a package.json's version) that would end the note's comment and go on as
#: TOML of its own: a second server, with the owner's home bound read-write.
SMUGGLED = '1.0\n[[mcp]]\nname = "evil"\ncommand = ["/bin/sh"]\npaths = ["/home"]\n#'


def test_a_note_stays_one_comment_line_whatever_it_holds() -> None:
    text = render_entry("x", ["/bin/prog", SMUGGLED], note=f"x {SMUGGLED}, installed by ...")
    (server,) = parse_config(text.encode()).mcp
    assert server.name == "x" and server.command == ("/bin/prog", SMUGGLED)
    assert text.splitlines()[0].startswith("# x 1.0\\x0a[[mcp]]\\x0aname")


def test_an_argument_with_a_newline_adds_one_server_only(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    added = bxctl(home, "mcp", "add", "time", "--", "mcp-server-time", SMUGGLED)
    assert added.returncode == 0, added.stderr
    (server,) = load_config(home / "config.toml").mcp
    assert server.name == "time" and server.command[1:] == (SMUGGLED,)


def test_a_path_that_would_show_the_box_itself_is_not_added(short_tmp: Path) -> None:
    """A README's `… /home/me` holds the home: brokerd would not start the server (its keys,
    grants and sockets are no tool's), so `add` says so and writes nothing."""
    home = init_home(short_tmp / "h")
    before = (home / "config.toml").read_bytes()
    keys = ["--ro-path", str(home / "keys"), "--", "mcp-server-time"]
    for args in (["--", "mcp-server-time", str(short_tmp)], keys):
        done = bxctl(home, "mcp", "add", "time", *args)
        assert done.returncode == 1, done
        assert "not added: its path " in done.stderr and "would show boxmaker's own" in done.stderr
    assert (home / "config.toml").read_bytes() == before
    work = home / "workspace" / "notes"
    work.mkdir()
    assert bxctl(home, "mcp", "add", "time", "--", "mcp-server-time", str(work)).returncode == 0
