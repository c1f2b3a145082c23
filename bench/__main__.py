"""`python -m bench [NAME ...]`: run the named benchmarks (all by default but `agentdojo`,
which needs the `bench` extra and takes long) and write bench/results.json."""

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
ON_REQUEST = ("agentdojo",)  # run only when named


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        choices=[*BENCHMARKS, *ON_REQUEST, []],
        metavar="NAME",
        help=f"one of {', '.join([*BENCHMARKS, *ON_REQUEST])} (default: all but "
        f"{', '.join(ON_REQUEST)})",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="toolcall: also time other sandboxes in the same rounds (bench/peers.py)",
    )
    parser.add_argument(
        "--sample", type=int, metavar="N", help="agentdojo: N user tasks and N pairs a suite"
    )
    parser.add_argument("--json", action="store_true", help="agentdojo: print the figures as JSON")
    given = parser.parse_args()
    for name in given.names or list(BENCHMARKS):
        if name == "agentdojo":
            from bench.dojo.run import agentdojo  # imports AgentDojo: the `bench` extra

            agentdojo(given.sample, given.json)
        elif name == "toolcall" and given.peers:
            broker.toolcall(with_peers=True)
        else:
            BENCHMARKS[name]()


if __name__ == "__main__":
    main()
