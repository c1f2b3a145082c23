"""services.brokerd.core.args, case by case: every example of SPEC §4.2-4.4 and serde's wordings."""

from __future__ import annotations

import json
import unicodedata

import pytest

from bxcore import tools
from bxcore.tools import Field, Kind, ToolSpec, Variant
from services.brokerd.core.args import (
    MAX_ARGUMENTS,
    MAX_DETAIL,
    MAX_PATH,
    MAX_URL,
    ArgsError,
    ArgsErrorKind,
    host_matches,
    inside,
    parse,
    url_host,
    valid_host,
    valid_host_pattern,
    valid_path,
)


def refusal(tool: str, arguments: str) -> ArgsError:
    with pytest.raises(ArgsError) as caught:
        parse(tool, arguments)
    return caught.value


# --- constants and names -------------------------------------------------------------------------


def test_the_limits_are_those_of_the_spec() -> None:
    assert (MAX_PATH, MAX_URL, MAX_DETAIL, MAX_ARGUMENTS) == (4096, 2048, 300, 2097152)


@pytest.mark.parametrize("name", ["spawn", "exec", ""])
def test_parsing_for_a_tool_that_is_not_brokered_is_a_bug_of_the_caller(name: str) -> None:
    with pytest.raises(ValueError, match="not a brokered tool"):
        parse(name, "{}")


# --- §4.4 paths ----------------------------------------------------------------------------------

VALID_PATHS = [
    "/",
    "/a",
    "/etc",
    "/home/kyle/notes",
    "/a/...",
    "/..a",
    "/a./b",
    "/.hidden",
    "/caf\u00e9",
    "/a b/c",
    "/" + "a" * (MAX_PATH - 1),
    "/" + "\u00e9" * ((MAX_PATH - 1) // 2),
]

INVALID_PATHS = [
    "",
    "a",
    "a/b",
    "./a",
    "/a/",
    "//",
    "/a//b",
    "/.",
    "/..",
    "/a/.",
    "/a/..",
    "/a/./b",
    "/a/../b",
    "/a\0b",
    "/\0",
    "\\a",
    "/" + "a" * MAX_PATH,
    "/" + "\u00e9" * (MAX_PATH // 2),  # fewer than MAX_PATH characters, more bytes
    "/\ud800",
]


@pytest.mark.parametrize("path", VALID_PATHS, ids=repr)
def test_a_well_formed_absolute_path_is_valid(path: str) -> None:
    assert valid_path(path)


@pytest.mark.parametrize("path", INVALID_PATHS, ids=lambda p: repr(p)[:40])
def test_a_path_that_would_need_normalising_or_is_not_absolute_is_invalid(path: str) -> None:
    assert not valid_path(path)


def test_a_path_with_a_trailing_slash_is_invalid() -> None:
    assert not valid_path("/a/")


@pytest.mark.parametrize(
    ("grant", "path"),
    [
        ("/home/kyle/notes", "/home/kyle/notes"),
        ("/home/kyle/notes", "/home/kyle/notes/a.md"),
        ("/home/kyle/notes", "/home/kyle/notes/deep/er"),
        ("/", "/"),
        ("/", "/anything/at/all"),
    ],
)
def test_a_path_at_or_under_the_grant_path_is_inside(grant: str, path: str) -> None:
    assert inside(grant, path)


@pytest.mark.parametrize(
    ("grant", "path"),
    [
        ("/home/kyle/notes", "/home/kyle/notes2"),
        ("/home/kyle/notes", "/home/kyle/note"),
        ("/home/kyle/notes", "/home/kyle"),
        ("/home/kyle/notes", "/"),
        ("/a/b", "/a"),
        ("/a", "/b/a"),
        ("/a", "/A"),
        ("/", "a"),
    ],
)
def test_a_path_is_inside_only_by_whole_components(grant: str, path: str) -> None:
    assert not inside(grant, path)


# --- §4.4 hosts ----------------------------------------------------------------------------------

LONGEST_HOST = ".".join(["a" * 63, "a" * 63, "a" * 63, "a" * 61])  # 253 bytes


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "www.example.com",
        "a-b.example.com",
        "a.b.c.d.e.io",
        "x1.io",
        "1.io",
        "a.b2",
        "xn--caf-dma.example",
        "a" * 63 + ".com",
        LONGEST_HOST,
    ],
)
def test_a_well_formed_host_name_is_a_valid_host(host: str) -> None:
    assert len(LONGEST_HOST) == 253
    assert valid_host(host)


@pytest.mark.parametrize(
    "host",
    [
        "",
        "com",
        "localhost",
        "127.0.0.1",
        "127.1",
        "10.0.0.0x1",
        "0x7f.1",
        "1.2",
        "a.1com",
        "Example.com",
        "EXAMPLE.COM",
        "-a.com",
        "a-.com",
        "a.-com",
        "a..com",
        ".a.com",
        "a.com.",
        "a_b.com",
        "exa mple.com",
        "ex\u00e4mple.com",
        "*.example.com",
        "[::1]",
        "a" * 64 + ".com",
        LONGEST_HOST + "a",
        "a.\ud800",
    ],
    ids=lambda h: repr(h)[:40],
)
def test_an_address_or_malformed_name_is_not_a_valid_host(host: str) -> None:
    assert not valid_host(host)


@pytest.mark.parametrize("pattern", ["example.com", "*.example.com", "*.a.io", "www.example.com"])
def test_a_host_or_a_star_dot_host_is_a_valid_pattern(pattern: str) -> None:
    assert valid_host_pattern(pattern)


@pytest.mark.parametrize(
    "pattern",
    ["*.com", "*example.com", "www.*.com", "*.*.example.com", "*", "*.", "**.example.com", ""],
)
def test_a_star_anywhere_but_a_leading_label_over_a_valid_host_is_invalid(pattern: str) -> None:
    assert not valid_host_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("*.example.com", "www.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "badexample.com", False),
        ("*.example.com", ".example.com", False),
        ("example.com", "example.com", True),
        ("example.com", "www.example.com", False),
        ("www.example.com", "example.com", False),
    ],
)
def test_a_pattern_matches_hosts_as_the_spec_says(pattern: str, host: str, matches: bool) -> None:
    assert host_matches(pattern, host) is matches


# --- §4.4 URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://example.com", "example.com"),
        ("https://example.com/", "example.com"),
        ("https://en.wikipedia.org/wiki/Bee", "en.wikipedia.org"),
        ("https://example.com:443", "example.com"),
        ("https://example.com:443/a?b=c#d", "example.com"),
        ("https://example.com/a?q=1&r=%20#frag", "example.com"),
        ("https://example.com/" + "a" * (MAX_URL - 20), "example.com"),
    ],
)
def test_an_https_url_gives_its_host(url: str, host: str) -> None:
    assert url_host(url) == host


@pytest.mark.parametrize(
    "url",
    [
        "",
        "https://",
        "http://example.com/",
        "HTTPS://example.com/",
        "Https://example.com/",
        "ftp://example.com/",
        "//example.com/",
        "https://Example.com/",
        "https://user@example.com/",
        "https://user:pw@example.com/",
        "https://example.com:8443/",
        "https://example.com:80/",
        "https://example.com:4430/",
        "https://example.com:443:443/",
        "https://example.com:/",
        "https://example.com?q=1",
        "https://example.com#frag",
        "https://[::1]/",
        "https://127.0.0.1/",
        "https://127.1/",
        "https://10.0.0.0x1/",
        "https://localhost/",
        "https://example.com/a b",
        "https://example.com/caf\u00e9",
        "https://example.com/\x7f",
        "https://example.com/\n",
        "https://example.com\\@evil.com/",
        " https://example.com/",
        "https://example.com/" + "a" * (MAX_URL - 19),
        "https://example.com/\ud800",
    ],
    ids=lambda u: repr(u)[:50],
)
def test_a_url_of_any_other_form_gives_no_host(url: str) -> None:
    assert url_host(url) is None


# --- §4.2 what parses, and its canonical form ----------------------------------------------------

PARSED = [
    ("read_file", '{ "path" : "\\u002fetc" }', '{"path":"/etc"}'),
    ("read_file", '{"path":"/etc"}', '{"path":"/etc"}'),
    ("read_file", ' \n\t{"path":"/etc"}\r\n ', '{"path":"/etc"}'),
    ("read_file", '{"path":"/caf\\u00e9"}', '{"path":"/café"}'),
    ("read_file", '{"path":"/\\ud83d\\ude00"}', '{"path":"/😀"}'),
    ("read_file", '{"path":"/"}', '{"path":"/"}'),
    ("write_file", '{"content":"hi","path":"/a"}', '{"path":"/a","content":"hi"}'),
    ("write_file", '{"path":"/a","content":""}', '{"path":"/a","content":""}'),
    ("write_file", '{"path":"/a","content":"\\n\\u0000"}', '{"path":"/a","content":"\\n\\u0000"}'),
    ("shell", '{"command":"ls"}', '{"command":"ls"}'),
    ("shell", '{"cwd":"/tmp","command":""}', '{"command":"","cwd":"/tmp"}'),
    ("shell", '{"command":"ls","cwd":null}', '{"command":"ls"}'),
    ("shell", '{"command":"ls","cwd":"/"}', '{"command":"ls","cwd":"/"}'),
    ("http_fetch", '{"url":"https://example.com:443/a"}', '{"url":"https://example.com:443/a"}'),
    ("memory", '{"text":"x","action":"note"}', '{"action":"note","text":"x"}'),
    ("memory", '{"action":"note","text":""}', '{"action":"note","text":""}'),
    ("memory", '{"action":"recall","query":"bees"}', '{"action":"recall","query":"bees"}'),
    ("memory", '{"id":7,"action":"forget"}', '{"action":"forget","id":7}'),
    ("memory", '{"action":"forget","id":-0}', '{"action":"forget","id":0}'),
    (
        "memory",
        '{"action":"forget","id":9223372036854775807}',
        '{"action":"forget","id":9223372036854775807}',
    ),
    (
        "memory",
        '{"action":"forget","id":-9223372036854775808}',
        '{"action":"forget","id":-9223372036854775808}',
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "canonical"), PARSED)
def test_valid_arguments_parse_to_their_canonical_json(
    tool: str, arguments: str, canonical: str
) -> None:
    parsed = parse(tool, arguments)
    assert parsed.tool == tool
    assert parsed.canonical_json() == canonical
    assert parse(tool, canonical) == parsed


def test_escaped_and_plain_spellings_of_a_path_give_the_same_value() -> None:
    assert parse("read_file", '{ "path" : "\\u002fetc" }') == parse("read_file", '{"path":"/etc"}')


def test_the_parsed_value_offers_its_fields_by_name() -> None:
    shell = parse("shell", '{"command":"ls -l","cwd":"/tmp"}')
    assert shell.get("command") == "ls -l"
    assert shell.cwd == "/tmp"
    assert shell.path is None
    assert shell.variant is None
    assert shell.host is None
    assert shell.get("nope") is None


def test_an_absent_cwd_is_none_and_left_out_of_the_canonical_json() -> None:
    shell = parse("shell", '{"command":"ls"}')
    assert shell.cwd is None
    assert "cwd" not in shell.canonical_json()


def test_a_fetch_keeps_the_host_and_never_writes_it() -> None:
    fetch = parse("http_fetch", '{"url":"https://www.example.com:443/x"}')
    assert fetch.host == "www.example.com"
    assert fetch.url == "https://www.example.com:443/x"
    assert fetch.canonical_json() == '{"url":"https://www.example.com:443/x"}'


def test_memory_names_its_variant_and_writes_the_tag_first() -> None:
    forget = parse("memory", '{"id":12,"action":"forget"}')
    assert forget.variant == "forget"
    assert forget.get("id") == 12
    assert forget.canonical_json() == '{"action":"forget","id":12}'


def test_a_parsed_value_is_read_only() -> None:
    parsed = parse("read_file", '{"path":"/etc"}')
    with pytest.raises(AttributeError):
        parsed.host = "evil.example.com"  # type: ignore[misc]


# --- §4.2 shape errors, serde's wording and order ------------------------------------------------

SHAPE_ERRORS = [
    # the M5b example, and unknown keys with one, two and more expected names
    (
        "memory",
        '{"action":"note","file":"notes.md","text":"x"}',
        "unknown field `file`, expected `text`",
    ),
    ("read_file", '{"path":"/etc","file":"x"}', "unknown field `file`, expected `path`"),
    (
        "write_file",
        '{"path":"/a","contnt":"x"}',
        "unknown field `contnt`, expected `path` or `content`",
    ),
    ("shell", '{"command":"ls","dir":"/"}', "unknown field `dir`, expected `command` or `cwd`"),
    ("http_fetch", '{"url":"https://a.io","host":"a.io"}', "unknown field `host`, expected `url`"),
    ("memory", '{"action":"recall","text":"x"}', "unknown field `text`, expected `query`"),
    ("memory", '{"action":"forget","id":1,"text":"x"}', "unknown field `text`, expected `id`"),
    ("read_file", '{"Path":"/etc"}', "unknown field `Path`, expected `path`"),
    ("read_file", '{"":"/etc"}', "unknown field ``, expected `path`"),
    # missing keys, in declared order
    ("read_file", "{}", "missing field `path`"),
    ("write_file", '{"path":"/a"}', "missing field `content`"),
    ("write_file", "{}", "missing field `path`"),
    ("write_file", '{"content":"x"}', "missing field `path`"),
    ("shell", "{}", "missing field `command`"),
    ("shell", '{"cwd":"/"}', "missing field `command`"),
    ("http_fetch", "{}", "missing field `url`"),
    ("memory", "{}", "missing field `action`"),
    ("memory", '{"text":"x"}', "missing field `action`"),
    ("memory", '{"action":"note"}', "missing field `text`"),
    ("memory", '{"action":"recall"}', "missing field `query`"),
    ("memory", '{"action":"forget"}', "missing field `id`"),
    # a key twice
    ("read_file", '{"path":"/a","path":"/b"}', "duplicate field `path`"),
    ("read_file", '{"path":"/a","path":"/a"}', "duplicate field `path`"),
    ("write_file", '{"path":"/a","content":"","content":"x"}', "duplicate field `content`"),
    ("shell", '{"command":"ls","cwd":null,"cwd":"/"}', "duplicate field `cwd`"),
    ("memory", '{"action":"note","action":"note","text":"x"}', "duplicate field `action`"),
    ("memory", '{"action":"note","text":"a","text":"b"}', "duplicate field `text`"),
    # not an object
    ("read_file", "null", "invalid type: null, expected an object"),
    ("read_file", "true", "invalid type: boolean, expected an object"),
    ("read_file", "3", "invalid type: integer, expected an object"),
    ("read_file", "-1.5e3", "invalid type: number, expected an object"),
    ("read_file", '"/etc"', "invalid type: string, expected an object"),
    ("read_file", "[]", "invalid type: array, expected an object"),
    ("read_file", '["/etc"]', "invalid type: array, expected an object"),
    ("memory", '["note","x"]', "invalid type: array, expected an object"),
    ("shell", '"ls"', "invalid type: string, expected an object"),
    # a wrong type, serde's Unexpected
    ("read_file", '{"path":3}', "invalid type: integer `3`, expected a string"),
    ("read_file", '{"path":-3}', "invalid type: integer `-3`, expected a string"),
    ("read_file", '{"path":null}', "invalid type: null, expected a string"),
    ("read_file", '{"path":true}', "invalid type: boolean `true`, expected a string"),
    ("read_file", '{"path":false}', "invalid type: boolean `false`, expected a string"),
    ("read_file", '{"path":1.5}', "invalid type: floating point `1.5`, expected a string"),
    ("read_file", '{"path":[]}', "invalid type: sequence, expected a string"),
    ("read_file", '{"path":["/etc"]}', "invalid type: sequence, expected a string"),
    ("read_file", '{"path":{}}', "invalid type: map, expected a string"),
    ("read_file", '{"path":{"path":"/etc"}}', "invalid type: map, expected a string"),
    ("write_file", '{"path":"/a","content":7}', "invalid type: integer `7`, expected a string"),
    ("shell", '{"command":["ls","-l"]}', "invalid type: sequence, expected a string"),
    ("shell", '{"command":"ls","cwd":1}', "invalid type: integer `1`, expected a string"),
    ("http_fetch", '{"url":null}', "invalid type: null, expected a string"),
    ("memory", '{"action":"note","text":null}', "invalid type: null, expected a string"),
    ("memory", '{"action":"recall","query":{}}', "invalid type: map, expected a string"),
    ("memory", '{"action":"forget","id":"x"}', 'invalid type: string "x", expected an integer'),
    ("memory", '{"action":"forget","id":"7"}', 'invalid type: string "7", expected an integer'),
    (
        "memory",
        '{"action":"forget","id":1.0}',
        "invalid type: floating point `1.0`, expected an integer",
    ),
    (
        "memory",
        '{"action":"forget","id":true}',
        "invalid type: boolean `true`, expected an integer",
    ),
    ("memory", '{"action":"forget","id":null}', "invalid type: null, expected an integer"),
    ("memory", '{"action":"forget","id":[1]}', "invalid type: sequence, expected an integer"),
    (
        "memory",
        '{"action":"forget","id":9223372036854775808}',
        "invalid value: integer `9223372036854775808`, expected a 64-bit signed integer",
    ),
    (
        "memory",
        '{"action":"forget","id":-9223372036854775809}',
        "invalid value: integer `-9223372036854775809`, expected a 64-bit signed integer",
    ),
    # memory's tag
    (
        "memory",
        '{"action":"delete"}',
        "unknown variant `delete`, expected one of `note`, `recall`, `forget`",
    ),
    (
        "memory",
        '{"action":"Note","text":"x"}',
        "unknown variant `Note`, expected one of `note`, `recall`, `forget`",
    ),
    (
        "memory",
        '{"action":"","text":"x"}',
        "unknown variant ``, expected one of `note`, `recall`, `forget`",
    ),
    ("memory", '{"action":0,"text":"x"}', "invalid type: integer `0`, expected a string"),
    ("memory", '{"action":null,"text":"x"}', "invalid type: null, expected a string"),
    ("memory", '{"action":["note"],"text":"x"}', "invalid type: sequence, expected a string"),
    # the first error met in document order wins; missing fields come after the walk
    ("read_file", '{"file":1,"path":2}', "unknown field `file`, expected `path`"),
    ("read_file", '{"path":2,"file":1}', "invalid type: integer `2`, expected a string"),
    ("read_file", '{"path":"/a","file":1,"path":"/b"}', "unknown field `file`, expected `path`"),
    ("read_file", '{"path":"/a","path":"/b","file":1}', "duplicate field `path`"),
    ("read_file", '{"path":"/a","path":2}', "duplicate field `path`"),
    ("read_file", '{"file":1}', "unknown field `file`, expected `path`"),
    ("write_file", '{"content":1}', "invalid type: integer `1`, expected a string"),
    (
        "memory",
        '{"file":1,"action":"delete"}',
        "unknown variant `delete`, expected one of `note`, `recall`, `forget`",
    ),
    ("memory", '{"file":1,"text":2}', "missing field `action`"),
    ("memory", '{"text":1,"action":"note"}', "invalid type: integer `1`, expected a string"),
    ("memory", '{"text":"x","action":"note","action":"zap"}', "duplicate field `action`"),
    # shape before path, and text after the object only once the object is good
    ("read_file", '{"path":"/a/","file":1}', "unknown field `file`, expected `path`"),
    ("read_file", '{"file":1} trailing', "unknown field `file`, expected `path`"),
    ("read_file", '"x" trailing', "invalid type: string, expected an object"),
    ("read_file", '{"path":"/etc"} x', "Extra data: line 1 column 17 (char 16)"),
    ("read_file", '{"path":"/etc"}{"path":"/etc"}', "Extra data: line 1 column 16 (char 15)"),
    ("read_file", '{"path":"/etc"}\n]', "Extra data: line 2 column 1 (char 16)"),
    # not JSON: Python's json's own message
    ("read_file", "", "Expecting value: line 1 column 1 (char 0)"),
    ("read_file", "   ", "Expecting value: line 1 column 4 (char 3)"),
    ("read_file", "nope", "Expecting value: line 1 column 1 (char 0)"),
    (
        "read_file",
        "{",
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    (
        "read_file",
        "{'path':'/a'}",
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    (
        "read_file",
        '{"path":"/a",}',
        "Expecting property name enclosed in double quotes: line 1 column 14 (char 13)",
    ),
    ("read_file", '{"path":"/a"', "Expecting ',' delimiter: line 1 column 13 (char 12)"),
    ("read_file", '{"path":01}', "Expecting ',' delimiter: line 1 column 10 (char 9)"),
    ("read_file", '{"path":"/a\x00"}', "Invalid control character at: line 1 column 12 (char 11)"),
    ("read_file", '{"path":"/a\nb"}', "Invalid control character at: line 1 column 12 (char 11)"),
    ("read_file", '{"path":"\\x"}', "Invalid \\escape: line 1 column 10 (char 9)"),
    ("read_file", '\ufeff{"path":"/a"}', "Expecting value: line 1 column 1 (char 0)"),
    # what serde_json refuses and Python's json would let through
    ("read_file", '{"path":NaN}', "NaN is not a JSON value"),
    ("read_file", '{"path":Infinity}', "Infinity is not a JSON value"),
    ("read_file", '{"path":-Infinity}', "-Infinity is not a JSON value"),
    ("read_file", "NaN", "NaN is not a JSON value"),
    ("read_file", '{"path":"/a","x":NaN}', "NaN is not a JSON value"),
    ("read_file", '{"path":1e999}', "number out of range"),
    ("read_file", '{"path":-1e999}', "number out of range"),
    ("memory", '{"action":"forget","id":1' + "0" * 309 + "}", "number out of range"),
    ("memory", '{"action":"forget","id":-1' + "0" * 5000 + "}", "number out of range"),
    ("read_file", '{"path":"\\ud800"}', "lone surrogate in hex escape"),
    ("read_file", '{"path":"\\uDBFF"}', "lone surrogate in hex escape"),
    ("read_file", '{"path":"\\udc00"}', "lone surrogate in hex escape"),
    ("read_file", '{"path":"\\ude00\\ud83d"}', "lone surrogate in hex escape"),
    ("read_file", '{"path":"/a\\ud800/b"}', "lone surrogate in hex escape"),
    ("read_file", '{"\\ud800":"/a"}', "lone surrogate in hex escape"),
    ("read_file", '{"path":"/a","x":[[{"y":"\\ud800"}]]}', "lone surrogate in hex escape"),
    ("read_file", '"\\ud800"', "lone surrogate in hex escape"),
    ("read_file", "[" * 100_000, "recursion limit exceeded"),
    ("read_file", "{" + '"a":{' * 100_000, "recursion limit exceeded"),
    ("read_file", '{"path":' + "[" * 100_000 + "]" * 100_000 + "}", "recursion limit exceeded"),
    ("memory", '{"action":"note","text":' + "[" * 100_000, "recursion limit exceeded"),
    # the raw text itself
    ("read_file", '{"path":"/\ud800"}', "the arguments are not valid UTF-8"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "why"),
    SHAPE_ERRORS,
    ids=lambda v: repr(v)[:60] if isinstance(v, str) else v,
)
def test_arguments_of_the_wrong_shape_are_refused_in_serdes_words(
    tool: str, arguments: str, why: str
) -> None:
    error = refusal(tool, arguments)
    assert error.kind is ArgsErrorKind.SHAPE
    assert str(error) == f"invalid argument shape: {why}"


def test_the_m5b_example_reads_as_the_spec_shows() -> None:
    error = refusal("memory", '{"action":"note","file":"notes.md","text":"x"}')
    assert str(error) == "invalid argument shape: unknown field `file`, expected `text`"
    assert error.detail() == str(error)


# --- §4.2 size -----------------------------------------------------------------------------------


def _write_file_of(size: int, filler: str = "x") -> str:
    """write_file arguments of exactly `size` bytes of UTF-8, padded with `filler`."""
    head, tail = '{"path":"/a","content":"', '"}'
    room = size - len(head) - len(tail)
    width = len(filler.encode())
    return head + filler * (room // width) + "x" * (room % width) + tail


def test_arguments_of_exactly_two_mebibytes_are_accepted() -> None:
    arguments = _write_file_of(MAX_ARGUMENTS)
    assert len(arguments.encode()) == MAX_ARGUMENTS
    content = parse("write_file", arguments).get("content")
    assert isinstance(content, str)
    assert len(content) > 2_000_000


@pytest.mark.parametrize(
    "arguments",
    [
        _write_file_of(MAX_ARGUMENTS + 1),
        _write_file_of(MAX_ARGUMENTS + 1, filler="\u00e9"),  # fewer characters than bytes
        _write_file_of(3 * 1024 * 1024),
        "x" * (3 * 1024 * 1024),
        " " * (MAX_ARGUMENTS + 1),
    ],
    ids=["one byte over", "over in bytes only", "3 MiB of content", "3 MiB of junk", "spaces"],
)
def test_arguments_larger_than_two_mebibytes_are_refused_before_decoding(arguments: str) -> None:
    error = refusal("write_file", arguments)
    assert str(error) == "invalid argument shape: the arguments are larger than 2097152 bytes"


# --- §4.2 path and url errors --------------------------------------------------------------------

PATH_ERRORS = [
    ("read_file", '{"path":"/a/"}', "/a/"),
    ("read_file", '{"path":"//"}', "//"),
    ("read_file", '{"path":""}', ""),
    ("read_file", '{"path":"etc/passwd"}', "etc/passwd"),
    ("read_file", '{"path":"/home/kyle/../../etc"}', "/home/kyle/../../etc"),
    ("read_file", '{"path":"/a\\u0000b"}', "/a\u0000b"),
    ("read_file", '{"path":"/\\u00fc/"}', "/\u00fc/"),
    ("read_file", '{"path":"/a\\nb/"}', "/a\nb/"),
    ("write_file", '{"path":"/tmp/./x","content":"x"}', "/tmp/./x"),
    ("write_file", '{"content":"x","path":"relative"}', "relative"),
    ("shell", '{"command":"ls","cwd":"/tmp/"}', "/tmp/"),
    ("shell", '{"command":"ls","cwd":"."}', "."),
    ("shell", '{"command":"ls","cwd":""}', ""),
    ("read_file", json.dumps({"path": "/" + "a" * MAX_PATH}), "/" + "a" * MAX_PATH),
]


@pytest.mark.parametrize(("tool", "arguments", "path"), PATH_ERRORS, ids=lambda v: repr(v)[:40])
def test_a_path_that_is_not_valid_is_a_path_error_in_every_tool_that_takes_one(
    tool: str, arguments: str, path: str
) -> None:
    error = refusal(tool, arguments)
    assert error.kind is ArgsErrorKind.PATH
    assert error.subject == path
    assert str(error) == "invalid path: " + json.dumps(path, ensure_ascii=False)


def test_a_path_error_quotes_the_path_as_a_json_string() -> None:
    assert (
        str(refusal("read_file", '{"path":"/a\\u0000\\"b/"}')) == 'invalid path: "/a\\u0000\\"b/"'
    )
    assert str(refusal("read_file", '{"path":"/\\u00fc/"}')) == 'invalid path: "/ü/"'


URL_ERRORS = [
    "http://example.com/",
    "https://user@example.com/",
    "https://example.com:8443/",
    "https://example.com?q=1",
    "https://example.com#f",
    "https://[::1]/",
    "https://Example.com/",
    "https://127.0.0.1/",
    "",
    "https://example.com/a b",
    "https://example.com/" + "a" * MAX_URL,
]


@pytest.mark.parametrize("url", URL_ERRORS, ids=lambda u: repr(u)[:40])
def test_a_url_that_gives_no_host_is_a_url_error(url: str) -> None:
    error = refusal("http_fetch", json.dumps({"url": url}))
    assert error.kind is ArgsErrorKind.URL
    assert str(error) == "invalid url: " + json.dumps(url, ensure_ascii=False)


# --- §4.3 the detail -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("why", "detail"),
    [
        ("a\nb\tc\rd", "a b c d"),
        ("\x00\x1f\x7f\x80\x85\x9f", "      "),
        ("a\u2028b\u2029c", "a b c"),
        ("\x1b[31mred", " [31mred"),
        ("\u00a0\u200b\u00a0", "\u00a0\u200b\u00a0"),  # not category Cc: kept
        ("\u00e9\u4e2d\U0001f600", "\u00e9\u4e2d\U0001f600"),
    ],
    ids=repr,
)
def test_the_detail_replaces_control_characters_and_separators_by_spaces(
    why: str, detail: str
) -> None:
    assert ArgsError.shape(why).detail() == "invalid argument shape: " + detail


@pytest.mark.parametrize("length", [0, 1, MAX_DETAIL - 1, MAX_DETAIL, MAX_DETAIL + 1, 1_000_000])
def test_the_detail_is_cut_to_three_hundred_characters(length: int) -> None:
    error = ArgsError.shape("\u00e9" * length)
    detail = error.detail()
    assert len(detail) == min(MAX_DETAIL, len(str(error)))
    assert detail == str(error)[:MAX_DETAIL]
    assert len(detail.encode()) > len(detail) or length == 0  # characters, not bytes


def test_the_detail_counts_a_character_outside_the_bmp_as_one() -> None:
    detail = ArgsError.path("/" + "\U0001f600" * 400).detail()
    assert len(detail) == MAX_DETAIL
    assert detail.endswith("\U0001f600")


def test_the_detail_of_a_refusal_holding_a_newline_is_one_line() -> None:
    error = refusal("read_file", '{"a\\nb\\u2028c":1}')
    assert str(error) == "invalid argument shape: unknown field `a\nb\u2028c`, expected `path`"
    assert error.detail() == "invalid argument shape: unknown field `a b c`, expected `path`"


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (ArgsError.shape("why"), "invalid argument shape: why"),
        (ArgsError.path("/a/"), 'invalid path: "/a/"'),
        (ArgsError.url("http://x"), 'invalid url: "http://x"'),
        (ArgsError.url('"'), 'invalid url: "\\""'),
    ],
)
def test_each_kind_of_error_reads_as_the_spec_says(error: ArgsError, text: str) -> None:
    assert str(error) == text


# --- hostile input -------------------------------------------------------------------------------

HOSTILE = [
    ("read_file", '{"path":' + json.dumps("/" + "a" * (3 * 1024 * 1024)) + "}"),
    ("read_file", '{"path":"/etc/passwd\\u0000.png"}'),
    ("read_file", '{"path":"/etc","path":"/home/kyle/notes"}'),
    ("read_file", '{"path":"/etc"' + ',"x":1' * 100_000 + "}"),
    ("write_file", '{"path":"/a","content":"x","content":"y"}'),
    ("shell", '{"command":"rm -rf /","cwd":"/home/kyle/notes/.."}'),
    ("shell", '{"command":{"$gt":""}}'),
    ("http_fetch", '{"url":"https://evil.com@example.com/"}'),
    ("http_fetch", '{"url":"https://example.com.evil.com:8080/"}'),
    ("http_fetch", '{"url":"https://example.com/\\r\\nHost: evil.com"}'),
    ("memory", '{"action":"forget","id":' + "9" * 400 + "}"),
    ("memory", '{"action":"note","text":"x","__proto__":{}}'),
    ("memory", "[" * 100_000),
    ("memory", '{"action":"note","text":"\\udfff"}'),
    ("memory", '{"action":NaN}'),
    ("read_file", "\x00" * 1000),
    ("read_file", '{"path":"/a"}' + "\x00"),
]


@pytest.mark.parametrize(("tool", "arguments"), HOSTILE, ids=lambda v: repr(v)[:40])
def test_hostile_arguments_are_refused_with_one_line_of_detail(tool: str, arguments: str) -> None:
    error = refusal(tool, arguments)
    detail = error.detail()
    assert 0 < len(detail) <= MAX_DETAIL
    assert not any(unicodedata.category(c) == "Cc" or c in "\u2028\u2029" for c in detail)


# --- tools are data (§4.5) -----------------------------------------------------------------------


@pytest.fixture
def made_up_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tools that are not among the five, described as data, as an MCP server's would be."""
    monkeypatch.setitem(tools.BROKERED, "nothing", ToolSpec(name="nothing", description="."))
    three = (
        Field("a", Kind.TEXT, "."),
        Field("b", Kind.INT, ".", optional=True),
        Field("c", Kind.URL, "."),
    )
    monkeypatch.setitem(
        tools.BROKERED,
        "tagged",
        ToolSpec(
            name="tagged",
            description=".",
            fields=(Field("where", Kind.PATH, "."),),
            tag="op",
            variants=(Variant("only", three, "."), Variant("empty", (), ".")),
        ),
    )


@pytest.mark.usefixtures("made_up_tools")
@pytest.mark.parametrize(
    ("tool", "arguments", "text"),
    [
        ("nothing", '{"a":1}', "invalid argument shape: unknown field `a`, there are no fields"),
        (
            "tagged",
            '{"op":"x"}',
            "invalid argument shape: unknown variant `x`, expected `only` or `empty`",
        ),
        (
            "tagged",
            '{"op":"only","where":"/","d":1}',
            "invalid argument shape: unknown field `d`, expected one of `where`, `a`, `b`, `c`",
        ),
        (
            "tagged",
            '{"op":"empty","a":1}',
            "invalid argument shape: unknown field `a`, expected `where`",
        ),
        (
            "tagged",
            '{"op":"only","a":"","c":"https://a.io"}',
            "invalid argument shape: missing field `where`",
        ),
        (
            "tagged",
            '{"op":"only","where":"/","a":"","b":-1,"c":"http://a.io"}',
            'invalid url: "http://a.io"',
        ),
        (
            "tagged",
            '{"op":"only","where":"/x/","a":"","c":"http://a.io"}',
            'invalid path: "/x/"',  # every path is checked before any URL
        ),
    ],
)
def test_a_tool_described_only_as_data_is_parsed_by_its_description(
    tool: str, arguments: str, text: str
) -> None:
    assert str(refusal(tool, arguments)) == text


@pytest.mark.usefixtures("made_up_tools")
def test_a_tool_described_only_as_data_parses_and_round_trips() -> None:
    assert parse("nothing", " {} ").canonical_json() == "{}"
    parsed = parse("tagged", '{"c":"https://a.io/x","where":"/w","a":"t","op":"only"}')
    assert parsed.variant == "only"
    assert parsed.host == "a.io"
    assert parsed.canonical_json() == '{"op":"only","where":"/w","a":"t","c":"https://a.io/x"}'
    assert parse("tagged", parsed.canonical_json()) == parsed
