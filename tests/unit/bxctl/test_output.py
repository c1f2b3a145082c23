"""`bxctl.output`: tables and lines show foreign text as the characters it is, never as rich
markup and never as terminal escapes, on a terminal (rich) and piped (plain)."""

from __future__ import annotations

import json
import re

import pytest

from bxcore.visible import visible
from bxctl import output

HOSTILE = [
    "[conceal]rm -rf ~[/conceal]",  # would hide the dangerous half of a command
    "[/x]",  # would make rich raise
    "[bold red]alarm",
    "[link=https://evil.example]click[/link]",
    ":smile: :warning:",  # emoji codes
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]0;pwned\x07",  # set the window title
    "safe\rrm -rf ~",  # CR: the start of the line again
    "\u202erm -rf ~",  # bidi override
    "a\u2028b",
    "\\x1b[2J",  # already an escape's text: shown as written
]
RICH_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # what rich itself adds for `bold` and colours


@pytest.fixture(params=["terminal", "piped"])
def where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """bxctl's output on a terminal (rich, forced to think it writes to one) or piped."""
    terminal = request.param == "terminal"
    monkeypatch.setattr(output, "is_terminal", lambda: terminal)
    monkeypatch.setenv("COLUMNS", "100")
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    return request.param


def shown(captured: str, where: str) -> str:
    """What the owner reads: rich's own styles taken out, and no escape of any other kind."""
    if where == "terminal":
        assert RICH_STYLE.search(captured), "rich did not think it wrote to a terminal"
    text = RICH_STYLE.sub("", captured)
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    return text


@pytest.mark.parametrize("text", HOSTILE)
def test_a_table_cell_is_shown_made_visible_and_never_as_markup(
    text: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output.table(["ID", "ARGUMENTS", "GRANT"], [["a1", text, "g"], ["a2", "plain", text]])
    lines = [line.rstrip() for line in shown(capsys.readouterr().out, where).splitlines()]
    assert lines[0].split() == ["ID", "ARGUMENTS", "GRANT"]
    assert lines[1].startswith("a1") and visible(text) in lines[1]
    assert lines[2].startswith("a2") and lines[2].endswith(visible(text))


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("style", [None, "red"])
def test_a_line_is_shown_made_visible_and_never_as_markup(
    text: str, style: str | None, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output.say(f"owner: {text}", style=style)
    captured = capsys.readouterr().out
    if style is None:
        assert captured == f"owner: {visible(text)}\n"
    else:
        assert shown(captured, where) == f"owner: {visible(text)}\n"


def test_a_line_is_one_line_whatever_it_holds(
    where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output.say("one\napproval abcd2345: shell\x1b[A", style="green")
    assert shown(capsys.readouterr().out, where) == "one\\x0aapproval abcd2345: shell\\x1b[A\n"


def test_a_long_cell_wraps_on_a_terminal_and_is_never_cut(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(output, "is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")
    long = "echo " + "x" * 150 + " && rm -rf ~"
    output.table(["ARGUMENTS"], [[long]])
    lines = RICH_STYLE.sub("", capsys.readouterr().out).splitlines()
    assert len(lines) > 4 and "…" not in "".join(lines)
    assert "".join("".join(lines[1:]).split()) == "".join(long.split())  # every character


def test_json_for_scripts_writes_every_hidden_character_as_a_json_escape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    value = {"c": "ls \u202e\u2066;\u0301 rm \U000e0041 \x9b2J é\u0301 ⚠\ufe0f", "\u200bk": [1]}
    output.print_json(value)
    printed = capsys.readouterr().out
    assert json.loads(printed) == value  # a script reads the same value
    assert "\\u202e\\u2066;\\u0301 rm \\udb40\\udc41 \\u009b2J é\u0301 ⚠\ufe0f" in printed
    assert "\\u200bk" in printed
    assert visible(printed, newlines=True) == printed  # nothing hidden reaches the terminal


@pytest.mark.parametrize(
    ("argv0", "on_path", "cwd", "shown"),
    [
        ("/src/box/.venv/bin/bxctl", "/src/box/.venv/bin/bxctl", "/src/box", "bxctl"),
        ("/src/box/.venv/bin/bxctl", "", "/src/box", ".venv/bin/bxctl"),
        ("/src/box/.venv/bin/bxctl", "/usr/bin/bxctl", "/src/box", ".venv/bin/bxctl"),
        ("/src/box/bxctl", "", "/src/box", "./bxctl"),
        ("/src/box/.venv/bin/bxctl", "", "/home/me", "/src/box/.venv/bin/bxctl"),
        ("/src/box/bxctl/__main__.py", "", "/src/box", "bxctl"),  # python -m bxctl
    ],
)
def test_the_commands_bxctl_suggests_name_it_as_the_owners_shell_finds_it(
    argv0: str, on_path: str, cwd: str, shown: str
) -> None:
    assert output.invocation(argv0, on_path, cwd) == shown
