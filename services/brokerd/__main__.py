"""`python -m services.brokerd --home DIR` and the `brokerd` console script."""

import sys

from bxcore.daemon import run_daemon
from services.brokerd.daemon import serve


def main() -> None:
    sys.exit(run_daemon("brokerd", serve))


if __name__ == "__main__":
    main()
