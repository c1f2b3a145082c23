"""`mcp` (SPEC §17, §18.7): what brokering an MCP tool costs.

- call: an allowed MCP call's round trip through brokerd (decide, record, run on the shared
  server already started, record, answer) against the same call made directly, over stdio
  with the `mcp` SDK's client, to the same server program running in the same sandbox (the
  same bwrap argv brokerd builds). Target (issue 13): the median overhead ≤ 1 ms + one
  append+fsync, measured in the same run. brokerd makes two records durable, one after the
  other, for every call it runs (the decision before the run, I1; the execution, with the
  label it raises, before the answer), so the overhead beyond two fsyncs is shown too.
- start: a server's start (until `initialize` and `tools/list` answered) in its bwrap beside
  the same server started bare, and a brokered call that starts a session's own server.

The server is the fakes' `hanging` kind: its `echo` answers at once.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import zmq
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from bench import floors
from bench.box import connect, daemon, fresh_home, remove
from bench.stats import save, show, summary, verdict
from bxcore.config.file import SandboxConfig, parse_config
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import Denied, Done, ToolRequest, ToolResponse
from bxctl import mcp_pins
from services.brokerd.daemon import sandbox_host
from services.brokerd.mcp import sandbox as mcp_sandbox

SERVERS = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_servers.py"
_ids = itertools.count()


def _config(folder: Path) -> str:
    entry = (
        f"command = {json.dumps([sys.executable, str(SERVERS), 'hanging'])}\n"
        f"ro_paths = {json.dumps([str(SERVERS.parent)])}\n"
    )
    shared = f'[[mcp]]\nname = "echo"\n{entry}per_session = false\n'
    own = f'[[mcp]]\nname = "own"\n{entry}per_session = true\n'
    return shared + own


def _grants(home: Home) -> None:
    for server in ("echo", "own"):  # `hang` has no grant: a denied call, recorded
        grant = f'tool = "mcp__{server}__echo"\nmode = "allow"\nkind = "both"\n'
        grant += "untrusted = false\n"
        (home.root / "grants" / f"{server}.toml").write_text(grant)


def _trust(home: Home, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            mcp_pins.trust(home, name, mcp_pins.listing(home, name))
            return
        except mcp_pins.NotListed:
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokerd never listed {name}") from None
            time.sleep(0.05)


def _parameters(home: Home, sandboxed: bool) -> StdioServerParameters:
    """The same command brokerd runs for the `echo` server (launched, its filter, in its
    bwrap), or the server alone."""
    (server, *_) = parse_config(home.config.read_bytes()).mcp
    program = server.command[0]
    if not sandboxed:
        argv, env = mcp_sandbox.unconfined(server, program)
        return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(env))
    host = sandbox_host(SandboxConfig())
    assert host.bwrap is not None and host.problem is None, host.problem
    argv = mcp_sandbox.command(host, server, program, mcp_sandbox.program_root(program))
    argv[0] = host.bwrap
    seccomp = home.root / "bench-seccomp.bpf"  # as brokerd's runner does
    seccomp.write_bytes(host.seccomp)
    argv = mcp_sandbox.launched(host, argv, str(seccomp) if host.seccomp else None)
    return StdioServerParameters(command=argv[0], args=argv[1:], env={})


def _request(tool: str, text: str, session: str) -> ToolRequest:
    return ToolRequest(*_ids_of(session), tool, json.dumps({"text": text}))


def _ids_of(session: str) -> tuple[str, str, str]:
    n = next(_ids)
    return f"r{n}", session, f"c{n}"


def mcp(repeat: int = 300, warmup: int = 20, starts: int = 15) -> None:
    print("mcp: a brokered MCP call against the same call made directly over stdio")
    folder = floors.scratch()
    try:
        home = fresh_home(folder, _config(folder))
        _grants(home)
        with daemon("brokerd", home, "broker"), floors.append_fsync(folder) as fsync_once:
            _trust(home, "echo")
            _trust(home, "own")
            figures = anyio.run(_measure, home, fsync_once, repeat, warmup, starts)
    finally:
        remove(folder)
    direct, ours, fsync = figures["direct"], figures["brokered"], figures["fsync"]
    bare, boxed, first = figures["start_bare"], figures["start_bwrap"], figures["first_call"]
    show("append + fsync", fsync)
    show("direct call over stdio (same sandbox)", direct)
    show("brokered call (shared server, started)", ours)
    show("brokered denied call (decided, recorded)", figures["denied"])
    show("server start, bare", bare)
    show("server start, in its bwrap", boxed)
    show("brokered first call of a session (starts one)", first)
    overhead = ours["median_ms"] - direct["median_ms"]
    budget = 1.0 + fsync["median_ms"]
    beyond = overhead - 2 * fsync["median_ms"]
    sandbox_share = boxed["median_ms"] - bare["median_ms"]
    print(f"  sandbox's share of a start: {sandbox_share:.3f} ms")
    print(f"  brokered - direct - two fsyncs: {beyond:.3f} ms")
    save(
        "mcp",
        {
            **figures,
            "sandbox_share_of_start_ms": round(sandbox_share, 4),
            "overhead_ms": verdict(
                "brokered - direct call, ms", overhead, f"<= 1 ms + fsync = {budget:.3f}",
                overhead <= budget,
            ),
            "overhead_beyond_two_fsyncs_ms": verdict(
                "brokered - direct - 2 fsyncs, ms", beyond, "<= 1 ms", beyond <= 1.0
            ),
        },
    )  # fmt: skip


async def _measure(
    home: Home, fsync_once: Callable[[], None], repeat: int, warmup: int, starts: int
) -> dict[str, dict[str, float]]:
    dealer = connect(home, "broker")
    dealer.setsockopt(zmq.RCVTIMEO, 30_000)

    def brokered(tool: str, session: str) -> None:
        dealer.send(wire.encode(_request(tool, "ping", session)))
        answer = wire.decode(dealer.recv())
        assert isinstance(answer, ToolResponse) and isinstance(answer.outcome, Done), answer
        assert answer.outcome.output == "ping", answer

    def denied() -> None:
        dealer.send(wire.encode(ToolRequest(*_ids_of("bench"), "mcp__echo__hang", "{}")))
        answer = wire.decode(dealer.recv())
        assert isinstance(answer, ToolResponse) and isinstance(answer.outcome, Denied), answer

    samples: dict[str, list[float]] = {"direct": [], "brokered": [], "denied": [], "fsync": []}
    params = _parameters(home, sandboxed=True)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()

        async def direct() -> None:
            answer = await session.call_tool("echo", {"text": "ping"})
            assert not answer.is_error

        async def through_brokerd() -> None:
            brokered("mcp__echo__echo", "bench")  # blocks the loop: nothing else runs

        async def fsync() -> None:
            fsync_once()

        async def refused() -> None:
            denied()

        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "direct": direct, "brokered": through_brokerd, "denied": refused, "fsync": fsync,
        }  # fmt: skip
        for round_ in range(warmup + repeat):
            for name, action in actions.items():
                started = time.perf_counter()
                await action()
                if round_ >= warmup:
                    samples[name].append(time.perf_counter() - started)
    starting: dict[str, list[float]] = {"start_bare": [], "start_bwrap": [], "first_call": []}
    bare, boxed = _parameters(home, sandboxed=False), params
    for _ in range(starts):
        starting["start_bare"].append(await _start(bare))
        starting["start_bwrap"].append(await _start(boxed))
        started = time.perf_counter()
        brokered("mcp__own__echo", f"s{next(_ids)}")  # a new session: its own server starts
        starting["first_call"].append(time.perf_counter() - started)
    dealer.close(linger=0)
    return {name: summary(values) for name, values in {**samples, **starting}.items()}


async def _start(params: StdioServerParameters) -> float:
    """Seconds until the server answered initialize and tools/list (then it is stopped)."""
    started = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        took = time.perf_counter() - started
    return took
