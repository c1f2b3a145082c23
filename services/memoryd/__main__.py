"""`python -m services.memoryd --home DIR` and the `memoryd` console script."""

import sys

from bxcore.daemon import run_daemon
from services.memoryd.daemon import serve


def main() -> None:
    sys.exit(run_daemon("memoryd", serve))


if __name__ == "__main__":
    main()
