"""`python -m bench.loop_memory` (issue 10): loopd's RSS after many sessions and many tool
calls, beside its idle RSS. Target: within 20 MB after 10,000 sessions and 1M calls.

Real loopd; a zero-latency fake model over HTTP; a stub broker in this process that denies
every call at once (so the figure is loopd's alone). Each session runs one turn of `steps`
model answers of `calls` tool calls each, then words. After: the session list, an old session
read and continued, and loopd restarted on all those histories (its start and RSS again).
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench import floors
from bench.box import daemon, fresh_home, remove
from bxcore.wire.messages import History, HistoryQuery, SessionList, SessionsQuery
from tests.fakes.model_server import FakeModel
from tests.support.crowd import Crowd, StubBroker, crowd_model, rss_mb


def sessions(count: int = 10_000, calls: int = 10, steps: int = 10, text_bytes: int = 500) -> None:
    print(f"sessions: loopd's RSS after {count} sessions of {calls * steps} tool calls each")
    folder = floors.scratch()
    try:
        with FakeModel(record=False) as model:
            model.respond_with(crowd_model(calls=calls, steps=steps, text_bytes=text_bytes))
            config = f'[model]\nbase_url = "{model.base_url}"\n[loop]\nmax_steps = {steps + 1}\n'
            home = fresh_home(folder, config)
            with StubBroker(home.root) as broker, daemon("loopd", home, "loop") as loopd:
                idle = _settled_rss(loopd.pid)
                print(f"  idle RSS                       {idle:8.1f} MB")
                with Crowd(home.root) as crowd:
                    crowd.run((f"warm-{n}", "go") for n in range(50))
                    warm = _settled_rss(loopd.pid)
                    print(f"  after 50 warm-up sessions      {warm:8.1f} MB")
                    started = time.monotonic()
                    step = max(1, count // 10)
                    for first in range(0, count, step):
                        said = ((f"s-{n}", "go") for n in range(first, min(count, first + step)))
                        crowd.run(said)
                        took = time.monotonic() - started
                        print(
                            f"  after {first + step:6d} sessions, {broker.calls:8d} calls "
                            f"{rss_mb(loopd.pid):8.1f} MB   ({took:.0f} s)"
                        )
                    after = _settled_rss(loopd.pid)
                    listed = crowd.ask(SessionsQuery("list"))
                    assert isinstance(listed, SessionList)
                    page = crowd.ask(HistoryQuery("old", "s-0"))
                    assert isinstance(page, History) and page.events, page
                    crowd.run([("s-0", "and again")])
                    end = _settled_rss(loopd.pid)
                print(f"  after {count} sessions, {broker.calls} calls {after:8.1f} MB")
                print(f"  listed {len(listed.sessions)} sessions; s-0 read and continued")
                print(f"  at the end                     {end:8.1f} MB")
                grew = after - idle
                print(f"  => grew {grew:.1f} MB over idle (target <= 20) {_ok(grew <= 20)}")
            size = sum(p.stat().st_size for p in home.sessions.glob("*.jsonl")) / 1e6
            print(f"  histories on disk: {size:.0f} MB in {len(listed.sessions)} files")
            started = time.monotonic()
            with StubBroker(home.root), daemon("loopd", home, "loop") as loopd:
                ready = time.monotonic() - started
                restarted = _settled_rss(loopd.pid)
            print(f"  restarted on them: ready in {ready:.1f} s, RSS {restarted:.1f} MB")
    finally:
        remove(folder)


def _settled_rss(pid: int) -> float:
    time.sleep(0.5)
    return statistics.median(rss_mb(pid) for _ in range(5))


def _ok(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_memory", description=__doc__)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=10, help="tool calls per model answer")
    parser.add_argument("--steps", type=int, default=10, help="model answers with calls a turn")
    parser.add_argument("--text-bytes", type=int, default=500, help="the last answer's size")
    args = parser.parse_args()
    sessions(args.sessions, args.calls, args.steps, args.text_bytes)


if __name__ == "__main__":
    main()
