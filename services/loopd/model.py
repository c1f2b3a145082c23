"""The model port (SPEC §10.2): the conversation loopd sends, the reply it gets, and `make_model`.

A model only answers: nothing of its reply is run here. Every failure, whatever the provider,
is one `ModelError` line the owner reads, naming what to configure. The providers live in
`openai`, `anthropic` and `scripted`; this module is the interface they share.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from bxcore.config import ModelConfig
from bxcore.ids import MAX_CALL_ID, byte_length_between
from bxcore.tools import ToolSpec

#: How long to wait before the second and the third try (SPEC §10.2: three tries in all).
BACKOFF_S: tuple[float, ...] = (0.5, 1.0)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a reply.

    `id` is 1 to 128 bytes of UTF-8 and unique in the conversation it answers (one is made up,
    `call_<n>`, when the model gave none, a bad one, or one already used). `name` and
    `arguments` are the model's own text, unchecked: the broker judges them.
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class User:
    text: str


@dataclass(frozen=True, slots=True)
class Assistant:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str  # the model's own tool-call id, as in the Assistant message before
    name: str
    content: str


Message = User | Assistant | ToolResult


class ModelError(Exception):
    """The model gave no usable reply. `str()` is one line: what failed, what to configure."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class Model(Protocol):
    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Reply:
        """The model's next answer to `messages` (oldest first); raises only `ModelError`."""
        ...

    async def aclose(self) -> None:
        """Let go of the connections; the model is not used again."""
        ...


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
    # Imported here: the providers import this module's types.
    from services.loopd.anthropic import AnthropicModel
    from services.loopd.openai import OpenAIModel
    from services.loopd.scripted import ScriptedModel

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


# -- what every provider does with an answer ------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(text: str) -> str:
    """`text` with each lone surrogate (which JSON may carry, UTF-8 may not) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def ids_in(messages: Iterable[Message]) -> set[str]:
    """Every tool-call id the conversation already uses."""
    taken: set[str] = set()
    for message in messages:
        if isinstance(message, Assistant):
            taken.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolResult):
            taken.add(message.call_id)
    return taken


def tool_calls(
    calls: Iterable[tuple[object, str, str]], messages: Sequence[Message]
) -> tuple[ToolCall, ...]:
    """Calls of (the model's id or None, name, arguments) with ids that can be sent and are
    new in the conversation: brokerd answers a (session, call id) once (I8), so a reused id
    would get an earlier call's answer. A missing, bad or reused id becomes `call_<n>`, the
    smallest n not yet taken."""
    taken = ids_in(messages)
    given: list[tuple[str | None, str, str]] = []
    for raw_id, name, arguments in calls:
        good = isinstance(raw_id, str) and byte_length_between(clean(raw_id), 1, MAX_CALL_ID)
        id_ = clean(raw_id) if good and isinstance(raw_id, str) else None
        if id_ is not None and id_ in taken:
            id_ = None
        if id_ is not None:
            taken.add(id_)
        given.append((id_, clean(name), clean(arguments)))
    made: list[ToolCall] = []
    n = 0
    for id_, name, arguments in given:
        if id_ is None:
            n += 1
            while f"call_{n}" in taken:
                n += 1
            id_ = f"call_{n}"
            taken.add(id_)
        made.append(ToolCall(id_, name, arguments))
    return tuple(made)
