"""Answering a request once: a repeat gets the kept answer, a repeat meanwhile waits for the
one being made, and only an answer that is kept spares a repeat from asking afresh."""

from __future__ import annotations

import anyio
import pytest

from bxcore.bounded import Bounded
from bxcore.once import Abandoned, Once

pytestmark = pytest.mark.anyio


class Maker:
    """Makes answers `"<key>#<n>"`, counting, each after `gate` is set when one is given."""

    def __init__(self, gate: anyio.Event | None = None) -> None:
        self.made = 0
        self.gate = gate

    async def __call__(self, key: str) -> str:
        self.made += 1
        if self.gate is not None:
            await self.gate.wait()
        return f"{key}#{self.made}"


async def test_a_repeat_gets_the_first_answer_and_nothing_is_made_again() -> None:
    once: Once[str, str] = Once(Bounded(8))
    make = Maker()
    assert await once.answer("r1", lambda: make("r1")) == "r1#1"
    assert await once.answer("r1", lambda: make("r1")) == "r1#1"
    assert await once.answer("r2", lambda: make("r2")) == "r2#2"
    assert make.made == 2


async def test_a_repeat_while_the_first_is_answered_waits_for_its_answer() -> None:
    once: Once[str, str] = Once(Bounded(8))
    gate = anyio.Event()
    make = Maker(gate)
    answers: list[str] = []

    async def ask() -> None:
        answers.append(await once.answer("r1", lambda: make("r1")))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ask)
        tasks.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert once.making("r1") is not None
        gate.set()
    assert answers == ["r1#1", "r1#1"]
    assert make.made == 1 and once.making("r1") is None


async def test_an_answer_not_kept_leaves_a_repeat_to_ask_afresh() -> None:
    once: Once[str, str] = Once(Bounded(8), keep=lambda answer: not answer.endswith("#1"))
    make = Maker()
    assert await once.answer("r1", lambda: make("r1")) == "r1#1"
    assert await once.answer("r1", lambda: make("r1")) == "r1#2"
    assert await once.answer("r1", lambda: make("r1")) == "r1#2"


async def test_a_maker_that_fails_leaves_the_waiting_repeat_to_make_its_own() -> None:
    once: Once[str, str] = Once(Bounded(8))
    gate = anyio.Event()
    answers: list[str] = []

    async def broken() -> str:
        await gate.wait()
        raise RuntimeError("kaput")

    async def first() -> None:
        with pytest.raises(RuntimeError):
            await once.answer("r1", broken)

    async def repeat() -> None:
        answers.append(await once.answer("r1", lambda: Maker()("r1")))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(repeat)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert answers == ["r1#1"]


async def test_begin_and_finish_give_every_waiter_the_answer_kept_or_not() -> None:
    """brokerd's way: an answer begun by one piece and finished by another."""
    once: Once[tuple[str, str], str] = Once(Bounded(8), keep=lambda a: a != "pending")
    making = once.begin(("s", "c1"))
    got: list[str] = []

    async def wait() -> None:
        got.append(await making.wait())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        once.finish(("s", "c1"), "pending")
    assert got == ["pending"]
    assert once.kept(("s", "c1")) is None and once.making(("s", "c1")) is None


async def test_an_abandoned_answer_is_abandoned_for_who_waits() -> None:
    once: Once[str, str] = Once(Bounded(8))
    making = once.begin("r1")
    once.abandon("r1")
    with pytest.raises(Abandoned):
        await making.wait()
    assert repr(making) == "Making(abandoned)"
