"""`python -m bench [NAME ...]`: run the named benchmarks (all by default) and write
bench/results.json."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bench import broker, console, histories, loop, matrix, mcp, scale, startup

BENCHMARKS: dict[str, Callable[[], None]] = {
    "decision": broker.decision,
    "toolcall": broker.toolcall,
    "turn": loop.turn,
    "startup": startup.startup,
    "scale": scale.scale,
    "console": console.console,
    "mcp": mcp.mcp,
    "histories": histories.histories,
    "matrix": matrix.matrix,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        choices=[*BENCHMARKS, []],
        metavar="NAME",
        help=f"one of {', '.join(BENCHMARKS)} (default: all)",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="toolcall: also time other sandboxes in the same rounds (bench/peers.py)",
    )
    given = parser.parse_args()
    for name in given.names or list(BENCHMARKS):
        if name == "toolcall" and given.peers:
            broker.toolcall(with_peers=True)
        else:
            BENCHMARKS[name]()


if __name__ == "__main__":
    main()
