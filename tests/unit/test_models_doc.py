"""docs/models.md checked against the recorded answers (tests/fixtures/models/, issue 14).

The convention: the section (`## …`) of each server family names the family's folder,
`tests/fixtures/models/FAMILY/`, and names, as `FAMILY/FILE`, every recorded quirk of that
family: every fixture that is not one of the four plain answers (whole or streamed, with or
without a tool call). A new family or a new quirk fixture fails here until the doc says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
FIXTURES = ROOT / "tests" / "fixtures" / "models"
FILES = [case["file"] for case in json.loads((FIXTURES / "cases.json").read_text("utf-8"))]
FAMILIES = sorted({f.split("/")[0] for f in FILES})
PLAIN = {"whole-tool.json", "whole-text.json", "stream-tool.sse", "stream-text.sse"}
QUIRKS = sorted(f for f in FILES if f.split("/")[1] not in PLAIN)


def sections() -> dict[str, str]:
    """Each `## ` section of the doc by its heading, with its text up to the next one."""
    found: dict[str, str] = {}
    heading = ""
    for line in DOC.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = ""
        elif heading:
            found[heading] += line + "\n"
    return found


def section_of(family: str) -> str:
    folder = f"`tests/fixtures/models/{family}/`"
    naming = [text for text in sections().values() if folder in text]
    assert len(naming) == 1, f"{len(naming)} sections of docs/models.md name {folder}, not one"
    return naming[0]


def test_the_quirks_are_the_ones_issue_14_lists() -> None:
    assert QUIRKS == [
        "anthropic/stream-tool-cut-by-max-tokens.sse",
        "anthropic/stream-tool-no-arguments.sse",
        "dashscope/stream-tool-empty-ids.sse",
        "gemini/stream-indexless-continuation.sse",
        "llamacpp/whole-call-as-text.json",
        "ollama/stream-parallel-index-0.sse",
        "openai/stream-tool-cut-by-length.sse",
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_recorded_family_has_its_section(family: str) -> None:
    assert "base_url = " in section_of(family), family


@pytest.mark.parametrize("fixture", QUIRKS)
def test_every_recorded_quirk_is_told_in_its_family_section(fixture: str) -> None:
    assert f"`{fixture}`" in section_of(fixture.split("/")[0])


def test_every_family_in_the_table_of_servers_is_a_section_heading() -> None:
    names = [row.split("|")[1].strip() for row in DOC.splitlines() if row.startswith("| ")]
    headings = " ".join(sections())
    for name in names[1:]:  # the header row is not a server
        assert name.split(" (")[0] in headings, name
