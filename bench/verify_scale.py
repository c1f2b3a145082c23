"""`audit verify` at scale (issue 10): `bxctl audit verify` on a ledger of a million records,
built with the project's own record builder (`bench.ledger_builder`, not through the broker
socket), whole and `--since-witness`, beside the floor measured in the same run: reading the
same bytes and hashing them in one SHA-256. Target: the whole check <= 10 s.

The figures are wall time, and the CPU time of the `bxctl` process (user + system) beside it:
on a shared machine the wall time includes waiting for the CPU. `python -m bench.verify_scale
[N]` runs it alone; `measure(n)` is what `python -m bench scale` folds in.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import floors
from bench.box import fresh_home, remove
from bench.ledger_builder import build
from bench.stats import save, show, summary, verdict

TARGET_S = 10.0


def _bxctl(home: Path, *args: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of one `bxctl` run, and its output; raises when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home), *args],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise RuntimeError(f"bxctl {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return wall, cpu, result.stdout.strip()


def _floor(path: Path) -> float:
    """Reading the file in 8 MiB blocks and hashing all of it once: what no check beats."""
    started = time.perf_counter()
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(8 * 1024 * 1024):
            digest.update(block)
    return time.perf_counter() - started


def measure(n: int = 1_000_000, repeat: int = 3) -> dict[str, Any]:
    """Builds the ledger in a scratch home, times the checks, and removes it all."""
    folder = floors.scratch()
    try:
        home = fresh_home(folder).root
        started = time.perf_counter()
        _, size = build(home / "audit" / "ledger.jsonl", n)
        built = time.perf_counter() - started
        print(f"  built {n:,} records, {size / 1e6:.0f} MB, in {built:.1f} s (record builder)")
        return checks(home, repeat)
    finally:
        remove(folder)


def checks(home: Path, repeat: int = 3) -> dict[str, Any]:
    """`bxctl audit verify` on the ledger of `home`, whole and `--since-witness`, beside the
    floor."""
    ledger = home / "audit" / "ledger.jsonl"
    size = ledger.stat().st_size
    with open(ledger, "rb") as f:
        records = sum(1 for _ in f)
    os.sync()  # the witness's fsync must not wait for the ledger's write-back
    floor = [_floor(ledger) for _ in range(repeat)]
    whole, whole_cpu, since, since_cpu = [], [], [], []
    for _ in range(repeat):
        (home / "witness" / "bxctl.json").unlink(missing_ok=True)
        wall, cpu, out = _bxctl(home, "audit", "verify")
        assert out == f"ok: {records} records" or out.startswith(f"ok: {records} records, "), out
        whole.append(wall)
        whole_cpu.append(cpu)
        wall, cpu, out = _bxctl(home, "audit", "verify", "--since-witness")
        assert out.startswith(f"ok: {records} records (0 new since"), out
        since.append(wall)
        since_cpu.append(cpu)
    verify = summary(whole)
    figures: dict[str, Any] = {
        "records": records,
        "bytes": size,
        "floor_read_and_hash": summary(floor),
        "verify": verify,
        "verify_cpu": summary(whole_cpu),
        "verify_since_witness": summary(since),
        "verify_since_witness_cpu": summary(since_cpu),
    }
    show("floor: read and hash the file once", figures["floor_read_and_hash"])
    show(f"bxctl audit verify, {records:,} records", verify)
    show("  its CPU time (user + system)", figures["verify_cpu"])
    show("bxctl audit verify --since-witness", figures["verify_since_witness"])
    seconds = verify["median_ms"] / 1000
    figures["target"] = verdict("audit verify (s)", seconds, f"<= {TARGET_S:g}",
                                seconds <= TARGET_S)  # fmt: skip
    return figures


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(f"audit verify at scale: {n:,} records")
    save("audit_verify", measure(n))


if __name__ == "__main__":
    main()
