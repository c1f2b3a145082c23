"""The toolkit's entry point: reading the input, the tool name, strict arguments, misuse (§8.3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MIB = 1024 * 1024
TOO_LARGE = "toolkit: the arguments are larger than 2097152 bytes\n"


def _padded(obj: str, size: int) -> bytes:
    """`obj` followed by spaces (JSON whitespace) up to exactly `size` bytes."""
    data = obj.encode()
    return data + b" " * (size - len(data))


def test_arguments_larger_than_2_mib_are_misuse(toolkit, tmp_path: Path) -> None:
    ran = toolkit("read_file", _padded('{"path":"/etc/hostname"}', 2 * MIB + 1))
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", TOO_LARGE)


def test_far_larger_arguments_are_refused_without_reading_them_all(toolkit) -> None:
    ran = toolkit("read_file", b"x" * (16 * MIB))
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", TOO_LARGE)


def test_arguments_of_exactly_2_mib_are_read(toolkit, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("exactly")
    ran = toolkit("read_file", _padded(f'{{"path":"{tmp_path}/f.txt"}}', 2 * MIB))
    assert (ran.exit, ran.stdout, ran.stderr) == (0, "exactly", "")


def test_arguments_that_are_not_utf8_are_misuse(toolkit) -> None:
    ran = toolkit("read_file", b'{"path":"/tmp/\xff"}')
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", "toolkit: the arguments are not UTF-8\n")


def test_the_input_is_read_before_the_tool_name_is_looked_at(toolkit) -> None:
    assert toolkit("no_such_tool", b"x" * (2 * MIB + 1)).stderr == TOO_LARGE
    assert toolkit([], b"\xff").stderr == "toolkit: the arguments are not UTF-8\n"


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["memory"], '"memory"'),
        (["spawn"], '"spawn"'),
        (["READ_FILE"], '"READ_FILE"'),
        ([""], '""'),
        ([], '""'),
        (["read_file", "write_file"], '""'),
        (["read_file", ""], '""'),
        ([b"read\xfffile"], '""'),
        (['bad\n"tool'], '"bad\\n\\"tool"'),
    ],
    ids=[
        "memory",
        "spawn",
        "uppercase",
        "empty",
        "none",
        "two",
        "two-second-empty",
        "not-utf8",
        "newline-and-quote",
    ],
)
def test_an_unknown_tool_or_not_exactly_one_argument_is_misuse(toolkit, argv, shown) -> None:
    ran = toolkit(argv, {"path": "/etc/hostname"})
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", f"toolkit: unknown tool {shown}\n")


BAD_ARGUMENTS = [
    ("read_file", '{"path":"/a","extra":1}', "unknown field `extra`, expected `path`"),
    ("read_file", "{}", "missing field `path`"),
    ("read_file", '{"path":3}', "invalid type: integer `3`, expected a string"),
    ("read_file", '{"path":null}', "invalid type: null, expected a string"),
    ("read_file", '{"path":{"a":1}}', "invalid type: object, expected a string"),
    ("read_file", '{"path":"/a","path":"/b"}', "duplicate field `path`"),
    ("read_file", '["/a"]', "invalid type: array, expected an object"),
    ("read_file", '"/a"', "invalid type: string, expected an object"),
    ("read_file", "null", "invalid type: null, expected an object"),
    ("read_file", "7", "invalid type: integer, expected an object"),
    ("read_file", "", "Expecting value: line 1 column 1 (char 0)"),
    ("read_file", '{"path":"/a"} x', "Extra data: line 1 column 15 (char 14)"),
    ("read_file", '{"path":"/a"}{}', "Extra data: line 1 column 14 (char 13)"),
    (
        "read_file",
        '{"path":"/a",}',
        "Expecting property name enclosed in double quotes: line 1 column 14 (char 13)",
    ),
    (
        "read_file",
        "{'path':'/a'}",
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    ("read_file", '{"path":NaN}', "invalid number `NaN`"),
    ("read_file", '{"path":"\\ud800"}', "invalid value: field `path` holds a lone surrogate"),
    ("read_file", '{"path":"a\tb"}', "Invalid control character at: line 1 column 11 (char 10)"),
    (
        "read_file",
        '\ufeff{"path":"/a"}',
        "Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)",
    ),
    ("read_file", "[" * 100_000, "recursion limit exceeded"),
    ("read_file", '{"a\\nb":1}', "unknown field `a b`, expected `path`"),
    ("write_file", '{"path":"/a"}', "missing field `content`"),
    ("write_file", '{"content":"x"}', "missing field `path`"),
    (
        "write_file",
        '{"path":"/a","content":true}',
        "invalid type: boolean `true`, expected a string",
    ),
    (
        "write_file",
        '{"path":"/a","text":"x"}',
        "unknown field `text`, expected `path` or `content`",
    ),
    ("shell", '{"cwd":"/"}', "missing field `command`"),
    ("shell", '{"command":"ls","cwd":["/"]}', "invalid type: array, expected a string"),
    ("shell", '{"command":"ls","cwd":null}', "invalid type: null, expected a string"),
    (
        "shell",
        '{"command":"ls","timeout":1}',
        "unknown field `timeout`, expected `command` or `cwd`",
    ),
    ("http_fetch", '{"url":1.5}', "invalid type: number `1.5`, expected a string"),
    ("http_fetch", '{"href":"https://example.test/"}', "unknown field `href`, expected `url`"),
    ("http_fetch", "{}", "missing field `url`"),
]


@pytest.mark.parametrize(("tool", "text", "why"), BAD_ARGUMENTS)
def test_arguments_that_do_not_parse_are_misuse(toolkit, tool, text, why) -> None:
    ran = toolkit(tool, text)
    expected = f"toolkit: {tool}: the arguments do not parse: {why}\n"
    assert (ran.exit, ran.stdout, ran.stderr) == (2, "", expected)


def test_a_huge_unknown_field_is_cut_on_one_line(toolkit) -> None:
    ran = toolkit("read_file", '{"' + "k" * 5000 + '\\n":1}')
    assert ran.exit == 2 and ran.stdout == ""
    line = ran.stderr.removesuffix("\n")
    assert "\n" not in line
    assert line.startswith("toolkit: read_file: the arguments do not parse: unknown field `kkk")
    assert line.endswith("k…")


def test_whitespace_around_the_object_is_fine(toolkit, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert toolkit("read_file", f' \n\t{{ "path" : "{tmp_path}/f" }}\r\n').stdout == "x"


def test_an_absent_optional_field_is_fine_and_order_does_not_matter(toolkit, tmp_path) -> None:
    ran = toolkit("shell", {"cwd": str(tmp_path), "command": "pwd"})
    assert ran.stdout == f"{tmp_path}\n[exit status 0]"


def test_python_m_services_toolkit_runs_the_same_program(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("via -m")
    done = subprocess.run(
        [sys.executable, "-m", "services.toolkit", "read_file"],
        input=f'{{"path":"{tmp_path}/f.txt"}}'.encode(),
        capture_output=True,
        cwd=Path(__file__).resolve().parents[3],
        timeout=20,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"via -m", b"")


def test_the_toolkit_console_script_runs_the_same_program(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "toolkit"
    assert script.exists(), "pip install -e . makes the toolkit console script"
    done = subprocess.run(
        [str(script), "read_file"], input=b"{}", capture_output=True, cwd=tmp_path, timeout=20
    )
    expected = b"toolkit: read_file: the arguments do not parse: missing field `path`\n"
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", expected)


def test_a_broken_standard_output_does_not_crash_the_toolkit(toolkit_command, tmp_path) -> None:
    (tmp_path / "f").write_text("some text")
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads what the toolkit prints
    try:
        done = subprocess.run(
            [*toolkit_command, "read_file"],
            input=f'{{"path":"{tmp_path}/f"}}'.encode(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=20,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, b"")
