"""Answering a request once (SPEC §3.1: servers are idempotent per id). A repeat of a request
that is being answered waits for that answer; a repeat of one answered gets the answer kept
for it (in a `Bounded`); what the request asked is never done twice while its answer is kept.
A request is named by a key its socket chooses: an id and a session, the whole encoded
request, a session and a call.

`answer(key, make)` is all a socket's handler needs. An answer that is begun and finished by
different pieces (brokerd's calls, finished by the approval desk) uses `begin`, `making`,
`kept` and `finish` directly. Pure apart from waiting: no I/O, no clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar, cast

import anyio

from bxcore.bounded import Bounded

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")


class Abandoned(Exception):
    """The answer being made was given up: its maker failed or was cancelled."""


class Making(Generic[A]):
    """An answer being made; every asker waits for the one answer. The event is made only when
    a repeat comes to wait: most requests are asked once."""

    __slots__ = ("_answer", "_event", "_over")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self._answer: A | None = None
        self._over: bool | None = None  # True: given; False: abandoned

    def __repr__(self) -> str:
        state = {None: "being made", True: "given", False: "abandoned"}[self._over]
        return f"Making({state})"

    def give(self, answer: A) -> None:
        self._answer, self._over = answer, True
        if self._event is not None:
            self._event.set()

    def abandon(self) -> None:
        self._over = False
        if self._event is not None:
            self._event.set()

    async def wait(self) -> A:
        """The answer once given; `Abandoned` when it never will be."""
        if self._over is None:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        if not self._over:
            raise Abandoned
        return cast(A, self._answer)  # given: an A, even when A admits None


class Once(Generic[K, A]):
    """The answers being made, and those kept. `keep` says which answers a repeat may get
    again; one it refuses (gatewayd's `unavailable`) leaves the repeat to ask afresh."""

    def __init__(self, kept: Bounded[K, A], *, keep: Callable[[A], bool] = lambda _: True) -> None:
        self._kept = kept
        self._keep = keep
        self._making: dict[K, Making[A]] = {}

    def __repr__(self) -> str:
        return f"Once({len(self._making)} being answered, kept {self._kept!r})"

    async def answer(self, key: K, make: Callable[[], Awaitable[A]]) -> A:
        """The kept answer of `key`, else the one being made, else `make()`'s (kept)."""
        while (making := self._making.get(key)) is not None:
            with contextlib.suppress(Abandoned):
                await making.wait()
        if key in self._kept:
            return self._kept[key]
        self.begin(key)
        try:
            answer = await make()
        except BaseException:
            self.abandon(key)
            raise
        self.finish(key, answer)
        return answer

    def making(self, key: K) -> Making[A] | None:
        """The answer of `key` being made, if it is."""
        return self._making.get(key)

    def kept(self, key: K) -> A | None:
        return self._kept.get(key)

    def begin(self, key: K) -> Making[A]:
        """`key`'s answer is being made from now: repeats wait for it."""
        making = self._making[key] = Making()
        return making

    def finish(self, key: K, answer: A) -> None:
        """`key`'s answer is made: kept (when `keep` says so), and given to who waits."""
        making = self._making.pop(key, None)
        if self._keep(answer):
            self._kept.put(key, answer)
        if making is not None:
            making.give(answer)

    def abandon(self, key: K) -> None:
        """`key`'s answer will not be made: who waits asks afresh."""
        making = self._making.pop(key, None)
        if making is not None:
            making.abandon()
