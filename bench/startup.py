"""`startup` and `memory` (SPEC §17): `bxctl up` until all four services are ready, and the
four services' resident memory when idle, with the console on (issue 12). Targets: startup
<= 1.5 s; memory <= 160 MB.

Each run is a fresh home; the floor printed beside startup is four bare `python -c pass`
runs, one a service, which no supervisor can beat.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from bench import floors
from bench.box import fresh_home, remove
from bench.stats import save, show, summary, timed, verdict
from bxcore.home.layout import SERVICES


def _bxctl(home: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", home, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _services(home: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if home in line and any(f"services.{name}" in line for name in SERVICES):
            found.append(process)
    return found


def startup(repeat: int = 5) -> None:
    print("startup: bxctl up until all four services answer; memory: their idle RSS")
    samples: list[float] = []
    rss: list[float] = []
    for _ in range(repeat):
        folder = floors.scratch()
        try:
            home = str(fresh_home(folder).root)
            started = time.perf_counter()
            result = _bxctl(home, "up")
            samples.append(time.perf_counter() - started)
            if result.returncode != 0:
                raise RuntimeError(f"bxctl up failed: {result.stderr.strip()}")
            time.sleep(2.0)  # idle: let start-up work settle
            rss.append(sum(p.memory_info().rss for p in _services(home)) / 1e6)
        finally:
            _bxctl(str(folder / "home"), "down")
            remove(folder)
    python = summary(timed(floors.python_bare, 20, warmup=5))
    up = summary(samples)
    show("four bare python -c pass (one a service)", {k: v * 4 if k != "n" else v
                                                      for k, v in python.items()})  # fmt: skip
    show("bxctl up -> all ready", up)
    megabytes = sorted(rss)[len(rss) // 2]
    print(f"  idle RSS of the four services: {megabytes:.1f} MB (median of {len(rss)})")
    save(
        "startup",
        {
            "bxctl_up": up,
            "python_bare": python,
            "startup": verdict("up (s)", up["median_ms"] / 1000, "<= 1.5",
                               up["median_ms"] <= 1500),
            "memory": verdict("idle RSS (MB)", megabytes, "<= 160", megabytes <= 160),
            "cpus": os.cpu_count(),
        },
    )  # fmt: skip
