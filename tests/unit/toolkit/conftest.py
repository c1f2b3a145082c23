"""Run the toolkit the way brokerd does: a fresh `python -I -S` with the package bound alone as
`toolkit` (copied into a folder of its own, so nothing outside the standard library is reachable).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import tls

PACKAGE = Path(__file__).resolve().parents[3] / "services" / "toolkit"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Ran:
    exit: int
    stdout: str
    stderr: str


Input = bytes | str | Mapping[str, object]
Toolkit = Callable[..., Ran]


def bootstrap(folder: Path) -> str:
    """The `-c` program brokerd runs, with the package bound at `folder`/toolkit."""
    return (
        f"import sys; sys.path.insert(0, {str(folder)!r}); "
        "from toolkit.__main__ import main; main()"
    )


@pytest.fixture(scope="session")
def bound_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only a copy of the package, named `toolkit`, like /opt/bx."""
    folder = tmp_path_factory.mktemp("bx")
    shutil.copytree(PACKAGE, folder / "toolkit", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@pytest.fixture(scope="session")
def toolkit_command(bound_package: Path) -> list[str]:
    """The command brokerd runs, without the tool name."""
    return [sys.executable, "-I", "-S", "-c", bootstrap(bound_package)]


def encode_input(stdin: Input) -> bytes:
    if isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, str):
        return stdin.encode()
    return json.dumps(stdin, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.fixture
def toolkit(toolkit_command: list[str], tmp_path: Path) -> Toolkit:
    """`toolkit(argv, stdin, env=...)`: one real run; argv is the tool name or a list of
    arguments (str or bytes). The environment is only `env`, as in a sandbox."""

    def run(
        argv: str | Sequence[str | bytes],
        stdin: Input = b"",
        env: Mapping[str, str] | None = None,
        timeout: float = 20,
    ) -> Ran:
        args = [argv] if isinstance(argv, str) else list(argv)
        done = subprocess.run(
            [*toolkit_command, *args],
            input=encode_input(stdin),
            capture_output=True,
            env=dict(env or {}),
            cwd=tmp_path,
            timeout=timeout,
        )
        return Ran(
            done.returncode,
            done.stdout.decode("utf-8", "surrogateescape"),
            done.stderr.decode("utf-8", "surrogateescape"),
        )

    return run


@pytest.fixture(scope="session")
def authority(tmp_path_factory: pytest.TempPathFactory) -> tls.Authority:
    return tls.make_authority(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def https(authority: tls.Authority) -> Iterator[tls.HttpsServer]:
    with tls.HttpsServer(authority) as server:
        yield server


@pytest.fixture
def proxy(https: tls.HttpsServer) -> Iterator[tls.ConnectProxy]:
    with tls.ConnectProxy(https.address) as connect_proxy:
        yield connect_proxy
