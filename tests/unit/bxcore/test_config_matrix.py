"""The `[matrix]` table (SPEC §21.1): no table, no channel; every problem one line naming the
key; the token never in the file."""

from __future__ import annotations

import dataclasses

import pytest

from bxcore.config.file import ConfigError, parse_config
from bxcore.config.matrix import MATRIX_KEYS, MatrixConfig

GOOD = """\
[matrix]
homeserver = "https://matrix.example.org"
user = "@box:example.org"
owners = ["@me:example.org", "@partner:example.net"]
room = "!abc:example.org"
"""


def test_no_table_is_no_channel() -> None:
    assert parse_config(b"").matrix is None


def test_a_good_table_gives_the_channel_with_its_defaults() -> None:
    matrix = parse_config(GOOD.encode()).matrix
    assert matrix == MatrixConfig(
        homeserver="https://matrix.example.org",
        user="@box:example.org",
        owners=("@me:example.org", "@partner:example.net"),
        room="!abc:example.org",
        token_env="BX_MATRIX_TOKEN",
        encrypted=True,
    )


def test_the_dataclass_has_exactly_the_tables_keys() -> None:
    names = [f.name for f in dataclasses.fields(MatrixConfig)]
    assert sorted(names) == sorted(k.attr for k in MATRIX_KEYS)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            'homeserver = "matrix.example.org"',
            "[matrix] homeserver: expected an http:// or https://",
        ),
        ("homeserver = 8008", "[matrix] homeserver: expected a string, got 8008"),
        ('user = "box"', "[matrix] user: expected a user id such as @box:example.org"),
        ('user = "@box"', "[matrix] user: expected a user id"),
        ('owners = "@me:example.org"', "[matrix] owners: expected an array of strings"),
        ("owners = []", "[matrix] owners: expected at least one owner"),
        ('owners = ["me"]', '[matrix] owners: "me": expected a user id'),
        ('owners = ["@box:example.org"]', "[matrix] owners: the box's own account cannot be"),
        ('room = "#room:example.org"', "[matrix] room: expected a room id such as !abc"),
        ('token_env = "MY TOKEN"', "[matrix] token_env: expected an environment variable name"),
        ('token_env = ""', "[matrix] token_env: expected an environment variable name"),
        ('encrypted = "yes"', "[matrix] encrypted: expected a boolean"),
        ('token = "syt_secret"', "[matrix] token: unknown key"),
    ],
)
def test_a_bad_key_is_one_line_naming_it(change: str, said: str) -> None:
    name = change.split(" = ")[0]
    lines = [line for line in GOOD.splitlines() if not line.startswith(name + " ")]
    text = "\n".join([*lines, change]) + "\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text.encode())
    message = str(caught.value)
    assert said in message
    assert "\n" not in message


@pytest.mark.parametrize("key", ["homeserver", "user", "owners", "room"])
def test_a_required_key_missing_is_named(key: str) -> None:
    text = "\n".join(line for line in GOOD.splitlines() if not line.startswith(key + " "))
    with pytest.raises(ConfigError, match=rf"\[matrix\] {key}: missing"):
        parse_config(text.encode())


def test_matrix_as_an_array_of_tables_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\[matrix\]: expected a table"):
        parse_config(b'[[matrix]]\nhomeserver = "https://x.example"\n')


def test_an_owner_named_twice_is_kept_once() -> None:
    text = GOOD.replace('"@partner:example.net"', '"@me:example.org"')
    matrix = parse_config(text.encode()).matrix
    assert matrix is not None and matrix.owners == ("@me:example.org",)
