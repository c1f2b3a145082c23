"""`python -m services.gatewayd --home DIR` and the `gatewayd` console script."""

import sys

from bxcore.daemon import run_daemon
from services.gatewayd.daemon import serve


def main() -> None:
    sys.exit(run_daemon("gatewayd", serve))


if __name__ == "__main__":
    main()
