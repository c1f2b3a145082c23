"""The one bounded cache of the box: a mapping that keeps its newest entries and drops the
oldest past a number of entries, or past a budget of bytes when given how to weigh a value.

"Oldest" is the least recently put, or with `recency` the least recently put or read (an LRU).
Used for kept answers (`bxcore.once`), gatewayd's settled approvals and windows, and meant for
brokerd's kept call answers and label cache. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """At most `limit` entries, and when `weigh` is given at most `budget` of its weights."""

    def __init__(
        self,
        limit: int,
        *,
        weigh: Callable[[V], int] | None = None,
        budget: int | None = None,
        recency: bool = False,
    ) -> None:
        if (weigh is None) != (budget is None):
            raise ValueError("a budget needs a weight, and a weight a budget")
        self.limit = limit
        self.budget = budget
        self.weight = 0
        self._weigh = weigh
        self._recency = recency
        self._entries: OrderedDict[K, V] = OrderedDict()  # the oldest first

    def __repr__(self) -> str:
        budget = f", weighing {self.weight} of {self.budget}" if self.budget is not None else ""
        return f"Bounded({len(self._entries)} of {self.limit}{budget})"

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def __getitem__(self, key: K) -> V:
        """The value of `key` (KeyError when not kept); with `recency`, now the newest."""
        value = self._entries[key]
        if self._recency:
            self._entries.move_to_end(key)
        return value

    def get(self, key: K) -> V | None:
        """The value of `key`, or None when it is not kept."""
        return self[key] if key in self._entries else None

    def put(self, key: K, value: V) -> None:
        """Keep `value` as the newest entry, then drop the oldest while over a bound (the new
        one too, when it alone weighs more than the budget)."""
        self.pop(key)
        self._entries[key] = value
        self.weight += self._weight(value)
        while len(self._entries) > self.limit or (
            self.budget is not None and self.weight > self.budget
        ):
            _, dropped = self._entries.popitem(last=False)
            self.weight -= self._weight(dropped)

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or None when it was not kept."""
        if key not in self._entries:
            return None
        value = self._entries.pop(key)
        self.weight -= self._weight(value)
        return value

    def values(self) -> Iterator[V]:
        """The values, the oldest first."""
        return iter(self._entries.values())

    def items(self) -> Iterator[tuple[K, V]]:
        """The entries, the oldest first (reading them makes none newer)."""
        return iter(self._entries.items())

    def _weight(self, value: V) -> int:
        return 0 if self._weigh is None else self._weigh(value)
