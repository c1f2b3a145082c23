"""MCP servers through brokerd's crashes and the box's stop (SPEC §18.2, §18.6): a call that
brokerd's SIGKILL interrupts never runs twice, and no server process outlives `bxctl down`
or a killed brokerd (bwrap's `--die-with-parent`)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import zmq

from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import Done, ToolRequest
from services.brokerd.core.replay import UNKNOWN
from tests.support.box import box_home, bxctl, cmdline_of, processes_of, up, wait_until
from tests.support.brokerd import args, call
from tests.support.daemons import init_home, running, sync_request
from tests.support.mcp import fake, grant, trust


def left(root: Path) -> list[str]:
    """Every process (but this one) whose command line names the test's folder: brokerd, a
    bwrap, a server (each names its folder, under `root`)."""
    return [" ".join(line) for line in map(cmdline_of, processes_of(root)) if line]


def no_process_left(root: Path) -> None:
    wait_until(lambda: not left(root), 10, f"processes left: {left(root)}")


def ledger(home: Path) -> list[dict[str, Any]]:
    lines = (home / "audit" / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_call_running_when_brokerd_is_killed_never_runs_twice(short_tmp: Path) -> None:
    runs = short_tmp / "slow"
    home = init_home(short_tmp / "h", fake("slow", "slow", runs))
    grant(home, "slow", "mcp__slow__*", kind="sink", untrusted=False)
    request = ToolRequest("r1", "s1", "c1", "mcp__slow__work", args(tag="t1"))
    log = runs / "runs.log"
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        with running("brokerd", home) as brokerd:
            trust(home, "slow")
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(Home(home).endpoint("broker"))
            dealer.send(wire.encode(request))
            wait_until(lambda: log.exists() and log.read_text() == "start t1\n", 15, "the run")
            os.kill(brokerd.pid, signal.SIGKILL)  # brokerd alone: its servers must follow it
            brokerd.process.wait(timeout=10)
            killed = time.monotonic()
            assert not dealer.poll(0), "an answer came from a brokerd killed mid-call"
            dealer.close(linger=0)
            no_process_left(short_tmp)  # the server died with brokerd (--die-with-parent)
        records = [r for r in ledger(home) if r.get("call") == "c1"]
        assert [(r["kind"], r.get("outcome")) for r in records] == [("decision", "allowed")]
        with running("brokerd", home) as brokerd:
            again = call(brokerd, "s1", "c1", "mcp__slow__work", args(tag="t1"), rid="r2")
            assert not isinstance(again, Done) and again.message == UNKNOWN, again
            time.sleep(max(0.0, killed + 2.5 - time.monotonic()))  # past the run's end
            quick = call(brokerd, "s1", "c2", "mcp__slow__quick", args(text="alive"))
            assert isinstance(quick, Done) and quick.output == "alive"
        assert log.read_text() == "start t1\n"  # once, and cut short: never run again
        records = [r for r in ledger(home) if r.get("call") == "c1"]
        assert [r["kind"] for r in records] == ["decision"]  # no executed record: unknown
        no_process_left(short_tmp)
    finally:
        ctx.destroy(linger=0)


def test_no_server_process_is_left_after_bxctl_down(short_tmp: Path) -> None:
    with box_home(short_tmp) as home:
        config = fake("mem", "memory", short_tmp / "mem") + fake(
            "shared", "memory", short_tmp / "shared", per_session=False
        )
        init_home(home, config)
        grant(home, "mem", "mcp__mem__*", kind="both", untrusted=False)
        grant(home, "shared", "mcp__shared__*", kind="both", untrusted=False)
        started = up(home, "brokerd")
        assert started.returncode == 0, started.stderr
        trust(home, "mem")
        trust(home, "shared")
        for session in ("s1", "s2", "s3"):
            for server in ("mem", "shared"):
                tool = f"mcp__{server}__remember"
                request = ToolRequest("r1", session, f"c-{server}", tool, args(text=session))
                answer = sync_request(home, "broker", request, timeout=20)
                assert isinstance(answer.outcome, Done), answer
        servers = [line for line in left(short_tmp) if "mcp_servers.py" in line]
        assert len(servers) >= 4, servers  # three per-session servers and a shared one
        stopped = bxctl(home, "down")
        assert stopped.returncode == 0, stopped.stderr
        assert left(short_tmp) == []  # at once: `down` returned after they ended
