"""The seams where the box uses asyncio itself rather than anyio, gathered so they are seen
together. Every daemon and the supervisor run on anyio's **asyncio** backend (`anyio.run`'s
default; trio is never used), and these places depend on it:

- **Watching a descriptor with a callback** (`loop().add_reader`, `add_writer`): the router
  drains a plain pyzmq socket on its ZMQ_FD (`bxcore.router`), a sandbox's pipes and
  pidfd are read as they become ready (`services/brokerd/sandbox/child.py`), and so are a running
  MCP server's (`services/brokerd/mcp/stdio.py`). anyio's
  `wait_readable` parks a task per wait, a future and several callbacks per wake-up: measured,
  most of a denied decision's time in the router, and ~1 ms of an allowed call in the child.
- **A callback after the current ones** (`loop().call_soon`): the router's second look at
  its socket once a turn's answers are sent, and brokerd's announcement of the ledger head once
  the answers of a batch are out.
- **One turn of the loop** (`yield_once`): the group commit lets every ready task queue its
  records before one write and one fsync (`services/brokerd/ledger/commit.py`); anyio's checkpoint
  also checks cancel scopes, and the commit must not be cancelled between queue and write.
- **Tasks the router spawns itself** (`spawn`, `wait_all`, `current_task`): one a request,
  created from a reader callback, which has no task group to start them in.
- **Socket calls on a loop** (`loop().sock_recv`, `sock_sendall`): the fetch proxy's end
  of a tunnel; anyio's Unix streams (4.16) can fail a read cancelled as data arrives.
- **Futures** (`Future`): a child's end, and an MCP server's answer, set from those callbacks.
- **A timer on a future** (`loop().call_later`): an MCP call's timeout fails the future of
  its answer; `anyio.fail_after` cost ~10 µs a call more (a cancel scope and its deadline).

No other module imports asyncio (`tests/unit/test_imports.py` checks it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

Loop = asyncio.AbstractEventLoop
Future = asyncio.Future
Task = asyncio.Task


def loop() -> Loop:
    """The running event loop (asyncio's: see above)."""
    return asyncio.get_running_loop()


async def yield_once() -> None:
    """Let every other ready callback and task run once; no cancellation point of anyio's."""
    await asyncio.sleep(0)


def spawn(coroutine: Coroutine[Any, Any, T]) -> Task[T]:
    """A task of its own for `coroutine`, made from a callback (which has no task group)."""
    return loop().create_task(coroutine)


def current_task() -> Task[Any] | None:
    return asyncio.current_task()


async def wait_all(tasks: Iterable[Task[Any]]) -> None:
    """Wait until every one of `tasks` has ended (none is cancelled by this)."""
    pending = list(tasks)
    if pending:
        await asyncio.wait(pending)
