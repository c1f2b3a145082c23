"""Fixtures every test may use: the anyio backend and a short, private temporary folder; and
Hypothesis without its per-example deadline: a property test checks what holds, never how
fast (that is `bench/`'s), and a busy 2-core machine can take 200 ms for any example."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("boxmaker", deadline=None)
settings.load_profile("boxmaker")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path (ipc socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
