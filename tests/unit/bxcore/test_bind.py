"""A bind that fails (issue 10): one `SetupError` line naming the endpoint and what is in the
way, the socket closed at once, and a context that then ends at once instead of waiting
forever for a socket nobody would close. Real ZeroMQ sockets, in this process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from bxcore import curve
from bxcore.errors import SetupError
from bxcore.events import Publisher
from bxcore.router import Router, bind_failure
from bxcore.routes import Refusal, Routes

nothing: Routes[None] = Routes((), Refusal("the test socket takes nothing"))


def ends_within(action: Callable[[], None], seconds: float) -> bool:
    """Run `action` in a thread; True when it returned within `seconds`."""
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


@pytest.mark.parametrize("kind", ["router", "publisher"])
def test_a_folder_at_the_socket_path_is_one_line_and_the_context_still_ends(
    short_tmp: Path, kind: str
) -> None:
    path = short_tmp / "gateway.sock"
    path.mkdir()
    endpoint = f"ipc://{path}"
    ctx = zmq.asyncio.Context()
    with pytest.raises(SetupError) as raised:
        if kind == "router":
            Router(ctx, endpoint, nothing, service="test")
        else:
            Publisher(ctx, endpoint, service="test")
    assert str(raised.value) == (
        f"cannot bind {endpoint}: Address already in use (a folder is at that path; move it away)"
    )
    assert ends_within(lambda: ctx.destroy(linger=0), 5.0), "ctx.destroy hung"


def test_a_socket_whose_bind_failed_is_closed_even_if_nobody_destroys_the_context(
    short_tmp: Path,
) -> None:
    (short_tmp / "x.sock").mkdir()
    ctx = zmq.Context()
    with pytest.raises(SetupError):
        Router(ctx, f"ipc://{short_tmp / 'x.sock'}", nothing, service="test")
    assert ends_within(ctx.term, 5.0), "ctx.term hung: the failed socket was left open"


def test_a_tcp_port_in_use_names_the_endpoint(short_tmp: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    ctx = zmq.Context()
    try:
        with pytest.raises(SetupError) as raised:
            Router(ctx, f"tcp://127.0.0.1:{port}", nothing, service="test")
        assert str(raised.value) == f"cannot bind tcp://127.0.0.1:{port}: Address already in use"
    finally:
        ctx.destroy(linger=0)
        taken.close()


@pytest.mark.parametrize(
    ("occupant", "expected"),
    [
        (None, "cannot bind ipc:///r/a.sock: Permission denied"),
        ("a folder", "cannot bind ipc:///r/a.sock: Permission denied (a folder is at that path; "
         "move it away)"),
    ],
)  # fmt: skip
def test_the_line_a_failed_bind_becomes(occupant: str | None, expected: str) -> None:
    assert bind_failure("ipc:///r/a.sock", "Permission denied", occupant) == expected


@pytest.mark.anyio
async def test_a_second_zap_handler_is_a_setup_error_and_the_context_still_ends() -> None:
    ctx = zmq.asyncio.Context()
    first = curve.start_zap(ctx, {})
    try:
        with pytest.raises(SetupError, match="cannot start the ZAP handler"):
            curve.start_zap(ctx, {})
    finally:
        first.stop()
    assert ends_within(lambda: ctx.destroy(linger=0), 5.0), "ctx.destroy hung"
