"""A test daemon that leaves a process behind outside its process group, as a sandbox does.

`python -m tests.support.escaper --home DIR` starts a helper in a session of its own (which
names the home in its command line, so a test sees whether it survived), writes the helper's
pid to `{run}/escaper.helper`, and answers `ping` on `{run}/escaper.sock` until SIGTERM. A
kill of its group misses the helper: only the supervisor's adoption of it (issue 10) stops it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from bxcore.home.layout import Home
from tests.support.ping_only import serve

HELPER = "import time; time.sleep(600)"


def main() -> int:
    parser = argparse.ArgumentParser(prog="escaper")
    parser.add_argument("--home", required=True)
    home = Home.resolve(parser.parse_args().home, {})
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER, "--home", str(home.root)], start_new_session=True
    )
    (home.run_dir / "escaper.helper").write_text(f"{helper.pid}\n")
    print(f"escaper: serving; helper {helper.pid} in a session of its own", file=sys.stderr)
    serve(home, "escaper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
