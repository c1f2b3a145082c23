"""`[[mcp]]` entries (SPEC §18.1): checked like every key, one line naming the entry and key."""

from __future__ import annotations

import pytest

from bxcore.config.file import ConfigError, parse_config
from bxcore.config.mcp import EXAMPLE, McpServer
from bxcore.config.written import COMMENTED_CONFIG

GIT = """
[[mcp]]
name = "git"
command = ["mcp-server-git", "--repository", "/home/me/notes"]
paths = ["/home/me/notes"]
"""


def test_an_entry_with_only_name_and_command_takes_the_defaults() -> None:
    config = parse_config(b'[[mcp]]\nname = "t"\ncommand = ["/usr/bin/srv"]\n')
    assert config.mcp == (McpServer("t", ("/usr/bin/srv",)),)
    server = config.mcp[0]
    assert (server.per_session, server.idle_s, server.paths, dict(server.env)) == (
        True, 300.0, (), {}
    )  # fmt: skip


def test_every_key_of_an_entry_can_be_set() -> None:
    text = GIT + (
        'env = { GIT_AUTHOR_NAME = "me" }\nro_paths = ["/srv/ref"]\n'
        'hosts = ["api.example.com", "*.example.org"]\nper_session = false\nidle_s = 5\n'
    )
    (server,) = parse_config(text.encode()).mcp
    assert server.command == ("mcp-server-git", "--repository", "/home/me/notes")
    assert dict(server.env) == {"GIT_AUTHOR_NAME": "me"}
    assert server.paths == ("/home/me/notes",) and server.ro_paths == ("/srv/ref",)
    assert server.hosts == ("api.example.com", "*.example.org")
    assert server.per_session is False and server.idle_s == 5.0
    hash(server)


def test_entries_keep_the_files_order() -> None:
    text = GIT + '\n[[mcp]]\nname = "time"\ncommand = ["mcp-server-time"]\n'
    assert [s.name for s in parse_config(text.encode()).mcp] == ["git", "time"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[mcp]\nname = "x"\n', "config.toml: [mcp]: expected [[mcp]] entries"),
        ('[[mcp]]\ncommand = ["x"]\n', "config.toml: [[mcp]] #1 name: missing"),
        ('[[mcp]]\nname = "x"\n', 'config.toml: [[mcp]] "x" command: missing'),
        ('[[mcp]]\nname = "Git"\ncommand = ["x"]\n', "[[mcp]] #1 name: expected 1 to 24"),
        ('[[mcp]]\nname = "' + "a" * 25 + '"\ncommand = ["x"]\n', "#1 name: expected 1 to 24"),
        ('[[mcp]]\nname = "x"\ncommand = []\n', '"x" command: expected at least the program'),
        ('[[mcp]]\nname = "x"\ncommand = ["./srv"]\n', "must be an absolute path or a name"),
        ('[[mcp]]\nname = "x"\ncommand = ["/a/../b"]\n', "must be an absolute path or a name"),
        ('[[mcp]]\nname = "x"\ncommand = ["a", 3]\n', '"x" command: 3: expected a string'),
        ('[[mcp]]\nname = "x"\ncommand = "srv"\n', '"x" command: expected an array of strings'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nsurprise = 1\n', '"x" surprise: unknown key'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\npaths = ["rel"]\n', '"x" paths: "rel": expected'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\npaths = ["/a/"]\n', '"x" paths: "/a/": expected'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\npaths = ["/"]\n', "may not see the whole"),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nro_paths = ["/proc/1"]\n', "/proc is every"),
        (
            '[[mcp]]\nname = "x"\ncommand = ["s"]\npaths = ["/a"]\nro_paths = ["/a"]\n',
            '"x" ro_paths: "/a" is also in paths',
        ),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nhosts = ["127.0.0.1"]\n', '"x" hosts: "127.0'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nhosts = ["*.com"]\n', '"x" hosts: "*.com"'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nenv = { PATH = "/x" }\n', "brokerd sets PATH"),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nenv = { "A B" = "1" }\n', "environment variable"),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nenv = { A = 1 }\n', "A: expected a string"),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nidle_s = 0\n', '"x" idle_s: expected a number'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nper_session = 1\n', "expected a boolean"),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nstart_s = 0\n', '"x" start_s: expected a number'),
        ('[[mcp]]\nname = "x"\ncommand = ["s"]\nstart_s = 601\n', "at most 600"),
        (
            '[[mcp]]\nname = "x"\ncommand = ["s"]\n[[mcp]]\nname = "x"\ncommand = ["t"]\n',
            '[[mcp]] "x" name: another [[mcp]] entry has this name',
        ),
    ],
)
def test_a_bad_entry_is_one_line_naming_the_entry_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text.encode())
    assert message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_the_commented_config_shows_an_example_entry_that_parses() -> None:
    assert EXAMPLE in COMMENTED_CONFIG
    example = "\n".join(line.removeprefix("# ") for line in EXAMPLE.splitlines())
    (server,) = parse_config(example.encode()).mcp
    assert server.name == "git"


def test_the_listing_limit_is_ten_seconds_unless_start_s_says_otherwise() -> None:
    (default,) = parse_config(GIT.encode()).mcp
    (slow,) = parse_config((GIT + "start_s = 45\n").encode()).mcp
    assert (default.start_s, slow.start_s) == (10.0, 45.0)


@pytest.mark.parametrize("npx", ["npx", "/usr/bin/npx", "uvx"])
def test_an_npx_or_uvx_command_is_one_line_saying_what_to_run_instead(npx: str) -> None:
    text = (
        f'[[mcp]]\nname = "fs"\ncommand = ["{npx}", "-y", '
        '"@modelcontextprotocol/server-filesystem", "/home/me/my notes"]\n'
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text.encode())
    said = str(caught.value)
    assert len(said.splitlines()) == 1
    assert said.startswith('config.toml: [[mcp]] "fs" command: ')
    assert "its sandbox has no network" in said
    added = "bxctl mcp add fs -- npx -y @modelcontextprotocol/server-filesystem '/home/me/my notes'"
    assert f"`{added}`" in said.replace(npx, "npx")
    assert f"command: {npx.rsplit('/', 1)[-1]} fetches the server at each start" in said
