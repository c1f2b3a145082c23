"""loopd's modules import one another without a cycle, imports inside functions included (a
cycle is not dodged by importing late), and the model port imports no other loopd module."""

from __future__ import annotations

import graphlib

from tests.unit.test_imports import ROOT, imported, modules

LOOPD = "services.loopd."


def loopd_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for source in modules("services/loopd"):
        name = ".".join(source.relative_to(ROOT).with_suffix("").parts)
        graph[name] = {n for n in imported(source) if n.startswith(LOOPD)}
    return graph


def test_loopd_s_modules_import_one_another_without_a_cycle() -> None:
    graphlib.TopologicalSorter(loopd_imports()).prepare()  # CycleError names the cycle


def test_the_model_port_imports_no_other_loopd_module() -> None:
    assert loopd_imports()[f"{LOOPD}model"] == set()
