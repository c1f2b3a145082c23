"""`python -m services.loopd --home DIR` and the `loopd` console script."""

import sys

from bxcore.daemon import run_daemon
from services.loopd.daemon import serve


def main() -> None:
    sys.exit(run_daemon("loopd", serve))


if __name__ == "__main__":
    main()
