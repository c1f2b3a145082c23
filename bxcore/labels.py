"""Information-flow labels (SPEC §3.2): a data class and an untrusted flag, and their join.

Pure: no I/O. A label only ever rises; `join` is the one way to combine two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DataClass(enum.StrEnum):
    """How sensitive data is: public < private < secret."""

    PUBLIC = "public"
    PRIVATE = "private"
    SECRET = "secret"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_most(self, other: DataClass) -> bool:
        """True when data of this class may flow to a place of class `other`."""
        return self.rank <= other.rank


_RANK = {DataClass.PUBLIC: 0, DataClass.PRIVATE: 1, DataClass.SECRET: 2}


@dataclass(frozen=True, slots=True)
class Label:
    """What a session holds, or what a result carries."""

    class_: DataClass
    untrusted: bool

    def join(self, other: Label) -> Label:
        """The higher class and either untrusted flag."""
        higher = self.class_ if self.class_.rank >= other.class_.rank else other.class_
        return Label(higher, self.untrusted or other.untrusted)

    def at_most(self, other: Label) -> bool:
        """True when `other` is at least this label: its class as high, and untrusted if
        this one is."""
        return self.class_.at_most(other.class_) and (other.untrusted or not self.untrusted)

    def __repr__(self) -> str:
        return f"Label({self.class_.value}{', untrusted' if self.untrusted else ''})"


#: A session with no state file: the owner's conversation is private and trusted (§6.2).
SESSION_DEFAULT = Label(DataClass.PRIVATE, False)
#: What a result that reads nothing carries (§5.5).
CLEAN = Label(DataClass.PUBLIC, False)
