"""docs/architecture.md's table of moved modules names where each one is now (issue 25): every
module of its "is" column is in the tree, so the map a reader of SPEC follows never leads to
a module that moved again or was never there."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.unit.test_imports import ROOT

DOC = ROOT / "docs" / "architecture.md"


def _now_at() -> list[str]:
    """Each module the table says a name moved to: `a.b.c, d` and `` `a.b.c`, `d` `` both
    name `a.b.c` and `a.b.d`; what stands in brackets after them is a note."""
    text = DOC.read_text()
    table = text[text.index("| was | is |", text.index("### Where modules moved")) :]
    table = table[: table.index("\n\n")]
    found = []
    for row in table.splitlines()[2:]:
        cell = row.split("|")[2].split("(")[0]
        names = [n.strip() for quoted in re.findall(r"`([^`]+)`", cell) for n in quoted.split(",")]
        first = names[0]
        found.append(first)
        found += [f"{first.rpartition('.')[0]}.{name}" for name in names[1:]]
    return found


def test_the_table_is_read() -> None:
    assert "services.brokerd.ledger.head" in _now_at() and len(_now_at()) > 40


@pytest.mark.parametrize("module", _now_at())
def test_every_module_a_name_moved_to_is_in_the_tree(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"architecture.md names {module}"
