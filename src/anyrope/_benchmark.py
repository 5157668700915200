"""The CPU benchmark: anyrope against a copy of the same bytes and the naive expressions.

Used by ``benchmarks/bench_cpu.py`` and ``python -m anyrope bench``. Timings are medians
of repeated runs with ``time.perf_counter``; every path is reported as a ratio to the
time of copying the same arrays (the floor: RoPE reads q and k and writes them once).
"""

from __future__ import annotations

import importlib.util
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._functional import rotate_qk
from ._rope import RoPE

Q_SHAPE = (1, 2048, 32, 128)
K_SHAPE = (1, 2048, 8, 128)


@dataclass(frozen=True)
class Timing:
    """One benchmarked path: its median time, bandwidth and ratio to the copy."""

    name: str
    median_ms: float
    gbytes_per_s: float
    copy_ratio: float
    peak_extra_mib: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rotate_half_numpy(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    half = x.shape[-1] // 2
    return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` after one warm-up call, in ms."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` as JSON, with the command, machine and versions that produced it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    provenance = {
        "command": " ".join(["python", *sys.argv]),
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    path.write_text(json.dumps({**provenance, **report}, indent=2) + "\n")


def _peak_extra_mib(fn: Callable[[], object]) -> float:
    """Peak NumPy memory the call allocates (NumPy reports to tracemalloc), in MiB."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def cases(
    q: np.ndarray[Any, Any], k: np.ndarray[Any, Any]
) -> dict[str, tuple[Callable[[], object], bool]]:
    """The paths to time, by name, each with whether it allocates through NumPy."""
    seq = q.shape[1]
    inv_freq = 10000.0 ** (-np.arange(0, q.shape[-1], 2) / q.shape[-1])
    angles = np.arange(seq, dtype=np.float64)[:, None] * inv_freq
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1).astype(np.float32)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1).astype(np.float32)[:, None, :]
    q_out, k_out = np.empty_like(q), np.empty_like(k)

    def copy() -> None:
        np.copyto(q_out, q)
        np.copyto(k_out, k)

    def numpy_naive() -> object:
        return q * cos + _rotate_half_numpy(q) * sin, k * cos + _rotate_half_numpy(k) * sin

    # Scaling changes only the float64 host tables, so it must cost nothing per call.
    yarn = RoPE(
        q.shape[-1],
        scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    )
    found: dict[str, tuple[Callable[[], object], bool]] = {
        "copy (np.copyto)": (copy, True),
        "numpy naive expression": (numpy_naive, True),
        "anyrope numpy": (lambda: rotate_qk(q, k), True),
        "anyrope numpy, yarn": (lambda: yarn(q, k), True),
    }
    if importlib.util.find_spec("torch") is not None:
        import torch

        tq, tk = torch.from_numpy(q), torch.from_numpy(k)
        tcos, tsin = torch.from_numpy(cos), torch.from_numpy(sin)

        def rotate_half_torch(x: Any) -> Any:
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((-x2, x1), dim=-1)

        def torch_eager() -> object:
            return (
                tq * tcos + rotate_half_torch(tq) * tsin,
                tk * tcos + rotate_half_torch(tk) * tsin,
            )

        found["torch eager expression"] = (torch_eager, False)
        found["anyrope torch"] = (lambda: rotate_qk(tq, tk), False)
        found["anyrope torch, yarn"] = (lambda: yarn(tq, tk), False)
    return found


def run_cpu_benchmark(
    repeats: int = 15, progress: Callable[[str], None] | None = None
) -> list[Timing]:
    """Time every path on q (1, 2048, 32, 128) + k (1, 2048, 8, 128) float32, in one run."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal(Q_SHAPE, dtype=np.float32)
    k = rng.standard_normal(K_SHAPE, dtype=np.float32)
    moved = 2 * (q.nbytes + k.nbytes)  # read once, written once
    timings = []
    copy_ms = None
    for name, (fn, numpy_allocates) in cases(q, k).items():
        if progress is not None:
            progress(name)
        median = median_ms(fn, repeats)
        copy_ms = median if copy_ms is None else copy_ms
        peak = _peak_extra_mib(fn) if numpy_allocates else None
        timings.append(Timing(name, median, moved / median / 1e6, copy_ms / median, peak))
    return timings


def format_timings(timings: list[Timing]) -> str:
    """An aligned text table of the timings."""
    lines = [f"{'path':<26} {'median ms':>10} {'GB/s':>8} {'copy/path':>10} {'peak MiB':>9}"]
    for t in timings:
        peak = "-" if t.peak_extra_mib is None else f"{t.peak_extra_mib:.1f}"
        numbers = f"{t.median_ms:>10.2f} {t.gbytes_per_s:>8.1f} {t.copy_ratio:>10.3f}"
        lines.append(f"{t.name:<26} {numbers} {peak:>9}")
    return "\n".join(lines)
