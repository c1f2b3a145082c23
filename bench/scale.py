"""`scale` (issue 10): the box on a ledger of a million records, beside the same box on an
empty one. Targets: `bxctl up` within 0.2 s, and brokerd's RSS within 20 MB, of the empty
box's; `bxctl audit verify` of the million <= 10 s (`bench.verify_scale`).

The ledger is built with the project's own record builder (`bench.ledger_builder`: every line
brokerd's canonical record, chained), not through the broker socket, and with no index beside
it, as a ledger of before issue 10: the first start reads it whole (in the background; `bxctl
up` returns once brokerd answers, and the ledger says `loading` until then) and every later
start only what its index does not hold. Then brokerd takes a sustained load of denied calls
from 16 clients, and its RSS is read as the calls add up (each one a decision in the ledger and
a row in the index), to show it stays flat.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]

from bench import floors, verify_scale
from bench.box import fresh_home, remove
from bench.broker import concurrent
from bench.ledger_builder import build
from bench.stats import save, show, summary, verdict
from bxcore.home import report
from bxcore.home.layout import Home

UP_TARGET_S = 0.2
RSS_TARGET_MB = 20.0


def _bxctl(home: Home, *args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home.root), *args],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"bxctl {' '.join(args)} failed: {result.stdout}{result.stderr}")


def _brokerd_mb(home: Home) -> float:
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if str(home.root) in line and "services.brokerd" in line:
            return float(process.memory_info().rss) / 1e6
    raise RuntimeError("brokerd is not running")


def _loaded(home: Home, deadline_s: float = 600.0) -> float:
    """Seconds until brokerd reports its ledger ok (it answers `ping` before)."""
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        state = (report.read(home).get("ledger") or {}).get("state")
        if state == "ok":
            return time.perf_counter() - started
        if state in ("failed", "broken"):
            raise RuntimeError(f"the ledger is {state}")
        time.sleep(0.01)
    raise TimeoutError("brokerd did not load its ledger")


def _starts(home: Home, repeat: int) -> dict[str, list[float]]:
    """`bxctl up` (until every service answers), then until the ledger is ok, and brokerd's
    RSS once settled; `bxctl down` after each."""
    figures: dict[str, list[float]] = {"up": [], "loaded": [], "rss": []}
    for _ in range(repeat):
        started = time.perf_counter()
        _bxctl(home, "up")
        figures["up"].append(time.perf_counter() - started)
        figures["loaded"].append(_loaded(home))
        time.sleep(2.0)  # idle: let start-up work settle
        figures["rss"].append(_brokerd_mb(home))
        _bxctl(home, "down")
    return figures


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def scale(n: int = 1_000_000, repeat: int = 3, load_s: float = 60.0) -> None:
    print(f"scale: the box on a ledger of {n:,} records, beside an empty one")
    empty_folder, folder = floors.scratch(), floors.scratch()
    figures: dict[str, Any] = {"records": n}
    try:
        empty = _starts(fresh_home(empty_folder), repeat)
        home = fresh_home(folder)
        started = time.perf_counter()
        _, size = build(home.ledger, n)
        print(
            f"  built {n:,} records, {size / 1e6:.0f} MB, in {time.perf_counter() - started:.1f} s"
        )
        first = _starts(home, 1)  # no index yet: the whole ledger is read, in the background
        big = _starts(home, repeat)
        print("  audit verify on the same ledger:")
        figures["audit_verify"] = verify_scale.checks(home.root, repeat)
        rss_under_load = _load(home, load_s)
    finally:
        remove(empty_folder)
        remove(folder)
    show("empty ledger: bxctl up", summary(empty["up"]))
    show(f"{n:,} records, first start: bxctl up", summary(first["up"]))
    print(f"    its ledger read whole and indexed in {first['loaded'][0]:.1f} s after")
    show(f"{n:,} records: bxctl up", summary(big["up"]))
    show(f"{n:,} records: ledger ok after up", summary(big["loaded"]))
    rss_empty, rss_big = _median(empty["rss"]), _median(big["rss"])
    print(f"  brokerd RSS: {rss_empty:.1f} MB empty, {rss_big:.1f} MB at {n:,} records")
    steps = ", ".join(f"{calls:,} calls {mb:.1f} MB" for calls, mb in rss_under_load)
    print(f"  brokerd RSS under load: {steps}")
    up_more = (summary(big["up"])["median_ms"] - summary(empty["up"])["median_ms"]) / 1000
    rss_more = max(rss_big, *(mb for _, mb in rss_under_load)) - rss_empty
    figures |= {
        "bxctl_up_empty": summary(empty["up"]),
        "bxctl_up_first_start": summary(first["up"]),
        "first_start_ledger_read_s": round(first["loaded"][0], 3),
        "bxctl_up": summary(big["up"]),
        "ledger_ok_after_up": summary(big["loaded"]),
        "brokerd_rss_mb_empty": round(rss_empty, 1),
        "brokerd_rss_mb": round(rss_big, 1),
        "brokerd_rss_mb_under_load": [[c, round(m, 1)] for c, m in rss_under_load],
        "up_vs_empty": verdict("bxctl up, more than empty (s)", up_more,
                               f"<= {UP_TARGET_S:g}", up_more <= UP_TARGET_S),
        "rss_vs_empty": verdict("brokerd RSS, more than empty (MB)", rss_more,
                                f"<= {RSS_TARGET_MB:g}", rss_more <= RSS_TARGET_MB),
    }  # fmt: skip
    save("scale", figures)


def _load(home: Home, seconds: float, slices: int = 6) -> list[tuple[int, float]]:
    """brokerd's RSS after each slice of a sustained load of denied calls (16 clients)."""
    _bxctl(home, "up")
    try:
        _loaded(home)
        found = [(0, _brokerd_mb(home))]
        calls = 0
        for _ in range(slices):
            rate = concurrent(home, clients=16, seconds=seconds / slices)
            calls += int(rate * seconds / slices)
            found.append((calls, _brokerd_mb(home)))
        return found
    finally:
        _bxctl(home, "down")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    scale(n)


if __name__ == "__main__":
    main()
