"""A test daemon that ignores SIGTERM, and so does the helper it starts in its process group.

`python -m tests.support.stubborn --home DIR` answers `ping` on `{run}/stubborn.sock` and can
only be stopped with SIGKILL; the helper carries the home in its command line, so a test can
see that it did not survive either.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from typing import Any

import anyio
import zmq.asyncio

from bxcore.home import Home
from bxcore.messages import Error, ErrorCode
from bxcore.router import Router

HELPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


async def serve(home: Home) -> None:
    ctx = zmq.asyncio.Context()

    async def handle(message: Any) -> Any:
        return Error(message.id, ErrorCode.WRONG_SOCKET, "stubborn only answers ping")

    try:
        await Router(ctx, home.endpoint("stubborn"), handle, service="stubborn").serve()
    finally:
        ctx.destroy(linger=0)


def main() -> int:
    parser = argparse.ArgumentParser(prog="stubborn")
    parser.add_argument("--home", required=True)
    home = Home.resolve(parser.parse_args().home, {})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", HELPER, "--home", str(home.root)])
    print("stubborn: serving, and ignoring SIGTERM", file=sys.stderr)
    anyio.run(serve, home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
