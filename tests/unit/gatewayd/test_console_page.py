"""The console page's files (SPEC §12.2), read as text: agent and tool text is only ever
inserted as text, nothing is loaded from another origin, the page is small, and the denial
sentences it shows are bxcore's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bxcore.deny import DenyReason, denial_clause
from bxcore.owner_text import ORIGINS_SAID
from bxcore.shown_arguments import MOST_DEPTH, MOST_NAMED, RUN
from bxcore.visible import MARKS, NAMES
from services.gatewayd.console.app import STATIC

FILES = sorted(p for p in STATIC.rglob("*") if p.is_file())
SCRIPTS = [p for p in FILES if p.suffix == ".js"]


def _id(path: Path) -> str:
    return str(path.relative_to(STATIC))


def test_the_page_has_its_files() -> None:
    names = {_id(p) for p in FILES}
    assert {"index.html", "console.css", "js/main.js"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=_id)
def test_no_script_parses_text_as_html(script: Path) -> None:
    source = script.read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "DOMParser", "createContextualFragment"):  # fmt: skip
        assert sink not in source, f"{_id(script)} uses {sink}"


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_nothing_is_loaded_from_another_origin(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), _id(path)
    assert "@import" not in text


def test_the_first_load_is_small() -> None:
    assert sum(p.stat().st_size for p in FILES) <= 150 * 1024


def test_the_denial_sentences_are_bxcores() -> None:
    source = (STATIC / "js" / "chat.js").read_text(encoding="utf-8")
    block = source.split("export const DENIALS = {", 1)[1].split("};", 1)[0]
    table = dict(re.findall(r'^\s+(\w+): "([^"]*)",$', block, re.M))
    assert table == {reason.value: denial_clause(reason) for reason in DenyReason}


def test_the_target_provenance_sentences_are_bxctls() -> None:
    source = (STATIC / "js" / "targets.js").read_text(encoding="utf-8")
    block = source.split("export const ORIGINS_SAID = {", 1)[1].split("};", 1)[0]
    table = dict(re.findall(r'^\s+(\w+): "([^"]*)",$', block, re.M))
    assert table == ORIGINS_SAID


def test_every_control_spec_names_is_on_the_page_or_made_by_its_scripts() -> None:
    page = "\n".join(p.read_text(encoding="utf-8") for p in FILES)
    for name in ("Send", "Stop", "New session", "Approve", "Approve for session", "Deny",
                 "Verify", "Add grant", "Remove", "Explain", "Restart", "Message", "Chat",
                 "Approvals", "Ledger", "Grants", "Memory", "Services", "Jobs", "Run now",
                 "Enable", "Disable"):  # fmt: skip
        assert re.search(rf"[>\"]{re.escape(name)}[<\"]", page), name


def test_the_pages_twin_of_the_rule_names_what_bxcore_visible_names() -> None:
    source = (STATIC / "js" / "visible.js").read_text(encoding="utf-8")
    block = source.split("export const NAMES = {", 1)[1].split("};", 1)[0]
    table = {int(code, 16): name for code, name in re.findall(r'^\s+0x([0-9a-f]+): "([^"]*)",$',
                                                              block, re.M)}  # fmt: skip
    assert table == NAMES
    assert f"export const MARKS = {MARKS};" in source


def test_the_pages_card_cuts_and_marks_as_bxcore_shown_arguments_does() -> None:
    source = (STATIC / "js" / "shown.js").read_text(encoding="utf-8")
    assert f"export const RUN = {RUN};" in source
    assert f"const MOST_DEPTH = {MOST_DEPTH};" in source
    assert f"const MOST_NAMED = {MOST_NAMED};" in source


# Where text becomes DOM text: only dom.js may do it (through the rule); elsewhere only the
# page's own words may be set as text (main.js's pending count and link state).
TEXT_SINKS = re.compile(
    r"\.(?:textContent|innerText|outerText|nodeValue|data)\s*=(?!=)\s*(.*)"
    r"|createTextNode\(|\.(?:append|prepend|before|after|replaceWith|replaceChildren)\(\s*[`'\"]"
)
OWN_WORDS = re.compile(r'^(?:"[^"]*"|String\(count\));$')


@pytest.mark.parametrize("script", [p for p in SCRIPTS if p.name != "dom.js"], ids=_id)
def test_no_script_but_dom_js_turns_text_into_dom_text(script: Path) -> None:
    for number, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1):
        for found in TEXT_SINKS.finditer(line):
            assigned = found.group(1)
            assert assigned is not None and OWN_WORDS.match(assigned.strip()), (
                f"{_id(script)}:{number}: {line.strip()} (use dom.js's append or say)"
            )
