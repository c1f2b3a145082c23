"""`@frozen` makes what `@dataclass(frozen=True, slots=True)` makes: the same construction,
equality, hashing, `repr`, refusal to change, fields, signature and `replace`, side by side."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, ClassVar

import pytest

from bxcore.frozen import frozen


@frozen
class Made:
    TYPE: ClassVar[str] = "made"
    id: str
    count: int
    note: str | None = None
    parts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Stock:
    TYPE: ClassVar[str] = "made"
    id: str
    count: int
    note: str | None = None
    parts: tuple[str, ...] = ()


@frozen
class One:
    """A class with one field and a docstring of its own."""

    id: str


@dataclass(frozen=True, slots=True)
class StockOne:
    id: str


@frozen
class Empty:
    KIND: ClassVar[str] = "empty"


@dataclass(frozen=True, slots=True)
class StockEmpty:
    KIND: ClassVar[str] = "empty"


@frozen
class Secret:
    key: bytes

    def __repr__(self) -> str:
        return "Secret(…)"


ARGUMENTS: list[tuple[Any, ...]] = [("a", 1), ("a", 1, "n"), ("a", 1, None, ("x", "y"))]


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_construction_equality_hash_and_repr_are_the_stock_dataclasses(
    arguments: tuple[Any, ...],
) -> None:
    made, stock = Made(*arguments), Stock(*arguments)
    assert [getattr(made, f) for f in Made.__match_args__] == list(dataclasses.astuple(stock))
    assert made == Made(*arguments) and made != Made("b", 1)
    assert made != stock  # type: ignore[comparison-overlap]  # another class: never equal
    assert hash(made) == hash(stock)
    assert repr(made) == repr(stock).replace("Stock(", "Made(")
    assert Made(id="a", count=1) == Made("a", 1)


def test_a_single_field_compares_and_hashes_as_a_one_tuple() -> None:
    assert hash(One("a")) == hash(StockOne("a")) == hash(("a",))
    assert One("a") == One("a") and One("a") != One("b")
    assert repr(One("a")) == "One(id='a')"
    assert One.__doc__ == "A class with one field and a docstring of its own."


def test_a_class_with_no_field_is_equal_to_its_kind() -> None:
    assert Empty() == Empty() and hash(Empty()) == hash(StockEmpty()) == hash(())
    assert repr(Empty()) == "Empty()" and Empty.__match_args__ == ()


def test_a_class_keeps_its_own_repr() -> None:
    assert repr(Secret(b"k")) == "Secret(…)"


def test_nothing_can_be_changed() -> None:
    made = Made("a", 1)
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'id'"):
        made.id = "b"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError, match="cannot delete field 'count'"):
        del made.count
    with pytest.raises(FrozenInstanceError):
        made.other = 1  # type: ignore[attr-defined]
    assert not hasattr(made, "__dict__")


def test_fields_signature_hints_and_replace_are_the_stock_dataclasses() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(Made)] == [
        (f.name, f.default) for f in dataclasses.fields(Stock)
    ]
    assert Made.__match_args__ == Stock.__match_args__
    assert vars(Made)["__slots__"] == vars(Stock)["__slots__"]
    assert str(inspect.signature(Made)) == str(inspect.signature(Stock))
    assert typing.get_type_hints(Made.__init__) == typing.get_type_hints(Stock.__init__)
    assert Made.__doc__ == "Made(id, count, note, parts)"
    assert dataclasses.replace(Made("a", 1), note="n") == Made("a", 1, "n")
    with pytest.raises(TypeError):
        Made("a")  # type: ignore[call-arg]
    assert dataclasses.is_dataclass(Made)
