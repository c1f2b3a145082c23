"""The model port (SPEC §10.2): the conversation loopd sends, the reply it gets, and the
`Model` protocol every provider meets. Types only: no I/O, and no import of another loopd
module, so every provider can import it. A model only answers: nothing of its reply is run.

The providers live in `openai`, `anthropic` and `scripted`; `providers.make_model` picks one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bxcore.tools import ToolSpec


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool of an MCP server as brokerd offers it (§18.4): `mcp__<server>__<tool>`, with the
    description and inputSchema the owner pinned, given to the model as they are."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


Offer = ToolSpec | McpTool  # a built-in tool (its schema generated) or an MCP one


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
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        """The model's next answer to `messages` (oldest first); raises only `ModelError`."""
        ...

    async def aclose(self) -> None:
        """Let go of the connections; the model is not used again."""
        ...
