"""The one bounded cache: the oldest entries go past a count or a weight budget, and with
`recency` a read keeps an entry (least recently used dropped first)."""

from __future__ import annotations

import pytest

from bxcore.bounded import Bounded


def test_past_its_limit_the_oldest_put_goes() -> None:
    kept: Bounded[str, int] = Bounded(2)
    for n, key in enumerate("abc"):
        kept.put(key, n)
    assert ("a" in kept, kept.get("b"), kept.get("c"), len(kept)) == (False, 1, 2, 2)


def test_put_again_makes_an_entry_the_newest() -> None:
    kept: Bounded[str, int] = Bounded(2)
    kept.put("a", 1)
    kept.put("b", 2)
    kept.put("a", 3)
    kept.put("c", 4)
    assert list(kept.values()) == [3, 4]


@pytest.mark.parametrize(("recency", "left"), [(False, ["b", "c"]), (True, ["a", "c"])])
def test_a_read_keeps_an_entry_only_with_recency(recency: bool, left: list[str]) -> None:
    kept: Bounded[str, str] = Bounded(2, recency=recency)
    kept.put("a", "a")
    kept.put("b", "b")
    assert kept["a"] == "a"
    kept.put("c", "c")
    assert list(kept.values()) == left


def test_a_value_of_none_is_kept_and_told_apart_by_in() -> None:
    kept: Bounded[str, None] = Bounded(4)
    kept.put("x", None)
    assert "x" in kept and "y" not in kept
    with pytest.raises(KeyError):
        kept["y"]


def test_past_its_budget_the_oldest_go_even_the_new_one_alone_too_heavy() -> None:
    kept: Bounded[str, str] = Bounded(100, weigh=len, budget=10)
    kept.put("a", "x" * 4)
    kept.put("b", "x" * 4)
    kept.put("c", "x" * 4)
    assert (list(kept.values()), kept.weight) == (["x" * 4, "x" * 4], 8)
    kept.put("d", "x" * 11)
    assert (len(kept), kept.weight) == (0, 0)


def test_pop_and_replace_keep_the_weight_right() -> None:
    kept: Bounded[str, str] = Bounded(100, weigh=len, budget=100)
    kept.put("a", "xxx")
    kept.put("a", "x")
    kept.put("b", "xx")
    assert kept.pop("a") == "x"
    assert kept.pop("a") is None
    assert kept.weight == 2


def test_a_budget_needs_a_weight() -> None:
    with pytest.raises(ValueError, match="budget"):
        Bounded[str, str](1, budget=10)
