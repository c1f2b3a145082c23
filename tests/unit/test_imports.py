"""Who may import whom (issue 11), read from every module's imports, not from running them:
brokerd's core imports only the core, `bxcore` and the standard library, and loopd's core
(the turn machine, issue 25) only itself, `bxcore` and the standard library; no service imports
another; `bxcore` imports no service; the toolkit, which runs alone in every sandbox, imports
only the standard library and itself (tests/unit/toolkit/test_startup.py); bxctl reaches a
service only through its face (`services.brokerd.face`, `services.loopd.face`) and brokerd's
pure core (issue 25); neither core imports the home's files (`bxcore.home`), which do I/O."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = sys.stdlib_module_names
#: Libraries the core may use because they are pure computation: JSON Schema validation of MCP
#: arguments (SPEC §18.5), with every remote `$ref` refused, so they never do I/O (issue 13).
PURE_LIBRARIES = frozenset({"jsonschema", "referencing"})


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def imported(source: Path) -> Iterator[str]:
    """Every module `source` imports, by its full name (relative imports resolved)."""
    package = ".".join(source.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            else:
                assert node.module is not None
                yield node.module


def top(name: str) -> str:
    return name.split(".")[0]


def service_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 1 else None


def beyond_core(source: Path, core: str, libraries: frozenset[str] = frozenset()) -> list[str]:
    """What `source` imports beyond the standard library, `bxcore`, `libraries` and the
    package `core`."""
    return [
        name
        for name in imported(source)
        if not (
            top(name) in STDLIB
            or top(name) in libraries
            or top(name) == "bxcore"
            or name == core
            or name.startswith(f"{core}.")
            or name == "__future__"
        )
    ]


@pytest.mark.parametrize("source", modules("services/brokerd/core"), ids=lambda p: p.name)
def test_the_core_imports_only_the_core_bxcore_and_the_standard_library(source: Path) -> None:
    beyond = beyond_core(source, "services.brokerd.core", PURE_LIBRARIES)
    assert not beyond, f"{source.relative_to(ROOT)} imports {beyond}"


@pytest.mark.parametrize("source", modules("services/loopd/core"), ids=lambda p: p.name)
def test_loopd_s_core_imports_only_itself_bxcore_and_the_standard_library(source: Path) -> None:
    beyond = beyond_core(source, "services.loopd.core")
    assert not beyond, f"{source.relative_to(ROOT)} imports {beyond}"


def test_loopd_s_core_is_there_to_be_checked() -> None:
    assert {p.name for p in modules("services/loopd/core")} >= {"turn.py", "turn_events.py"}


@pytest.mark.parametrize("source", modules("services"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_service_imports_another(source: Path) -> None:
    own = service_of(".".join(source.relative_to(ROOT).with_suffix("").parts))
    for name in imported(source):
        other = service_of(name)
        assert other is None or other == own, f"{source.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize(
    "source",
    [*modules("services/brokerd/core"), *modules("services/loopd/core")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_pure_cores_import_none_of_the_home_s_files(source: Path) -> None:
    """`bxcore.home` reads and writes the home folder (issue 25): a pure core is given what it
    decides on, never a path to read it from."""
    for name in imported(source):
        assert not (name == "bxcore.home" or name.startswith("bxcore.home.")), (
            f"{source.relative_to(ROOT)} imports {name}: a pure core does no I/O"
        )


@pytest.mark.parametrize("source", modules("bxcore"), ids=lambda p: str(p.relative_to(ROOT)))
def test_bxcore_imports_no_service_and_no_bxctl(source: Path) -> None:
    for name in imported(source):
        assert top(name) not in ("services", "bxctl"), f"{source.relative_to(ROOT)} imports {name}"


#: brokerd's programs an MCP server's start runs alone, as the toolkit runs: with `python -I -S`
#: and nothing of the box's but themselves (issue 25), every module of the folder.
INSIDE = modules("services/brokerd/mcp/inside")


def test_the_programs_run_alone_are_there_to_be_checked() -> None:
    assert {p.name for p in INSIDE} >= {"bridge.py", "launch.py"}


@pytest.mark.parametrize("source", INSIDE, ids=lambda p: p.name)
def test_the_programs_run_alone_import_only_the_standard_library(source: Path) -> None:
    for imported_name in imported(source):
        assert top(imported_name) in STDLIB or imported_name == "__future__", (
            f"mcp/inside/{source.name} imports {imported_name}: it runs alone"
        )


#: What bxctl may import of the services: what it may do while they are not running.
FACES = frozenset({"services.brokerd.face", "services.loopd.face"})


@pytest.mark.parametrize("source", modules("bxctl"), ids=lambda p: p.name)
def test_bxctl_reaches_a_service_only_through_its_face_and_brokerd_s_core(source: Path) -> None:
    for name in imported(source):
        if top(name) != "services":
            continue
        allowed = (
            name in FACES
            or name == "services.brokerd.core"
            or name.startswith("services.brokerd.core.")
        )
        assert allowed, f"bxctl/{source.name} imports {name}: add it to the service's face"


@pytest.mark.parametrize(
    "source",
    [*modules("bxcore"), *modules("bxctl"), *modules("services")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_bxcore_aio_uses_asyncio_itself(source: Path) -> None:
    """The seams where the box depends on anyio's asyncio backend are in one module."""
    if source == ROOT / "bxcore" / "aio.py":
        return
    for name in imported(source):
        assert top(name) != "asyncio", f"{source.relative_to(ROOT)} imports {name}: use bxcore.aio"
