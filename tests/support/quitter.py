"""A test daemon that cannot start: it says so in one line and exits 1, every time.

`python -m tests.support.quitter --home DIR`, supervised as `quitter=tests.support.quitter:quitter`.
"""

from __future__ import annotations

import sys


def main() -> int:
    print("quitter: cannot start (on purpose, for the supervisor's tests)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
