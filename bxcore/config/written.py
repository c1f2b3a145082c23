"""What is written from the config's key table (`bxcore.config.keys`): the commented
`config.toml` that `bxctl init` writes (`COMMENTED_CONFIG`), every key at its default with a
line of help, and the reference page docs/configuration.md (`config_reference_markdown`); and
a value written as TOML (`toml_value`), which grant and job files are written with too.
Pure: no I/O. Reading the file back is `bxcore.config.file`'s.
"""

from __future__ import annotations

import textwrap
from typing import Any

from bxcore.config.keys import KEYS, SECTIONS, Key, show_name
from bxcore.config.matrix import EXAMPLE as MATRIX_EXAMPLE
from bxcore.config.matrix import MATRIX_KEYS
from bxcore.config.mcp import EXAMPLE, MCP_KEYS


def toml_value(value: Any) -> str:
    """A default written as TOML: multi-line strings as \"\"\"...\"\"\", tables inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, str):
        if "\n" not in value:
            return '"' + _escape(value, multiline=False) + '"'
        return '"""\n' + _escape(value, multiline=True) + '"""'
    pairs = ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in dict(value).items())
    return "{ " + pairs + " }" if pairs else "{}"


def _escape(text: str, multiline: bool) -> str:
    """Escape for a TOML basic string. A multi-line one keeps its newlines, and its quotes
    except one followed by a quote or ending the text, so no \"\"\" can close it early."""
    out = []
    for at, char in enumerate(text):
        if char == '"' and multiline:
            last_or_doubled = at + 1 == len(text) or text[at + 1] == '"'
            out.append('\\"' if last_or_doubled else char)
        elif char == "\\" or char == '"':
            out.append("\\" + char)
        elif char == "\n" and multiline:
            out.append(char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def render_config(commented: bool = True) -> str:
    """The config file `bxctl init` writes: every key at its default, with one line of help.

    With `commented` (the file `bxctl init` writes) each key is behind `# `, so the file
    parses to the defaults and the owner uncomments what they change.
    """
    lead = "# " if commented else ""
    lines = [
        "# boxmaker's settings. Every key is shown with its default; uncomment a key to change",
        "# it. An unknown key or a wrong value stops the services with a one-line error.",
        "# The reference is docs/configuration.md.",
    ]
    for section, about in SECTIONS.items():
        lines += ["", f"[{section}]", *_wrap(about)]
        for key in KEYS:
            if key.section == section:
                setting = f"{show_name(key.name)} = {toml_value(key.default)}"
                lines += ["", *_wrap(key.help)]
                lines += [(lead + line).rstrip() for line in setting.split("\n")]
    lines += ["", *_wrap(_MCP_ABOUT), "#", EXAMPLE]  # always commented: there is no default
    lines += ["", *_wrap(_MATRIX_ABOUT), "#", MATRIX_EXAMPLE]
    return "\n".join(lines) + "\n"


_MCP_ABOUT = (
    "MCP servers: one [[mcp]] entry each; their tools are offered to the model "
    "only once the owner trusts them (`bxctl mcp trust NAME`). See docs/mcp.md."
)


_MATRIX_ABOUT = (
    "The owner's phone (SPEC §21): with a [matrix] table gatewayd is a Matrix client in one "
    "room, end-to-end encrypted. See docs/matrix.md."
)


def _wrap(help_: str) -> list[str]:
    return textwrap.wrap(help_, width=92, initial_indent="# ", subsequent_indent="# ")


COMMENTED_CONFIG: str = render_config()


def config_reference_markdown() -> str:
    """docs/configuration.md: an intro, one table of every key, and the default prompts."""
    lines = [
        "# Configuration",
        "",
        "boxmaker reads its settings from `{home}/config.toml` (SPEC §14). Every key has a",
        "default, so a missing or empty file works; `bxctl init` writes a file with every key",
        "commented out at its default. An unknown section or key, a value of the wrong type (a",
        "boolean is not a number) or out of range is a one-line error naming the key, and the",
        "services do not start. API keys are never written here: `api_key_env` names the",
        "environment variable that holds one. This page is generated from",
        "`bxcore/config/keys.py` (`bxcore.config.written.config_reference_markdown()`).",
        "",
        "| key | default | values | what it does |",
        "|---|---|---|---|",
    ]
    for key in KEYS:
        value = key.default
        shown = "(below)" if isinstance(value, str) and "\n" in value else f"`{toml_value(value)}`"
        cells = [f"`[{key.section}] {key.name}`", shown, key.check.allowed, key.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        "## `[[mcp]]` entries",
        "",
        "Each MCP server is one `[[mcp]]` table (SPEC §18.1, docs/mcp.md); there are none by",
        'default. A problem names the entry (`[[mcp]] "git" paths: ...`).',
        "",
        *_entry_table(MCP_KEYS),
    ]
    lines += [
        "",
        "## The `[matrix]` table",
        "",
        "The owner's phone channel (SPEC §21, docs/matrix.md); no table, no channel. A table",
        "must name the keys marked required.",
        "",
        *_entry_table(MATRIX_KEYS),
    ]
    for key in KEYS:
        if isinstance(key.default, str) and "\n" in key.default:
            lines += ["", f"## The default `{key.name}`", "", "```text", key.default, "```"]
    return "\n".join(lines) + "\n"


def _entry_table(keys: tuple[Key, ...]) -> list[str]:
    """The reference's table of a table's own keys (`[[mcp]]`, `[matrix]`), required ones so
    marked."""
    lines = ["| key | default | values | what it does |", "|---|---|---|---|"]
    for key in keys:
        shown = "(required)" if key.default is None else f"`{toml_value(key.default)}`"
        cells = [f"`{key.name}`", shown, key.check.allowed, key.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines
