"""Building cos/sin tables: anyrope's host math against NumPy's np.cos / np.sin.

    python benchmarks/bench_tables.py [--rounds 15] [--json benchmarks/results/tables.json]

float32 tables for 131072 positions x 64 pairs (head_dim 128, base 10000), built the way
anyrope builds them (float64 angles, cos and sin, one rounding to float32). "np.cos/np.sin"
is the build anyrope used before its own host math: faster on some CPUs, but its bits
depend on the CPU's SIMD level and the OS's libm.

The second table is the host math of dynamic-NTK decoding past the trained context
(4096): for a block of 256 lengths (5000 to 5255), the frequencies of each length
(``scaling.dynamic.inv_freq_per_length``: two calls of ``power``, the second on 256 x 64)
and ``sincos`` of the last position of each, against the same with ``**``, ``np.cos``
and ``np.sin``; a sample is 20 blocks.

The candidates run round-robin inside each round, so a slow spell of a shared machine
hits all alike; the report gives the median, the spread (interquartile range) and the
machine's load average.
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

from anyrope._frequencies import default_inv_freq
from anyrope._hostmath import sincos
from anyrope._tables import host_tables
from anyrope.scaling import dynamic
from anyrope.tools._benchmark import write_json

POSITIONS = 131072
HEAD_DIM = 128
BASE = 10000.0
TRAINED = 4096
FACTOR = 2.0
LENGTHS = np.arange(5000, 5256)
BLOCKS_PER_SAMPLE = 20


def _platform_build(inv_freq: np.ndarray, positions: np.ndarray) -> Any:
    angles = positions.astype(np.float64)[:, None] * inv_freq
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _anyrope_build(inv_freq: np.ndarray, positions: np.ndarray) -> Any:
    return host_tables(inv_freq, positions, attention_factor=1.0, dtype=np.dtype(np.float32))


def _platform_block(lengths: np.ndarray) -> Any:
    stretch = FACTOR * lengths / TRAINED - (FACTOR - 1.0)
    scaled = BASE * stretch ** (HEAD_DIM / (HEAD_DIM - 2))
    many = scaled[:, None] ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = (lengths - 1).astype(np.float64)[:, None] * many
    return np.cos(angles), np.sin(angles)


def _anyrope_block(lengths: np.ndarray) -> Any:
    many = dynamic.inv_freq_per_length(
        HEAD_DIM, BASE, factor=FACTOR, lengths=lengths, max_position_embeddings=TRAINED
    )
    return sincos((lengths - 1).astype(np.float64)[:, None] * many)


def _repeated(build: Callable[[], Any], times: int) -> Callable[[], Any]:
    def run() -> None:
        for _ in range(times):
            build()

    return run


def _quartiles(times: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(times, n=4)
    return q1, median, q3


def _report(title: str, times: dict[str, list[float]], per_sample: int) -> dict[str, Any]:
    """Print one table (ms per build) and return its rows and anyrope's ratio."""
    print(title)
    rows = {}
    for name, values in times.items():
        q1, median, q3 = _quartiles([value / per_sample for value in values])
        rows[name] = {"median_ms": median, "q1_ms": q1, "q3_ms": q3}
        print(f"  {name:<30} median {median:8.3f} ms   (IQR {q1:.3f} .. {q3:.3f})")
    platform, anyrope = (row["median_ms"] for row in rows.values())
    print(f"  anyrope / platform: {anyrope / platform:.2f}x")
    return {"rows": rows, "ratio_to_platform": anyrope / platform}


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
    inv_freq = default_inv_freq(HEAD_DIM, BASE)
    positions = np.arange(POSITIONS, dtype=np.int64)
    groups: dict[str, dict[str, Callable[[], Any]]] = {
        "tables": {
            "np.cos/np.sin (platform)": lambda: _platform_build(inv_freq, positions),
            "anyrope host math": lambda: _anyrope_build(inv_freq, positions),
        },
        "dynamic_ntk_block": {
            "**, np.cos/np.sin (platform)": _repeated(
                lambda: _platform_block(LENGTHS), BLOCKS_PER_SAMPLE
            ),
            "anyrope host math": _repeated(lambda: _anyrope_block(LENGTHS), BLOCKS_PER_SAMPLE),
        },
    }
    times = {group: {name: [] for name in builds} for group, builds in groups.items()}
    for builds in groups.values():
        for build in builds.values():
            build()  # warm-up
    for _ in range(args.rounds):
        for group, builds in groups.items():
            for name, build in builds.items():
                start = time.perf_counter()
                build()
                times[group][name].append((time.perf_counter() - start) * 1e3)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load {load:.2f}")
    tables = _report(
        f"float32 tables, {POSITIONS} positions x {HEAD_DIM // 2} pairs", times["tables"], 1
    )
    block = _report(
        f"dynamic NTK, frequencies and last rows of {LENGTHS.size} lengths (ms per block)",
        times["dynamic_ntk_block"],
        BLOCKS_PER_SAMPLE,
    )
    write_json(
        args.json,
        {
            "tables": tables["rows"],
            "ratio_to_platform": tables["ratio_to_platform"],
            "dynamic_ntk_block": block["rows"],
            "dynamic_ntk_block_ratio_to_platform": block["ratio_to_platform"],
            "load": load,
        },
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
