"""CPU benchmark of anyrope.attention with RoPE against the naive expression and SDPA.

    python benchmarks/bench_attention.py [--repeats 10] [--seq 1024] \
        [--json benchmarks/results/attention.json]

Causal attention with RoPE on q, k, v of shape (1, seq, 8, 64) float32 (``bshd``),
all paths measured in one run on the same inputs:

* ``anyrope.attention(q, k, v, rope=RoPE(64), causal=True)`` on NumPy and torch CPU;
* the naive expression most model code writes, ``x * cos + rotate_half(x) * sin`` then
  ``softmax(q k^T / sqrt(d) + causal mask) v``, in NumPy and in eager torch;
* ``torch.nn.functional.scaled_dot_product_attention`` on q and k rotated by
  ``anyrope.rotate_qk``.

Prints medians and ratios (a path's time over anyrope's on the same library) and each
path's largest difference from a float64 NumPy evaluation; writes JSON. The torch
paths are left out when torch is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from pathlib import Path

import numpy as np

import anyrope
from anyrope.tools._benchmark import median_ms, write_json

HEADS = 8
HEAD_DIM = 64
BASE = 10000.0


def rope_tables(seq: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin for the half-split pairing, shape (seq, 1, head_dim), float32.

    Built in float64 and rounded once, like anyrope's tables, so that every path
    rotates by the same angles and the comparison is of the attention, not the tables.
    """
    inv_freq = BASE ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = np.arange(seq, dtype=np.float64)[:, None] * inv_freq
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1).astype(np.float32)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1).astype(np.float32)
    return cos[:, None, :], sin[:, None, :]


def naive_numpy(q, k, v, *, cos, sin, mask):
    """RoPE with rotate_half, then softmax(q k^T * scale + mask) v, written out in NumPy."""

    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)

    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # to (batch, heads, seq, dim)
    scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(q.shape[-1])) + mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ v).transpose(0, 2, 1, 3)


def numpy_paths(q, k, v, *, rope, cos, sin):
    seq = q.shape[1]
    mask = np.triu(np.full((seq, seq), -np.inf, dtype=np.float32), k=1)
    return {
        "numpy naive expression": lambda: naive_numpy(q, k, v, cos=cos, sin=sin, mask=mask),
        "anyrope.attention numpy": lambda: anyrope.attention(q, k, v, rope=rope, causal=True),
    }


def torch_paths(q, k, v, *, rope, cos, sin):
    import torch
    import torch.nn.functional as F

    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tcos, tsin = torch.from_numpy(cos), torch.from_numpy(sin)
    seq = q.shape[1]
    mask = torch.full((seq, seq), -math.inf).triu(1)

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def naive():
        rq = (tq * tcos + rotate_half(tq) * tsin).transpose(1, 2)
        rk = (tk * tcos + rotate_half(tk) * tsin).transpose(1, 2)
        scores = rq @ rk.transpose(-2, -1) / math.sqrt(HEAD_DIM) + mask
        return (torch.softmax(scores, dim=-1) @ tv.transpose(1, 2)).transpose(1, 2)

    def sdpa():
        rq, rk = anyrope.rotate_qk(tq, tk)
        out = F.scaled_dot_product_attention(
            rq.transpose(1, 2), rk.transpose(1, 2), tv.transpose(1, 2), is_causal=True
        )
        return out.transpose(1, 2)

    def run(fn):
        # Autograd bookkeeping is not part of inference; no path should pay for it.
        def call():
            with torch.inference_mode():
                return fn()

        return call

    return {
        "torch naive expression": run(naive),
        "anyrope.attention torch": run(
            lambda: anyrope.attention(tq, tk, tv, rope=rope, causal=True)
        ),
        "torch SDPA + anyrope.rotate_qk": run(sdpa),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per path (median)")
    parser.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("benchmarks/results/attention.json"),
        help="where to write JSON",
    )
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((1, args.seq, HEADS, HEAD_DIM), dtype=np.float32) for _ in range(3)
    )
    rope = anyrope.RoPE(HEAD_DIM, base=BASE)
    cos, sin = rope_tables(args.seq)
    oracle = anyrope.attention(
        *(x.astype(np.float64) for x in (q, k, v)), rope=anyrope.RoPE(HEAD_DIM), causal=True
    )
    paths = numpy_paths(q, k, v, rope=rope, cos=cos, sin=sin)
    if importlib.util.find_spec("torch") is not None:
        import torch

        paths.update(torch_paths(q, k, v, rope=rope, cos=cos, sin=sin))
        threads = torch.get_num_threads()
    else:
        threads = None
        print("torch is not installed: NumPy paths only")

    rows = {}
    for name, fn in paths.items():
        error = float(np.abs(np.asarray(fn(), dtype=np.float64) - oracle).max())
        rows[name] = {"median_ms": median_ms(fn, args.repeats), "max_abs_error": error}
    print(f"{'path':<32} {'median ms':>10} {'max |error|':>12}")
    for name, row in rows.items():
        print(f"{name:<32} {row['median_ms']:>10.2f} {row['max_abs_error']:>12.1e}")

    ratios = {}
    for library in ("numpy", "torch"):
        ours = rows.get(f"anyrope.attention {library}")
        if ours is None:
            continue
        for name, row in rows.items():
            if name.startswith(library) and not name.startswith("anyrope"):
                ratios[f"{name} / anyrope.attention {library}"] = (
                    row["median_ms"] / ours["median_ms"]
                )
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")

    write_json(
        args.json,
        {
            "torch_threads": threads,
            "shape": [1, args.seq, HEADS, HEAD_DIM],
            "repeats": args.repeats,
            "paths": rows,
            "ratios": ratios,
        },
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
