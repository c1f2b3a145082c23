"""The loaded-histories cache (`services.loopd.cache`): the least recently used idle entry goes
first, by count or by bytes; a held entry never goes, however full the cache is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.loopd.cache import Cache


def filled(max_entries: int, max_bytes: int, *sizes: int) -> Cache[str]:
    cache: Cache[str] = Cache(max_entries, max_bytes)
    for n, size in enumerate(sizes):
        assert cache.add(f"k{n}", f"v{n}", size) == []
    return cache


def test_past_its_count_the_least_recently_used_entry_is_let_go() -> None:
    cache = filled(3, 1000, 1, 1, 1)

    assert cache.add("k3", "v3", 1) == ["v0"]
    assert list(cache) == ["k1", "k2", "k3"]


def test_a_get_makes_an_entry_the_most_recently_used_and_a_peek_does_not() -> None:
    cache = filled(3, 1000, 1, 1, 1)
    assert cache.get("k0") == "v0"
    assert cache.peek("k1") == "v1"

    assert cache.add("k3", "v3", 1) == ["v1"]
    assert cache.add("k4", "v4", 1) == ["v2"]
    assert list(cache) == ["k0", "k3", "k4"]


def test_past_its_bytes_as_many_entries_go_as_it_takes_oldest_first() -> None:
    cache = filled(10, 100, 40, 30, 20)

    assert cache.add("big", "big", 60) == ["v0", "v1"]
    assert (list(cache), cache.bytes) == (["k2", "big"], 80)


def test_a_held_entry_stays_however_full_the_cache_is() -> None:
    cache = filled(2, 100, 50, 50)
    assert cache.hold("k0") == "v0"

    assert cache.add("k2", "v2", 90) == ["v1", "v2"]  # only the idle ones can go
    assert (list(cache), cache.bytes) == (["k0"], 50)
    assert cache.held("k0")


def test_an_entry_goes_only_once_each_of_its_holds_is_let_go() -> None:
    cache = filled(1, 100, 10)
    cache.hold("k0")
    cache.hold("k0")
    assert cache.add("k1", "v1", 10, hold=True) == []  # two held: over the count, nothing idle

    assert cache.release("k0", 10) == []
    assert cache.release("k0", 10) == ["v0"]
    assert list(cache) == ["k1"]


def test_a_release_gives_the_size_the_value_has_grown_to() -> None:
    cache = filled(10, 100, 10, 10)
    cache.hold("k1")
    assert cache.bytes == 20

    assert cache.release("k1", 95) == ["v0"]  # grown while held: the oldest idle one goes
    assert (list(cache), cache.bytes) == (["k1"], 95)


def test_a_released_entry_is_the_most_recently_used() -> None:
    cache = filled(2, 100, 1, 1)
    cache.hold("k0")
    cache.release("k0", 1)

    assert cache.add("k2", "v2", 1) == ["v1"]


def test_a_value_added_when_all_else_is_held_may_go_at_once() -> None:
    cache = filled(1, 100, 10)
    cache.hold("k0")

    assert cache.add("k1", "v1", 10) == ["v1"]
    assert "k1" not in cache and "k0" in cache


def test_a_key_is_kept_once() -> None:
    cache = filled(2, 100, 1)
    with pytest.raises(KeyError):
        cache.add("k0", "again", 1)


def test_an_empty_cache_keeps_nothing_idle() -> None:
    cache: Cache[str] = Cache(0, 0)

    assert cache.add("k", "v", 0) == ["v"]
    assert len(cache) == 0 and cache.get("k") is None


Step = tuple[str, int, int]  # (operation, key number, size)


@given(
    st.integers(0, 4),
    st.integers(0, 100),
    st.lists(
        st.tuples(
            st.sampled_from(["add", "get", "hold", "release"]),
            st.integers(0, 6),
            st.integers(0, 60),
        ),
        max_size=60,
    ),
)
def test_whatever_is_done_the_idle_entries_fit_and_nothing_held_is_lost(
    max_entries: int, max_bytes: int, steps: list[Step]
) -> None:
    cache: Cache[str] = Cache(max_entries, max_bytes)
    holds: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for operation, n, size in steps:
        key = f"k{n}"
        gone: list[str] = []
        if operation == "add" and key not in cache:
            gone = cache.add(key, key, size)
            sizes[key] = size
        elif operation == "get":
            assert cache.get(key) == (key if key in cache else None)
        elif operation == "hold" and key in cache:
            cache.hold(key)
            holds[key] = holds.get(key, 0) + 1
        elif operation == "release" and holds.get(key):
            gone = cache.release(key, size)
            sizes[key] = size
            holds[key] -= 1
        assert not any(holds.get(g) for g in gone)  # a held value is never let go
        assert all(k in cache for k, count in holds.items() if count)
        over = len(cache) > max_entries or cache.bytes > max_bytes
        assert not over or all(cache.held(k) for k in cache)
        assert cache.bytes == sum(sizes[k] for k in cache)
