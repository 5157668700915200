"""Building cos/sin tables: anyrope's host math against NumPy's np.cos / np.sin.

    python benchmarks/bench_tables.py [--rounds 15] [--json benchmarks/results/tables.json]

float32 tables for 131072 positions x 64 pairs (head_dim 128, base 10000), built the way
anyrope builds them (float64 angles, cos and sin, one rounding to float32). "np.cos/np.sin"
is the build anyrope used before its own host math: faster on some CPUs, but its bits
depend on the CPU's SIMD level and the OS's libm. The candidates run round-robin inside
each round, so a slow spell of a shared machine hits both alike; the report gives the
median, the spread (interquartile range) and the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anyrope._benchmark import write_json
from anyrope._frequencies import default_inv_freq
from anyrope._tables import host_tables

POSITIONS = 131072
HEAD_DIM = 128


def _platform_build(inv_freq: np.ndarray, positions: np.ndarray) -> Any:
    angles = positions.astype(np.float64)[:, None] * inv_freq
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _anyrope_build(inv_freq: np.ndarray, positions: np.ndarray) -> Any:
    return host_tables(inv_freq, positions, attention_factor=1.0, dtype=np.dtype(np.float32))


def _quartiles(times: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(times, n=4)
    return q1, median, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (median)")
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("benchmarks/results/tables.json"),
        help="where to write JSON",
    )
    args = parser.parse_args()
    inv_freq = default_inv_freq(HEAD_DIM, 10000.0)
    positions = np.arange(POSITIONS, dtype=np.int64)
    candidates: dict[str, Callable[[], Any]] = {
        "np.cos/np.sin (platform)": lambda: _platform_build(inv_freq, positions),
        "anyrope host math": lambda: _anyrope_build(inv_freq, positions),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for build in candidates.values():
        build()  # warm-up
    for _ in range(args.rounds):
        for name, build in candidates.items():
            start = time.perf_counter()
            build()
            times[name].append((time.perf_counter() - start) * 1e3)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"float32 tables, {POSITIONS} positions x {HEAD_DIM // 2} pairs; load {load:.2f}")
    rows = {}
    for name, values in times.items():
        q1, median, q3 = _quartiles(values)
        rows[name] = {"median_ms": median, "q1_ms": q1, "q3_ms": q3}
        print(f"  {name:<26} median {median:8.1f} ms   (IQR {q1:.1f} .. {q3:.1f})")
    ratio = rows["anyrope host math"]["median_ms"] / rows["np.cos/np.sin (platform)"]["median_ms"]
    print(f"anyrope / np.cos build: {ratio:.2f}x")
    write_json(args.json, {"tables": rows, "ratio_to_platform": ratio, "load": load})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
