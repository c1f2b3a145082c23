"""Medians, p99s and the results file: what every benchmark reports the same way."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results.json")


def summary(samples_s: list[float]) -> dict[str, float]:
    """Median, p90 and p99 in milliseconds of a list of durations in seconds."""
    ordered = sorted(samples_s)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 4),
        "p90_ms": round(p90 * 1000, 4),
        "p99_ms": round(p99 * 1000, 4),
        "n": len(ordered),
    }


def timed(action: Callable[[], object], repeat: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        action()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def interleaved(
    actions: dict[str, Callable[[], object]], repeat: int, warmup: int = 10
) -> dict[str, list[float]]:
    """Each action timed once a round, round after round: the machine's drift during a run
    (other loads, frequency) then weighs on the floor and on our figure alike."""
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for round_ in range(warmup + repeat):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            if round_ >= warmup:
                samples[name].append(time.perf_counter() - started)
    return samples


def alternated(
    runs: dict[str, Callable[[float], tuple[int, float]]],
    seconds: float,
    slices: int = 6,
    warmup_s: float = 0.2,
) -> dict[str, float]:
    """Rates (per second) of runs that each say how many things they did in how long: each is
    given `seconds / slices` at a time, in turn, so that drift weighs on all alike, as in
    `interleaved`. One untimed run of `warmup_s` each comes first."""
    for run in runs.values():
        run(warmup_s)
    done = dict.fromkeys(runs, 0)
    spent = dict.fromkeys(runs, 0.0)
    for _ in range(slices):
        for name, run in runs.items():
            count, elapsed = run(seconds / slices)
            done[name] += count
            spent[name] += elapsed
    return {name: done[name] / spent[name] for name in runs}


def show(name: str, figure: dict[str, float]) -> None:
    p90 = f"   p90 {figure['p90_ms']:9.3f} ms" if "p90_ms" in figure else ""
    print(
        f"  {name:<44} median {figure['median_ms']:9.3f} ms{p90}   p99 {figure['p99_ms']:9.3f} ms"
    )


def verdict(name: str, value: float, target: str, ok: bool) -> dict[str, Any]:
    print(f"  => {name}: {value:.3f} (target {target}) {'ok' if ok else 'MISSED'}")
    return {"value": round(value, 4), "target": target, "ok": ok}


def save(section: str, figures: dict[str, Any]) -> None:
    """Merge one benchmark's figures into bench/results.json, with when and where."""
    try:
        results = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        results = {}
    results[section] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}",
        **figures,
    }
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
