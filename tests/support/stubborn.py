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

from bxcore.home.layout import Home
from tests.support.ping_only import serve

HELPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def main() -> int:
    parser = argparse.ArgumentParser(prog="stubborn")
    parser.add_argument("--home", required=True)
    home = Home.resolve(parser.parse_args().home, {})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", HELPER, "--home", str(home.root)])
    print("stubborn: serving, and ignoring SIGTERM", file=sys.stderr)
    serve(home, "stubborn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
