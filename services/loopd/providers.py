"""The provider `[model] provider` names (SPEC §10.2): `make_model`, the one place that knows
every provider. Apart from `model`, which the providers import, so that no import goes round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio

from bxcore.config.file import ModelConfig
from services.loopd.anthropic import AnthropicModel
from services.loopd.http_client import BACKOFF_S, Sleep
from services.loopd.model import Model, ModelError
from services.loopd.openai import OpenAIModel
from services.loopd.scripted import ScriptedModel


def make_model(
    config: ModelConfig,
    environ: Mapping[str, str],
    *,
    sleep: Sleep = anyio.sleep,
    backoff: Sequence[float] = BACKOFF_S,
) -> Model:
    """The model `config` describes. Never fails for what a turn can report instead (a missing
    key, a broken script): those are the `ModelError` of every `complete`. `sleep` and
    `backoff` are the seams a test replaces to retry at once."""
    if config.provider == "openai":
        return OpenAIModel(config, environ, sleep=sleep, backoff=backoff)
    if config.provider == "anthropic":
        return AnthropicModel(config, environ, sleep=sleep, backoff=backoff)
    if config.provider == "scripted":
        return ScriptedModel.load(config.script)
    raise ModelError(
        f'[model] provider = "{config.provider}" is not known; '
        'use "openai", "anthropic" or "scripted" in config.toml'
    )
