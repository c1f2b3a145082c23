"""The fake model server, a sleep that only records, and models pointed at the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from bxcore.config.file import ModelConfig
from services.loopd.model import Model
from services.loopd.providers import make_model
from tests.fakes.model_server import FakeModel

Connect = Callable[..., Model]


class Sleeps(list[float]):
    """Stands in for `anyio.sleep`: remembers each wait and returns at once."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def fake() -> Iterator[FakeModel]:
    with FakeModel() as model:
        yield model


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def connect(fake: FakeModel, sleeps: Sleeps) -> AsyncIterator[Connect]:
    """`connect(provider="openai", environ={}, **[model] keys)`: a model at the fake server that
    retries without waiting; closed after the test."""
    made: list[Model] = []

    def connect(
        provider: str = "openai", environ: dict[str, str] | None = None, **keys: Any
    ) -> Model:
        keys.setdefault("base_url", fake.base_url)
        config = replace(ModelConfig(), provider=provider, **keys)
        model = make_model(config, environ or {}, sleep=sleeps)
        made.append(model)
        return model

    yield connect
    for model in made:
        await model.aclose()
