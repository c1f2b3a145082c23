"""The model port (SPEC §10.2): the conversation loopd sends, the reply it gets, and the
`Model` protocol every provider meets. Types only: no I/O, and no import of another loopd
module, so every provider can import it. A model only answers: nothing of its reply is run.

The providers live in `openai`, `anthropic` and `scripted`; `providers.make_model` picks one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


class Finish(enum.Enum):
    """Why the model stopped, whatever words its server uses for it."""

    DONE = "done"  # it said what it had to: stop, tool_calls, end_turn, tool_use, stop_sequence
    LENGTH = "length"  # the token limit cut it off: length, max_tokens
    OTHER = "other"  # any other reason the server gave (content_filter, refusal, pause_turn)
    UNSAID = "unsaid"  # a whole answer that gave no reason (some local servers)


#: The servers' own words for each `Finish` (anything else is `OTHER`).
FINISH_WORDS: Mapping[str, Finish] = {
    "stop": Finish.DONE,
    "tool_calls": Finish.DONE,
    "function_call": Finish.DONE,
    "end_turn": Finish.DONE,
    "tool_use": Finish.DONE,
    "stop_sequence": Finish.DONE,
    "eos": Finish.DONE,  # some local servers
    "length": Finish.LENGTH,
    "max_tokens": Finish.LENGTH,
}


def finish_of(reason: object) -> Finish:
    """The `Finish` of a server's `finish_reason` / `stop_reason` (None or "": unsaid)."""
    if reason is None or reason == "":
        return Finish.UNSAID
    return FINISH_WORDS.get(reason, Finish.OTHER) if isinstance(reason, str) else Finish.OTHER


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one answer cost, as its server counted them: `input` read (the prompt, its
    cached part included) and `output` written."""

    input: int = 0
    output: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output)


def count_of(fields: object, *names: str) -> int | None:
    """The sum of the counts `fields` (a server's `usage` object) gives under `names`; None when
    it gives none. Lenient: a count that is not a whole number of 0 or more is not one, and a
    `usage` that is not an object gives none (a turn never fails for its figures)."""
    if not isinstance(fields, dict):
        return None
    counts = [fields.get(name) for name in names]
    found = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    return sum(found) if found else None


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's answer. `finish` says why it stopped and `finish_reason` is the server's
    own word for it ("" when it gave none; not compared: two replies that mean the same are
    equal); a reply cut off by the token limit (`cut_off`) may hold a tool call whose
    arguments end half way. `usage`: what it cost, None when the server did not say (not
    compared either)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish: Finish = Finish.DONE
    finish_reason: str = field(default="", compare=False)
    usage: Usage | None = field(default=None, compare=False)

    @property
    def cut_off(self) -> bool:
        return self.finish is Finish.LENGTH


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
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        *,
        max_tokens: int | None = None,
    ) -> Reply:
        """The model's next answer to `messages` (oldest first); raises only `ModelError`.
        `max_tokens`: a limit for this answer instead of the configured one."""
        ...

    async def aclose(self) -> None:
        """Let go of the connections; the model is not used again."""
        ...
