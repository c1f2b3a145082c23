"""The machine's floors, measured in the same run as our figures (SPEC §17)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import zmq

ECHO_SERVER = textwrap.dedent(
    """
    import asyncio, sys, zmq, zmq.asyncio
    async def main():
        ctx = zmq.asyncio.Context()
        s = ctx.socket(zmq.ROUTER)
        s.bind(sys.argv[1])
        print("ready", flush=True)
        while True:
            frames = await s.recv_multipart()
            await s.send_multipart(frames)
    asyncio.run(main())
    """
)


@contextlib.contextmanager
def zmq_round_trip(folder: Path) -> Iterator[Callable[[], None]]:
    """One DEALER round trip to a bare zmq.asyncio ROUTER echo in another process, over ipc."""
    endpoint = f"ipc://{folder}/echo.sock"
    server = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER, endpoint], stdout=subprocess.PIPE, text=True
    )
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        dealer.connect(endpoint)
        payload = b'{"type":"tool_request","id":"r1","session":"chat-1","call":"c","tool":"x"}'

        def once() -> None:
            dealer.send(payload)
            dealer.recv()

        yield once
    finally:
        dealer.close(linger=0)
        ctx.term()
        server.kill()
        server.wait()


@contextlib.contextmanager
def append_fsync(folder: Path) -> Iterator[Callable[[], None]]:
    """One ~300-byte line appended to a file and fsynced, on the home's file system."""
    line = b'{"seq":1,"kind":"decision","arguments":"' + b"x" * 240 + b'"}\n'
    fd = os.open(folder / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def once() -> None:
        os.write(fd, line)
        os.fsync(fd)

    try:
        yield once
    finally:
        os.close(fd)


def bwrap_true() -> None:
    """`bwrap --unshare-all … /bin/true`, once: a fresh sandbox and nothing in it."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bwrap is not installed"
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
            "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
            "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"]  # fmt: skip
    subprocess.run(argv, check=True)


def python_bare() -> None:
    """`python -I -S -c pass`, once, with this environment's interpreter."""
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="bxb-", dir="/tmp"))
