"""Which session histories loopd keeps loaded (issue 10): the least recently used, bounded by
their count and by their size, where a held one (a turn is using it) is never let go.

Pure: no I/O, no clock. It only says which values to let go; the caller lets them go.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    size: int
    holds: int = 0


class Cache(Generic[V]):
    """Values by key, each with a size. Held entries stay however full the cache is; the idle
    ones are let go, least recently used first, while there are more than `max_entries` entries
    or more than `max_bytes` in all (held ones count too). A value a caller just added or let
    go of may itself be the one let go: the caller uses it at once or holds it."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._idle: OrderedDict[str, _Entry[V]] = OrderedDict()  # least recently used first
        self._held: dict[str, _Entry[V]] = {}
        self._bytes = 0

    def __repr__(self) -> str:
        return (
            f"Cache({len(self)} of {self.max_entries}, {self._bytes} of {self.max_bytes} bytes, "
            f"{len(self._held)} held)"
        )

    def __len__(self) -> int:
        return len(self._idle) + len(self._held)

    def __contains__(self, key: str) -> bool:
        return key in self._idle or key in self._held

    @property
    def bytes(self) -> int:
        return self._bytes

    def __iter__(self) -> Iterator[str]:
        """The keys: the idle ones from the least recently used, then the held ones."""
        return iter([*self._idle, *self._held])

    def held(self, key: str) -> bool:
        return key in self._held

    def peek(self, key: str) -> V | None:
        """The value, if loaded, without making it recently used."""
        entry = self._idle.get(key) or self._held.get(key)
        return entry.value if entry is not None else None

    def get(self, key: str) -> V | None:
        """The value, if loaded, now the most recently used."""
        entry = self._held.get(key)
        if entry is None and (entry := self._idle.get(key)) is not None:
            self._idle.move_to_end(key)
        return entry.value if entry is not None else None

    def add(self, key: str, value: V, size: int, *, hold: bool = False) -> list[V]:
        """Keep a value not kept yet, held once or idle (the most recently used); what is let
        go to make room for it."""
        if key in self:
            raise KeyError(f"{key!r} is kept already")
        if hold:
            self._held[key] = _Entry(value, size, holds=1)
        else:
            self._idle[key] = _Entry(value, size)
        self._bytes += size
        return self._shrink()

    def hold(self, key: str) -> V:
        """Hold a kept value: it stays until each hold is let go."""
        entry = self._idle.pop(key, None)
        if entry is not None:
            self._held[key] = entry
        else:
            entry = self._held[key]  # KeyError: not kept
        entry.holds += 1
        return entry.value

    def release(self, key: str, size: int) -> list[V]:
        """Let go of one hold, giving the value's size now; what is let go, once it is idle."""
        entry = self._held[key]
        self._bytes += size - entry.size
        entry.size = size
        entry.holds -= 1
        if entry.holds == 0:
            del self._held[key]
            self._idle[key] = entry  # the most recently used
        return self._shrink()

    def _shrink(self) -> list[V]:
        gone: list[V] = []
        while self._idle and (len(self) > self.max_entries or self._bytes > self.max_bytes):
            _, entry = self._idle.popitem(last=False)
            self._bytes -= entry.size
            gone.append(entry.value)
        return gone
