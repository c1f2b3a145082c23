"""A socket's dispatch table (SPEC §3.1): each request type the socket takes with its handler,
typed `(ToolRequest) -> Awaitable[ToolResponse]` and so on, and the one answer to every other
message (the socket's "unknown type" or "wrong socket" `error`).

`bxcore.router.Router` serves a table; `ping` never reaches one, the router answers it. A table
is checked when it is made: it takes exactly its socket's union (`bxcore.wire.sockets`), each type
once, and mypy checks that each handler takes its row's type and answers in the socket's
answer union. Pure: no I/O.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_args

from bxcore.wire.messages import Error, ErrorCode

Takes = type[Any] | types.UnionType | tuple[type[Any], ...]
R = TypeVar("R")
A = TypeVar("A", covariant=True)
Answer = TypeVar("Answer")


@dataclass(frozen=True, slots=True)
class Route(Generic[R, A]):
    """One row: a request of type `kind` is answered by `handle`."""

    kind: type[R]
    handle: Callable[[R], Awaitable[A]]


@dataclass(frozen=True)
class Refusal:
    """What a socket answers to a message it does not take: `error` with `code` and `text`,
    where `{type}` stands for the message's type. `elsewhere`: types that belong on another
    socket, answered `wrong_socket` with their own text. A message with no id (an event) is
    dropped, there is nothing to answer to (§3.1), unless `anonymous` is the id to answer it
    with."""

    text: str
    code: ErrorCode = ErrorCode.BAD_MESSAGE
    elsewhere: Mapping[type[Any], str] = field(default_factory=dict)
    anonymous: str | None = None

    def answer(self, message: object) -> Error | None:
        request_id = getattr(message, "id", self.anonymous)
        if request_id is None:
            return None
        kind = type(message)
        if kind in self.elsewhere:
            return Error(request_id, ErrorCode.WRONG_SOCKET, self.elsewhere[kind])
        return Error(request_id, self.code, self.text.replace("{type}", type_of(kind)))


class Routes(Generic[Answer]):
    """One socket's table: `takes` is its union of request types (or a tuple of them; `()` for
    a socket that answers only `ping`); `routes` cover it exactly."""

    def __init__(self, takes: Takes, refusal: Refusal, *routes: Route[Any, Answer]) -> None:
        kinds = [route.kind for route in routes]
        wanted = set(takes) if isinstance(takes, tuple) else set(get_args(takes) or (takes,))
        if len(set(kinds)) != len(kinds) or set(kinds) != wanted:
            rows = ", ".join(type_of(k) for k in kinds)
            union = ", ".join(sorted(type_of(k) for k in wanted))
            raise TypeError(f"a table of [{rows}] does not cover its socket's [{union}] once")
        self.refusal = refusal
        self._table: dict[type[Any], Callable[[Any], Awaitable[Answer]]] = {
            route.kind: route.handle for route in routes
        }

    def __repr__(self) -> str:
        return f"Routes({', '.join(type_of(kind) for kind in self._table)})"

    async def dispatch(self, message: object) -> Answer | Error | None:
        """The answer to `message`: its handler's, else the refusal (None: no answer)."""
        handle = self._table.get(type(message))
        if handle is None:
            return self.refusal.answer(message)
        return await handle(message)


def type_of(kind: type[Any]) -> str:
    """A message type's name on the wire."""
    return str(getattr(kind, "TYPE", kind.__name__))
