"""The CPU benchmark: anyrope next to a copy of the same bytes and its peers, round-robin.

Used by ``python -m anyrope bench`` and ``benchmarks/bench_cpu.py``.
For each case (a shape and a dtype) every candidate runs in the same rounds: each round
times each candidate once, in an order that rotates from round to round, so that a change
of the machine's load or clock touches every candidate alike. A sample is enough
back-to-back calls to last about :data:`SAMPLE_SECONDS`; the report gives the median time
per call over the rounds, the interquartile range, the load average before and after, and
each time as a multiple of the copy's ("x copy": 1.0 is as fast as copying q and k into
fresh arrays, the floor of a rotation that reads and writes each element once).

Candidates: the copy; the naive Hugging Face expression ``x * cos + rotate_half(x) *
sin`` in NumPy, eager PyTorch, ``torch.compile`` and ``jax.jit`` (with cos/sin made
ahead in the input dtype, as model code keeps them); anyrope on NumPy arrays and on
PyTorch CPU tensors (a held :class:`anyrope.RoPE`, ``rope(q, k, positions)``). Peers
whose library is not installed, or that cannot run a dtype, are left out with the reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._rope import RoPE
from ._backends import HostArray, installed_version, numpy_dtype

Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128
BASE = 10000.0
DECODE_POSITION = 1000
"""The position of a decode step's token (a KV cache of 1000 tokens)."""

CASES: dict[str, tuple[int, int]] = {
    "prefill-1x4096": (1, 4096),
    "prefill-4x1024": (4, 1024),
    "small-1x128": (1, 128),
    "decode-1": (1, 1),
    "decode-32": (32, 1),
}
"""(batch, seq) of each case: q is (batch, seq, 32, 128) and k (batch, seq, 8, 128)."""

DTYPES = ("float32", "float16", "bfloat16", "float64")

SAMPLE_SECONDS = 0.004
"""The least time one sample lasts: short calls are repeated back to back until it does."""

MAX_CALLS = 2000

Peers = tuple[HostArray, ...]
"""What the peers are given: q, k and the float64 cos and sin tables."""


@dataclass
class Candidate:
    """One timed callable and its samples (seconds per call)."""

    name: str
    fn: Callable[[], object]
    calls: int = 1
    samples: list[float] = field(default_factory=list)

    def calibrate(self) -> None:
        """Warm up (compiles, first touches) and pick the calls per sample."""
        self.fn()
        self.sample()
        once = max(self.samples.pop(), 1e-7)
        self.calls = int(min(MAX_CALLS, max(1, SAMPLE_SECONDS // once)))

    def sample(self) -> None:
        fn = self.fn
        start = time.perf_counter()
        for _ in range(self.calls):
            fn()
        self.samples.append((time.perf_counter() - start) / self.calls)


@dataclass(frozen=True)
class Timing:
    """One candidate of one case: median and quartiles in ms per call, and x copy."""

    name: str
    median_ms: float
    q1_ms: float
    q3_ms: float
    x_copy: float
    gbytes_per_s: float
    calls: int


@dataclass(frozen=True)
class CaseResult:
    """Every candidate of one (case, dtype), measured in the same rounds."""

    case: str
    dtype: str
    q_shape: tuple[int, ...]
    k_shape: tuple[int, ...]
    rounds: int
    load_before: float | None
    load_after: float | None
    timings: tuple[Timing, ...]
    left_out: dict[str, str]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` after one warm-up call, in ms."""
    candidate = Candidate("", fn)
    fn()
    for _ in range(repeats):
        candidate.sample()
    return statistics.median(candidate.samples) * 1e3


def load_average() -> float | None:
    """The one-minute load average, where the system reports one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _hf_tables(seq: int, offset: int) -> tuple[HostArray, HostArray]:
    """cos/sin of shape (seq, 1, head_dim) as Hugging Face builds them, in float64."""
    inv_freq = BASE ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    angles = np.arange(offset, offset + seq, dtype=np.float64)[:, None] * inv_freq
    wide = np.concatenate((angles, angles), axis=-1)[:, None, :]
    return np.cos(wide), np.sin(wide)


def _hf_expression(cat: Callable[..., Any]) -> Callable[..., Any]:
    """``q * cos + rotate_half(q) * sin`` (and for k), with ``cat`` the library's concat."""

    def apply(q: Any, k: Any, cos: Any, sin: Any) -> Any:
        def rotate_half(x: Any) -> Any:
            half = x.shape[-1] // 2
            return cat((-x[..., half:], x[..., :half]), -1)

        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    return apply


def _candidates(
    q: HostArray, k: HostArray, positions: int | None, dtype: str
) -> tuple[list[Candidate], dict[str, str]]:
    """The candidates for one case, and those left out with the reason.

    The peers get q, k and the float64 cos/sin tables converted to ``dtype``; the
    tables are made ahead, as model code keeps them.
    """
    tables = _hf_tables(q.shape[1], positions or 0)
    rope = RoPE(HEAD_DIM, base=BASE)
    left_out: dict[str, str] = {}

    found = [Candidate("copy", lambda: (q.copy(), k.copy()))]
    if dtype == "bfloat16":
        left_out["numpy naive"] = "NumPy has no bfloat16 arithmetic of its own"
    else:
        arrays = (q, k, *(table.astype(q.dtype) for table in tables))
        found.append(Candidate("numpy naive", partial(_hf_expression(np.concatenate), *arrays)))
    found.append(Candidate("anyrope numpy", lambda: rope(q, k, positions)))
    if importlib.util.find_spec("torch") is None:
        left_out["torch"] = "PyTorch is not installed"
    else:
        found.extend(_torch_candidates((q, k, *tables), dtype, rope, positions, left_out))
    if importlib.util.find_spec("jax") is None:
        left_out["jax.jit"] = "JAX is not installed"
    else:
        found.extend(_jax_candidates((q, k, *tables), dtype, left_out))
    return found, left_out


def _torch_candidates(
    arrays: Peers, dtype: str, rope: RoPE, positions: int | None, left_out: dict[str, str]
) -> list[Candidate]:
    import torch

    tensors = [torch.from_numpy(a.astype(np.float64)).to(getattr(torch, dtype)) for a in arrays]
    expression = _hf_expression(torch.cat)
    found = [
        Candidate("torch eager", partial(expression, *tensors)),
        Candidate("anyrope torch", partial(rope, tensors[0], tensors[1], positions)),
    ]
    # A fresh start for each case: Dynamo would otherwise count every case's shapes as
    # recompilations of one function and fall back to eager after eight.
    torch._dynamo.reset()
    try:
        compiled = torch.compile(expression, dynamic=False)
        compiled(*tensors)
    except Exception as error:
        left_out["torch.compile"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    else:
        found.append(Candidate("torch.compile", partial(compiled, *tensors)))
    return found


def _jax_candidates(arrays: Peers, dtype: str, left_out: dict[str, str]) -> list[Candidate]:
    import jax
    import jax.numpy as jnp

    if dtype == "float64" and not jax.config.read("jax_enable_x64"):
        left_out["jax.jit"] = "JAX computes float64 only with jax_enable_x64"
        return []
    jax_arrays = [jnp.asarray(a, dtype=getattr(jnp, dtype)) for a in arrays]
    compiled = jax.jit(_hf_expression(jnp.concatenate))
    return [Candidate("jax.jit", lambda: jax.block_until_ready(compiled(*jax_arrays)))]


def measure_case(
    case: str, dtype: str, rounds: int, progress: Callable[[str], None] | None = None
) -> CaseResult:
    """Every candidate of one case, round-robin over ``rounds`` rounds."""
    batch, seq = CASES[case]
    rng = np.random.default_rng(0)
    numpy_type = numpy_dtype(dtype) or dtype  # NumPy's bfloat16 is ml_dtypes'
    q = rng.standard_normal((batch, seq, Q_HEADS, HEAD_DIM), dtype=np.float32).astype(numpy_type)
    k = rng.standard_normal((batch, seq, KV_HEADS, HEAD_DIM), dtype=np.float32).astype(numpy_type)
    positions = DECODE_POSITION if seq == 1 else None
    report = progress or (lambda text: None)
    report(f"{case} {dtype}: warming up")
    candidates, left_out = _candidates(q, k, positions, dtype)
    for candidate in candidates:
        candidate.calibrate()
    load_before = load_average()
    for index in range(rounds):
        report(f"{case} {dtype}: round {index + 1} of {rounds}")
        # A different candidate goes first in each round.
        shift = index % len(candidates)
        for candidate in candidates[shift:] + candidates[:shift]:
            candidate.sample()
    load_after = load_average()
    copy_median = statistics.median(candidates[0].samples)
    moved = 2 * (q.nbytes + k.nbytes)
    timings = []
    for c in candidates:
        median = statistics.median(c.samples)
        q1, q3 = statistics.quantiles(c.samples, n=4)[::2] if rounds > 1 else (median, median)
        x_copy, speed = median / copy_median, moved / median / 1e9
        timings.append(Timing(c.name, median * 1e3, q1 * 1e3, q3 * 1e3, x_copy, speed, c.calls))
    return CaseResult(
        case, dtype, q.shape, k.shape, rounds, load_before, load_after, tuple(timings), left_out
    )


def format_case(result: CaseResult) -> str:
    """An aligned text table of one case."""
    loads = (result.load_before, result.load_after)
    load = " -> ".join("n/a" if value is None else f"{value:.2f}" for value in loads)
    head = (
        f"{result.case} {result.dtype}: q {result.q_shape} + k {result.k_shape}, "
        f"median of {result.rounds} rounds, load {load}"
    )
    lines = [head, f"  {'candidate':<16} {'ms/call':>10} {'IQR ms':>17} {'x copy':>8} {'GB/s':>7}"]
    for t in result.timings:
        spread = f"{t.q1_ms:.4g}-{t.q3_ms:.4g}"
        numbers = f"{t.median_ms:>10.4g} {spread:>17} {t.x_copy:>8.2f} {t.gbytes_per_s:>7.1f}"
        lines.append(f"  {t.name:<16} {numbers}")
    lines.extend(f"  ({name} left out: {why})" for name, why in result.left_out.items())
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "anyrope": __version__,
    }
    # Linux names the CPU model in /proc/cpuinfo; elsewhere the architecture stays.
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["processor"] = line.split(":", 1)[1].strip()
                break
    for library in ("numpy", "torch", "numba", "jax"):
        if (version := installed_version(library)) is not None:
            info[library] = version
    if "torch" in info:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    return info


def write_json(path: Path, report: dict[str, Any]) -> dict[str, Any]:
    """Write ``report`` as JSON after the command (unless it says its own) and the
    :func:`machine` that produced it; returns what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join(["python", *sys.argv]), "machine": machine(), **report}
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record
