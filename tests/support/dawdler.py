"""A test daemon slow to start: it answers `ping` on `{run}/dawdler.sock` only after a minute,
so a test can act while the supervisor is still starting the box.

`python -m tests.support.dawdler --home DIR`, supervised as `dawdler=tests.support.dawdler:dawdler`.
"""

from __future__ import annotations

import argparse
import sys
import time

from bxcore.home.layout import Home
from tests.support.ping_only import serve


def main() -> int:
    parser = argparse.ArgumentParser(prog="dawdler")
    parser.add_argument("--home", required=True)
    home = Home.resolve(parser.parse_args().home, {})
    time.sleep(60)
    serve(home, "dawdler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
