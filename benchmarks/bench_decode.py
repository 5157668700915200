"""Per-call overhead of anyrope on decode shapes (one token, KV-cache offset), CPU.

    python benchmarks/bench_decode.py [--rounds 15] [--calls 2000] [--max-sample-ms 200] \
        [--quick] [--json benchmarks/results/decode.json]

One new token: q (B, 1, 32, 128) and k (B, 1, 8, 128), layout ``bshd``, B in {1, 32},
at position 1000, float32 and float16 (NumPy and torch) and bfloat16 (torch only).
Every path is measured in ONE run, round-robin: each round times every path once,
a sample being ``--calls`` back-to-back calls (fewer for a path slower than
``--max-sample-ms`` per sample, so the run stays short); the table gives the median
over the rounds and the interquartile range, in microseconds per call; ``calls`` is the
fewest calls per sample among the line's three paths, ``max|diff|`` the largest
difference of the naive result from anyrope's.

* ``naive``: what model code writes (Hugging Face's ``rotate_half``), with cos/sin
  gathered each call from a table of shape (4096, 64) precomputed in the input dtype:
  ``cos = table_cos[pos][None, :, None, :]``, ``cos2 = concat(cos, cos)``, then
  ``q * cos2 + rotate_half(q) * sin2`` (and the same for k); ``torch.cat((-x2, x1))``
  for the rotation in torch eager.
* ``rotate_qk``: ``anyrope.rotate_qk(q, k, positions=1000)``.
* ``RoPE``: a held ``rope = anyrope.RoPE(128)``, ``rope(q, k, positions=1000)``.

Each (library, dtype, B) has three lines, measured in the same rounds and divided by the
same naive time: ``positions`` is the int offset 1000; ``ids`` is what Hugging Face
passes, ``position_ids`` as an int64 array of shape (B, 1), every row at 1000; ``apart``
(B = 32 only) gives each row its own position, ``1000 + 7 * row`` (a batch of prompts of
different lengths), an array anyrope gathers rows for.

The fused lines take the output of a fused projection, ``qkv`` of shape
(B, 1, 32 + 2 * 8, 128) (query heads, then key heads, then value heads), and time
``rope.rotate_qkv(qkv, positions=1000, num_heads_q=32, inplace=True)`` against ``rope``
on views of the same buffer, ``rope(qkv[:, :, :32], qkv[:, :, 32:40], positions=1000)``
(the views made once, outside the timing), and the same in place.

The dynamic-NTK line decodes past the trained context, a new position each call
(``p = 4096, 4097, ...``, q and k at B = 1, float32):
``anyrope.RoPE(128, scaling={"rope_type": "dynamic", "factor": 2.0},
max_position_embeddings=4096)`` against the same ``RoPE(128)`` without scaling at the
same positions. Both see the same positions in each round. The frequencies and rows of
256 lengths are computed at once, and a sample is 256 consecutive tokens: each sample of
the dynamic line holds one such block, so its median is the cost spread over every
token. The unscaled ``RoPE`` grows its table once, in the first sample.

torch runs with ``torch.set_num_threads(2)``; the torch lines are left out when torch
is not installed. The default run takes about three minutes on two cores; ``--quick``
(5 rounds, at most 500 calls a sample) about 25 seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import anyrope
from anyrope.tools._benchmark import write_json

HEAD_DIM = 128
Q_HEADS = 32
KV_HEADS = 8
POSITION = 1000
TABLE_LEN = 4096
BASE = 10000.0
BATCHES = (1, 32)
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0}
TRAINED = 4096


@dataclass
class Case:
    """One timed path: a callable and the samples (ns per call) taken so far."""

    name: str
    fn: Callable[[], object]
    calls: int
    samples: list[float] = field(default_factory=list)

    def sample(self) -> None:
        fn, calls = self.fn, self.calls
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter_ns() - start
        self.samples.append(elapsed / calls / 1e3)  # microseconds per call


@dataclass(frozen=True)
class Result:
    """Median and interquartile range of one path, in microseconds per call."""

    library: str
    dtype: str
    batch: int
    path: str
    median_us: float
    iqr_us: float
    calls: int
    rounds: int
    max_abs_diff: float | None  # from anyrope's result, in float32 (None for timing only)


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def half_tables(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of shape (4096, 64), built in float64 and rounded once to ``dtype``."""
    inv_freq = BASE ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    angles = np.arange(TABLE_LEN, dtype=np.float64)[:, None] * inv_freq
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def numpy_cases(batch: int, dtype: Any, rope: anyrope.RoPE) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(batch)
    q = rng.standard_normal((batch, 1, Q_HEADS, HEAD_DIM)).astype(dtype)
    k = rng.standard_normal((batch, 1, KV_HEADS, HEAD_DIM)).astype(dtype)
    table_cos, table_sin = half_tables(dtype)
    pos = np.array([POSITION])  # position_ids of the one new token
    ids, apart = position_ids(batch)

    def rotate_half(x: np.ndarray) -> np.ndarray:
        half = x.shape[-1] // 2
        return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)

    def naive() -> tuple[np.ndarray, np.ndarray]:
        cos = table_cos[pos][None, :, None, :]
        sin = table_sin[pos][None, :, None, :]
        cos2 = np.concatenate((cos, cos), axis=-1)
        sin2 = np.concatenate((sin, sin), axis=-1)
        return q * cos2 + rotate_half(q) * sin2, k * cos2 + rotate_half(k) * sin2

    return {"naive": naive, **anyrope_cases(q, k, rope, ids=ids, apart=apart, batch=batch)}


def position_ids(batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(B, 1)`` int64 positions: every row at 1000, and rows apart (1000 + 7 * row)."""
    ids = np.full((batch, 1), POSITION, dtype=np.int64)
    return ids, ids + 7 * np.arange(batch, dtype=np.int64)[:, None]


def anyrope_cases(
    q: Any, k: Any, rope: anyrope.RoPE, *, ids: Any, apart: Any, batch: int
) -> dict[str, Callable[[], object]]:
    """anyrope's paths, by ``kind of positions/API``: the int offset, then the arrays."""
    kinds = {"positions": POSITION, "ids": ids, **({"apart": apart} if batch > 1 else {})}
    cases: dict[str, Callable[[], object]] = {}
    for kind, positions in kinds.items():
        cases[f"{kind}/rotate_qk"] = lambda p=positions: anyrope.rotate_qk(q, k, positions=p)
        cases[f"{kind}/RoPE"] = lambda p=positions: rope(q, k, positions=p)
    return cases


def torch_cases(batch: int, dtype: str, rope: anyrope.RoPE) -> dict[str, Callable[[], object]]:
    import torch

    torch_dtype = getattr(torch, dtype)
    rng = np.random.default_rng(batch)
    q = torch.from_numpy(rng.standard_normal((batch, 1, Q_HEADS, HEAD_DIM))).to(torch_dtype)
    k = torch.from_numpy(rng.standard_normal((batch, 1, KV_HEADS, HEAD_DIM))).to(torch_dtype)
    table_cos, table_sin = (torch.from_numpy(t).to(torch_dtype) for t in half_tables(np.float64))
    pos = torch.tensor([POSITION])
    ids, apart = (torch.from_numpy(p) for p in position_ids(batch))

    def rotate_half(x: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def naive() -> tuple[Any, Any]:
        cos = table_cos[pos][None, :, None, :]
        sin = table_sin[pos][None, :, None, :]
        cos2 = torch.cat((cos, cos), dim=-1)
        sin2 = torch.cat((sin, sin), dim=-1)
        return q * cos2 + rotate_half(q) * sin2, k * cos2 + rotate_half(k) * sin2

    return {"naive": naive, **anyrope_cases(q, k, rope, ids=ids, apart=apart, batch=batch)}


FUSED_PATHS = ("rotate_qkv in place", "RoPE on views", "RoPE on views in place")


def fused_cases(
    library: str, dtype: str, batch: int, rope: anyrope.RoPE
) -> dict[str, Callable[[], object]]:
    """The fused lines: ``rotate_qkv`` in place, and ``rope`` on views of its buffer."""
    host = np.random.default_rng(batch).standard_normal(
        (batch, 1, Q_HEADS + 2 * KV_HEADS, HEAD_DIM)
    )
    if library == "numpy":
        qkv = host.astype(dtype)
    else:
        import torch

        qkv = torch.from_numpy(host).to(getattr(torch, dtype))
    q, k = qkv[:, :, :Q_HEADS], qkv[:, :, Q_HEADS : Q_HEADS + KV_HEADS]
    return dict(
        zip(
            FUSED_PATHS,
            (
                lambda: rope.rotate_qkv(qkv, POSITION, num_heads_q=Q_HEADS, inplace=True),
                lambda: rope(q, k, positions=POSITION),
                lambda: rope(q, k, positions=POSITION, inplace=True),
            ),
            strict=True,
        )
    )


def as_float32(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor (bfloat16 has no NumPy dtype)
        import torch

        return x.detach().to(torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


def max_abs_diff(a: tuple[Any, Any], b: tuple[Any, Any]) -> float:
    return max(
        float(np.max(np.abs(as_float32(x) - as_float32(y)))) for x, y in zip(a, b, strict=True)
    )


class DecodeLine:
    """One timed path of the dynamic-NTK line: every call rotates the next position.

    ``start`` is shared by the paths of a line so that, in each round, all of them
    rotate the same positions; ``advance`` moves it on after the round.
    """

    def __init__(self, rope: anyrope.RoPE, q: Any, k: Any, counter: list[int]) -> None:
        self.rope, self.q, self.k, self.counter = rope, q, k, counter
        self.calls = 0
        self.samples: list[float] = []

    def sample(self) -> None:
        rope, q, k, first = self.rope, self.q, self.k, self.counter[0]
        start = time.perf_counter_ns()
        for i in range(self.calls):
            rope(q, k, positions=first + i)
        elapsed = time.perf_counter_ns() - start
        self.samples.append(elapsed / self.calls / 1e3)


def calibrate(fn: Callable[[], object], calls: int, max_sample_ms: float) -> int:
    """Calls per sample: ``calls``, or fewer so that one sample takes about max_sample_ms."""
    for _ in range(3):  # warm-up (caches, lazy imports, first-call paths)
        fn()
    start = time.perf_counter_ns()
    n = 0
    while n < 5 or time.perf_counter_ns() - start < 2e7:  # at least 20 ms
        fn()
        n += 1
        if n >= calls:
            break
    per_call_ms = (time.perf_counter_ns() - start) / n / 1e6
    return max(1, min(calls, int(max_sample_ms / per_call_ms)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="samples per path (15)")
    parser.add_argument("--calls", type=int, default=None, help="calls per sample, at most (2000)")
    parser.add_argument(
        "--max-sample-ms",
        type=float,
        default=200.0,
        help="fewer calls per sample for paths slower than this per sample (200)",
    )
    parser.add_argument(
        "--decode-tokens", type=int, default=256, help="tokens per dynamic-NTK sample (256)"
    )
    parser.add_argument("--quick", action="store_true", help="5 rounds, at most 500 calls a sample")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 15)
    max_calls = args.calls or (500 if args.quick else 2000)
    decode_tokens = args.decode_tokens

    have_torch = importlib.util.find_spec("torch") is not None
    if have_torch:
        import torch

        torch.set_num_threads(2)

    rope = anyrope.RoPE(HEAD_DIM)
    configs: list[tuple[str, str, int, dict[str, Callable[[], object]]]] = [
        ("numpy", dtype, batch, numpy_cases(batch, np.dtype(dtype), rope))
        for dtype in ("float32", "float16")
        for batch in BATCHES
    ]
    if have_torch:
        configs += [
            ("torch", dtype, batch, torch_cases(batch, dtype, rope))
            for dtype in ("float32", "float16", "bfloat16")
            for batch in BATCHES
        ]

    cases: list[tuple[tuple[str, str, int, str], Case]] = []
    diffs: dict[tuple[str, str, int, str], float] = {}
    for library, dtype, batch, paths in configs:
        reference = paths["positions/RoPE"]()
        for path, fn in paths.items():
            key = (library, dtype, batch, path)
            diffs[key] = max_abs_diff(fn(), reference)  # type: ignore[arg-type]
            cases.append((key, Case(path, fn, calibrate(fn, max_calls, args.max_sample_ms))))

    for library, dtype, batch, _ in configs:
        for path, fn in fused_cases(library, dtype, batch, rope).items():
            key = (library, dtype, batch, path)
            cases.append((key, Case(path, fn, calibrate(fn, max_calls, args.max_sample_ms))))

    # Dynamic NTK past the trained context, against no scaling at the same positions.
    dynamic = anyrope.RoPE(HEAD_DIM, scaling=DYNAMIC, max_position_embeddings=TRAINED)
    decode_lines: dict[str, tuple[list[int], dict[str, DecodeLine]]] = {}
    rng = np.random.default_rng(0)
    q1 = rng.standard_normal((1, 1, Q_HEADS, HEAD_DIM)).astype(np.float32)
    k1 = rng.standard_normal((1, 1, KV_HEADS, HEAD_DIM)).astype(np.float32)
    inputs: dict[str, tuple[Any, Any]] = {"numpy": (q1, k1)}
    if have_torch:
        inputs["torch"] = (torch.from_numpy(q1), torch.from_numpy(k1))
    for library, (q, k) in inputs.items():
        counter = [TRAINED]
        lines = {
            "RoPE, no scaling": DecodeLine(rope, q, k, counter),
            "RoPE, dynamic": DecodeLine(dynamic, q, k, counter),
        }
        for line in lines.values():
            line.calls = decode_tokens
            line.rope(q, k, positions=TRAINED - 1)  # warm-up inside the trained context
        decode_lines[library] = (counter, lines)
    first_decode = TRAINED

    started = time.perf_counter()
    for _ in range(rounds):
        for _, case in cases:
            case.sample()
        for counter, lines in decode_lines.values():
            for line in lines.values():
                line.sample()
            counter[0] += decode_tokens
    elapsed = time.perf_counter() - started

    results: list[Result] = []
    for (library, dtype, batch, path), case in cases:
        lo, mid, hi = quartiles(case.samples)
        diff = diffs.get((library, dtype, batch, path))
        results.append(Result(library, dtype, batch, path, mid, hi - lo, case.calls, rounds, diff))
    for library, (_, lines) in decode_lines.items():
        for path, line in lines.items():
            lo, mid, hi = quartiles(line.samples)
            results.append(
                Result(library, "float32", 1, path, mid, hi - lo, line.calls, rounds, None)
            )
    last_decode = next(iter(decode_lines.values()))[0][0] - 1

    print(f"anyrope {anyrope.__version__} from {anyrope.__file__}")
    print(f"numpy {np.__version__}", end="")
    if have_torch:
        print(f", torch {torch.__version__} ({torch.get_num_threads()} threads)", end="")
    print(f"; {rounds} rounds round-robin, {elapsed:.0f} s")
    print()
    print(
        "Decode step, q (B, 1, 32, 128) + k (B, 1, 8, 128) bshd at position 1000 (apart: "
        "1000 + 7 * row): median us per call [IQR]; ratio = anyrope / naive"
    )
    header = (
        f"{'library':<6} {'dtype':<8} {'B':>2} {'positions':<9} "
        f"{'naive':>17} {'rotate_qk':>17} {'RoPE':>17} "
        f"{'qk/naive':>8} {'RoPE/naive':>10} {'calls':>6} {'max|diff|':>9}"
    )
    print(header)
    print("-" * len(header))
    by_key = {(r.library, r.dtype, r.batch, r.path): r for r in results}

    def cell(r: Result) -> str:
        return f"{r.median_us:8.1f} [{r.iqr_us:6.1f}]"

    for library, dtype, batch, paths in configs:
        naive = by_key[(library, dtype, batch, "naive")]
        kinds = [path.partition("/")[0] for path in paths if path.endswith("/RoPE")]
        for kind in kinds:
            qk, held = (
                by_key[(library, dtype, batch, f"{kind}/{p}")] for p in ("rotate_qk", "RoPE")
            )
            calls = min(naive.calls, qk.calls, held.calls)
            print(
                f"{library:<6} {dtype:<8} {batch:>2} {kind:<9} {cell(naive)} {cell(qk)} "
                f"{cell(held)} {qk.median_us / naive.median_us:8.2f} "
                f"{held.median_us / naive.median_us:10.2f} {calls:>6} {naive.max_abs_diff:9.2g}"
            )
    print()
    print(
        "Fused decode step, qkv (B, 1, 32 + 2 * 8, 128) bshd at position 1000: median us "
        "per call [IQR]; ratio = rotate_qkv in place / RoPE on views"
    )
    header = (
        f"{'library':<6} {'dtype':<8} {'B':>2} "
        + " ".join(f"{path:>22}" for path in FUSED_PATHS)
        + f" {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for library, dtype, batch, _ in configs:
        fused, views, views_in_place = (
            by_key[(library, dtype, batch, path)] for path in FUSED_PATHS
        )
        print(
            f"{library:<6} {dtype:<8} {batch:>2} {cell(fused):>22} {cell(views):>22} "
            f"{cell(views_in_place):>22} {fused.median_us / views.median_us:6.2f}"
        )
    print()
    print(
        f"Dynamic NTK decode past the trained context (max_position_embeddings={TRAINED},"
        f" factor 2), one new position per call, p = {first_decode} .. {last_decode};"
        " q (1, 1, 32, 128) + k (1, 1, 8, 128) float32: median us per token [IQR]"
    )
    header = f"{'library':<6} {'no scaling':>19} {'dynamic':>19} {'dynamic/no scaling':>19}"
    print(header)
    print("-" * len(header))
    for library in decode_lines:
        plain = by_key[(library, "float32", 1, "RoPE, no scaling")]
        dyn = by_key[(library, "float32", 1, "RoPE, dynamic")]
        print(
            f"{library:<6} {plain.median_us:9.1f} [{plain.iqr_us:7.1f}] "
            f"{dyn.median_us:9.1f} [{dyn.iqr_us:7.1f}] {dyn.median_us / plain.median_us:19.2f}"
        )

    if args.json is not None:
        report = {
            "anyrope": anyrope.__version__,
            "torch": torch.__version__ if have_torch else None,
            "torch_threads": torch.get_num_threads() if have_torch else None,
            "rounds": rounds,
            "decode_positions": [first_decode, last_decode],
            "results": [asdict(r) for r in results],
        }
        write_json(args.json, report)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
